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
from dataclasses import dataclass, field, replace

from sentinel.evidence.metrics import SLEEP_PREFIX
from sentinel.verdict import Lifecycle, Phase
from sentinel.verdict.hangs.weight_update import WEIGHT_UPDATE_WHY

AWAKE_GAUGE = SLEEP_PREFIX + "awake"
# How long a lifecycle endpoint that stopped answering keeps its last word: a
# missed poll or two never flips a paused server to awake (windows restarting,
# readiness flapping), and a stale "asleep" never hides a hang for longer.
KEEP_WORD = 10.0


@dataclass(frozen=True, slots=True)
class Readings:
    """The latest word of each source (None: the source is absent or unknown)."""

    gauges: Mapping[str, float] | None = None  # the last /metrics sample's gauges
    is_sleeping: bool | None = None
    is_paused: bool | None = None
    maintenance: str | None = None  # the active window's reason, if one is active
    scaling: bool | None = None  # /health answers vLLM's "currently scaling" 503
    # Lifecycle endpoints that exist but stopped answering (a timeout, a 5xx), each
    # with what went wrong; their last word above is kept for KEEP_WORD seconds
    # (a paused server whose /is_paused missed a poll is not judged awake), then
    # they are no evidence, and the views say sentinel cannot tell.
    unanswered: tuple[str, ...] = ()


def phase_of(readings: Readings) -> tuple[Phase, str]:
    """The phase the readings show, and which source says so."""
    if readings.maintenance is not None:
        return Phase.PAUSED, f"maintenance window: {readings.maintenance}"
    if readings.scaling:
        return Phase.SCALING, "/health answers 503: the model is currently scaling"
    gauges = readings.gauges or {}
    # A weight update first: a trainer pauses, then updates, and the update's
    # own bound (sentinel.verdict.hangs.weight_update) times it from its start.
    if gauges.get("weight_updates", 0.0) > 0:
        return Phase.PAUSED, WEIGHT_UPDATE_WHY
    asleep = _asleep_states(gauges)
    if asleep:  # a sleep pauses the scheduler first: /is_paused is true in it too
        return Phase.ASLEEP, f"vllm:engine_sleep_state is {asleep[0]}"
    if readings.is_paused:
        return Phase.PAUSED, "/is_paused is true"
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
        if _woke(self.readings, readings):
            # The sleep gauge turned awake: the endpoints' last words were polled
            # in the sleep (a sleep pauses the scheduler), so they say nothing now.
            readings = replace(readings, is_sleeping=None, is_paused=None)
        self.readings = readings
        phase, why = phase_of(readings)
        current = self.current
        cannot, cannot_since = "", None
        if readings.unanswered:
            cannot_since = current.cannot_tell_since if current.cannot_tell else now
            kept = keeps_word(cannot_since, now)
            cannot = "cannot tell: " + "; ".join(readings.unanswered)
            cannot += " (its last word kept)" if kept else " (judged without it)"
        if phase is current.phase:
            why = why or current.why
            why_since = current.why_since if why == current.why else now
            self.current = Lifecycle(
                phase, current.since, why, current.resumed_at, why_since, cannot, cannot_since
            )
        elif phase is Phase.AWAKE:
            self.current = Lifecycle(phase, now, "", now, None, cannot, cannot_since)
        else:
            self.current = Lifecycle(phase, now, why, current.resumed_at, now, cannot, cannot_since)
        return self.current


def _asleep_states(gauges: Mapping[str, float] | None) -> list[str]:
    """The sleep states other than awake the sleep gauge shows (sorted)."""
    return sorted(
        key[len(SLEEP_PREFIX) :]
        for key, value in (gauges or {}).items()
        if key.startswith(SLEEP_PREFIX) and key != AWAKE_GAUGE and value > 0
    )


def _woke(before: Readings, after: Readings) -> bool:
    """Whether ``after`` is a new sample with the sleep gauge turned awake, the
    lifecycle endpoints' words carried over from before it."""
    return (
        bool(_asleep_states(before.gauges))
        and (after.gauges or {}).get(AWAKE_GAUGE, 0.0) > 0
        and not _asleep_states(after.gauges)
        and (after.is_sleeping, after.is_paused) == (before.is_sleeping, before.is_paused)
    )


def keeps_word(silent_since: float | None, now: float) -> bool:
    """Whether an endpoint silent since ``silent_since`` still keeps its last word."""
    return silent_since is None or now - silent_since < KEEP_WORD


def heard(
    path: str, fresh: bool | None, last: bool | None, unanswered: tuple[str, ...], keep: bool
) -> bool | None:
    """The word to record for ``path`` from a poll: its answer, or if it gave none while
    there, its last word while :func:`keeps_word` (None after)."""
    if not any(u.startswith(f"GET {path}:") for u in unanswered):
        return fresh
    return last if keep else None
