"""The server's lifecycle phase, from every source that can tell it.

Sleep, pause and weight updates are legitimate stalls: generation waits or
answers 503 for minutes or hours while the server is healthy. The sources,
each absent on some servers (absent is no evidence, never "awake"):

* ``vllm:engine_sleep_state{sleep_state=...}`` (releases from late 2025):
  set by the API process on sleep and on wake, so it is current even while
  no engine step runs; 1 on the current state.
* ``GET /is_sleeping`` and ``GET /is_paused`` (registered only with
  ``VLLM_SERVER_DEV_MODE=1``). In vLLM 0.32 ``/is_sleeping`` is also true
  while the scheduler is paused, while the sleep gauge still says awake: the
  gauge (or ``/is_paused``) tells a pause from a sleep.
* ``vllm:rl_weight_update_operations_in_flight`` above 0: weights loading,
  requests held.
* sentinel's own maintenance window (an RL controller that pauses through
  vLLM's Python API shows no pause state at all).
* vLLM's elastic EP scaling middleware: while a ``POST /scale_elastic_ep``
  runs, every path (``/health`` included) answers 503 with "The model is
  currently scaling" (:mod:`sentinel.evidence.vllm_health` reads it).

Pure: the tracker is fed readings and times and answers a
:class:`~sentinel.verdict.Lifecycle`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sentinel.evidence.metrics import SLEEP_PREFIX
from sentinel.verdict import Lifecycle, Phase

AWAKE_GAUGE = SLEEP_PREFIX + "awake"


@dataclass(frozen=True, slots=True)
class Readings:
    """The latest word of each source (None: the source is absent or unknown)."""

    gauges: Mapping[str, float] | None = None  # the last /metrics sample's gauges
    is_sleeping: bool | None = None
    is_paused: bool | None = None
    maintenance: str | None = None  # the active window's reason, if one is active
    scaling: bool | None = None  # /health answers vLLM's "currently scaling" 503


def phase_of(readings: Readings) -> tuple[Phase, str]:
    """The phase the readings show, and which source says so."""
    if readings.maintenance is not None:
        return Phase.PAUSED, f"maintenance window: {readings.maintenance}"
    if readings.scaling:
        return Phase.SCALING, "/health answers 503: the model is currently scaling"
    gauges = readings.gauges or {}
    if readings.is_paused:
        return Phase.PAUSED, "/is_paused is true"
    if gauges.get("weight_updates", 0.0) > 0:
        return Phase.PAUSED, "a weight update is in flight"
    asleep = sorted(
        key[len(SLEEP_PREFIX) :]
        for key, value in gauges.items()
        if key.startswith(SLEEP_PREFIX) and key != AWAKE_GAUGE and value > 0
    )
    if asleep:
        return Phase.ASLEEP, f"vllm:engine_sleep_state is {asleep[0]}"
    if readings.is_sleeping:
        if gauges.get(AWAKE_GAUGE, 0.0) > 0:
            # 0.32 answers /is_sleeping true while paused; the gauge says awake.
            return Phase.PAUSED, "/is_sleeping is true while the sleep gauge says awake"
        return Phase.ASLEEP, "/is_sleeping is true"
    return Phase.AWAKE, ""


@dataclass(slots=True)
class LifecycleTracker:
    """Follows the phase across readings; remembers since when and the last resume."""

    readings: Readings = field(default_factory=Readings)
    current: Lifecycle = field(default_factory=Lifecycle)

    def reset(self) -> None:
        """A new server epoch: whatever it was doing is over."""
        self.readings, self.current = Readings(), Lifecycle()

    def update(self, readings: Readings, now: float) -> Lifecycle:
        self.readings = readings
        phase, why = phase_of(readings)
        current = self.current
        if phase is current.phase:
            self.current = Lifecycle(phase, current.since, why or current.why, current.resumed_at)
        elif phase is Phase.AWAKE:
            self.current = Lifecycle(phase, now, "", resumed_at=now)
        else:
            self.current = Lifecycle(phase, now, why, current.resumed_at)
        return self.current
