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
* canaries refused with vLLM's paused 503 (0.33+: ``/pause`` in ``abort`` or
  ``wait`` mode, and 0.34's ``--checkpoint-prepare-on-startup``), the one
  source without ``VLLM_SERVER_DEV_MODE``; the newest canary's answer only.
* vLLM's elastic EP scaling middleware: while a ``POST /scale_elastic_ep``
  runs, every path answers 503 with "The model is currently scaling"
  (``/health`` too in 0.32: :mod:`sentinel.evidence.vllm_health` reads it; in
  0.33+ ``/health`` is exempt and the canaries' and ``/metrics``' 503s tell it,
  the *gate*), and ``POST /is_scaling_elastic_ep`` names the phase
  (:mod:`sentinel.evidence.elastic_ep`, asked only while a gate or a scale is
  seen). A scale whose commit failed leaves the gate up for good: phase
  ``scaling`` with :data:`SCALE_FAILED_WHY`, a hang at once
  (:mod:`sentinel.verdict.hangs.scaling`). In 0.33+ a rank scaled away is
  *retired*: every path but ``/health`` answers 503 "This data-parallel rank
  has been retired", phase ``retired``; but vLLM marks it so before its
  commit returns, so while the route says the scale runs it is phase
  ``scaling`` (:data:`RETIRING_WHY`, bounded), and ``retired`` once the route
  says the scale ended or gives no word (then "cannot tell").

Pure: the tracker is fed readings and times and answers a
:class:`~sentinel.verdict.Lifecycle`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from sentinel.canary.refusal import Refusal
from sentinel.evidence.elastic_ep import RUNNING, ScaleStatus
from sentinel.evidence.metrics import SLEEP_PREFIX
from sentinel.verdict import Lifecycle, Phase
from sentinel.verdict.hangs.refused import IS_PAUSED_WHY
from sentinel.verdict.hangs.scaling import RETIRING_WHY, SCALE_FAILED_WHY
from sentinel.verdict.hangs.wake import SLEEPING_BUT_AWAKE_WHY
from sentinel.verdict.hangs.weight_update import WEIGHT_UPDATE_WHY

AWAKE_GAUGE = SLEEP_PREFIX + "awake"
# How long a lifecycle endpoint that stopped answering keeps its last word: a
# missed poll or two never flips a paused server to awake (windows restarting,
# readiness flapping), and a stale "asleep" never hides a hang for longer.
KEEP_WORD = 10.0
# How long after a scale was last seen a vLLM counter going down is the scale-up's
# re-created stat loggers (every counter restarts at 0), not a new server: the drop
# shows on the first /metrics answered after the gate lifted.
SCALE_RESET_WINDOW = 60.0
RETIRED_WHY = (
    "this data-parallel rank has been retired and is awaiting shutdown (vLLM answers 503 on "
    "every path but /health): its scale-down owns it"
)


@dataclass(frozen=True, slots=True)
class Readings:
    """The latest word of each source (None: the source is absent or unknown)."""

    gauges: Mapping[str, float] | None = None  # the last /metrics sample's gauges
    is_sleeping: bool | None = None
    is_paused: bool | None = None
    maintenance: str | None = None  # the active window's reason, if one is active
    scaling: bool | None = None  # /health answers vLLM's "currently scaling" 503
    # The scaling middleware's latest word on a path it gates (a canary, /metrics):
    # SCALING or RETIRED; None: the path answered past it (or nothing said yet).
    gate: Refusal | None = None
    gate_at: float | None = None  # when the gate was last seen up
    scale: ScaleStatus | None = None  # POST /is_scaling_elastic_ep's latest answer
    scale_problem: str = ""  # the route is there but gave no word (a 503, a timeout)
    # The newest canary was refused with vLLM's paused 503 (0.33+ /pause in abort or
    # wait mode, 0.34's checkpoint-paused start): its message; None otherwise. Its word
    # lasts KEEP_WORD past its answer (``paused_refusal_at``) unless a newer one refreshes
    # it: under real traffic after a /resume no canary may come to say it ended.
    paused_refusal: str | None = None
    paused_refusal_at: float | None = None
    # vLLM fault tolerance: a rank waits for its orchestrator's retry (an engine
    # unhealthy or diagnosing in its status, or 0.34's faulted 503 alone): why.
    recovering: str | None = None
    # Lifecycle endpoints that exist but stopped answering (a timeout, a 5xx), each
    # with what went wrong; their last word above is kept for KEEP_WORD seconds
    # (a paused server whose /is_paused missed a poll is not judged awake), then
    # they are no evidence, and the views say sentinel cannot tell.
    unanswered: tuple[str, ...] = ()


def phase_of(readings: Readings) -> tuple[Phase, str]:
    """The phase the readings show, and which source says so."""
    if readings.maintenance is not None:
        return Phase.PAUSED, f"maintenance window: {readings.maintenance}"
    if readings.gate is Refusal.RETIRED:
        retiring = _retiring_why(readings.scale)
        return (Phase.SCALING, retiring) if retiring else (Phase.RETIRED, RETIRED_WHY)
    scaling = _scaling_why(readings)
    if scaling:
        return Phase.SCALING, scaling
    if readings.recovering:  # sentinel.record.fault_tolerance
        return Phase.RECOVERING, readings.recovering
    gauges = readings.gauges or {}
    # A weight update first: a trainer pauses, then updates, and the update's
    # own bound (sentinel.verdict.hangs.weight_update) times it from its start.
    if gauges.get("weight_updates", 0.0) > 0:
        return Phase.PAUSED, WEIGHT_UPDATE_WHY
    asleep = _asleep_states(gauges)
    if asleep:  # a sleep pauses the scheduler first: /is_paused is true in it too
        return Phase.ASLEEP, f"vllm:engine_sleep_state is {asleep[0]}"
    if readings.is_paused:
        return Phase.PAUSED, IS_PAUSED_WHY
    if readings.paused_refusal:
        return Phase.PAUSED, f"canaries refused: {readings.paused_refusal}"
    if readings.is_sleeping:
        if gauges.get(AWAKE_GAUGE, 0.0) > 0:
            # 0.32 answers /is_sleeping true while paused; the gauge says awake.
            return Phase.PAUSED, SLEEPING_BUT_AWAKE_WHY
        return Phase.ASLEEP, "/is_sleeping is true"
    return Phase.AWAKE, ""


@dataclass(slots=True)
class LifecycleTracker:
    """Follows the phase across readings; remembers since when and the last resume."""

    readings: Readings = field(default_factory=Readings)
    current: Lifecycle = field(default_factory=Lifecycle)
    scaled_at: float | None = None  # when a scale (or a retired rank) was last seen

    def reset(self) -> None:
        """A new server epoch: whatever it was doing is over."""
        self.readings, self.current, self.scaled_at = Readings(), Lifecycle(), None

    def counters_reset_by_scale(self, now: float) -> bool:
        """Whether counters going down at ``now`` are a scale-up's re-created stat loggers
        (vLLM restarts every counter at 0), not a new server: a scale was seen lately."""
        return self.scaled_at is not None and now - self.scaled_at <= SCALE_RESET_WINDOW

    def refused(self, now: float) -> bool:
        """Whether a paused refusal is a word still kept at ``now``: only a canary can
        see it end, so the scheduler sends the idle-gated one whatever the traffic."""
        return _paused_refusal_kept(self.readings, now)

    def follow(self, now: float) -> None:
        """Time passing: a paused refusal not refreshed for KEEP_WORD is no longer evidence."""
        if self.readings.paused_refusal is not None and not self.refused(now):
            self.update(self.readings, now)

    def update(self, readings: Readings, now: float) -> Lifecycle:
        if _woke(self.readings, readings):
            # The sleep gauge turned awake: the endpoints' last words were polled
            # in the sleep (a sleep pauses the scheduler), so they say nothing now.
            readings = replace(readings, is_sleeping=None, is_paused=None)
        if readings.paused_refusal is not None and not _paused_refusal_kept(readings, now):
            readings = replace(readings, paused_refusal=None, paused_refusal_at=None)
        self.readings = readings
        phase, why = phase_of(readings)
        current = self.current
        cannot, cannot_since = "", None
        if phase in (Phase.SCALING, Phase.RETIRED):
            self.scaled_at = now
        silent = readings.unanswered + ((readings.scale_problem,) if readings.scale_problem else ())
        if silent:
            cannot_since = current.cannot_tell_since if current.cannot_tell else now
            kept = keeps_word(cannot_since, now)
            cannot = "cannot tell: " + "; ".join(silent)
            cannot += " (its last word kept)" if kept else " (judged without it)"
        if phase is Phase.SCALING and current.phase is Phase.RETIRED:
            # The gate said retired before the route said the commit still runs: the
            # scale is timed from the gate's first sighting.
            self.current = Lifecycle(
                phase, current.since, why, current.resumed_at, now, cannot, cannot_since
            )
        elif phase is current.phase:
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


def _scaling_why(readings: Readings) -> str:
    """Why the readings show a scale ("" where they show none)."""
    status, gated = readings.scale, readings.gate is Refusal.SCALING
    if status is not None and status.failed and (gated or readings.scaling):
        # The commit failed and the gate never lifted: every request is refused for good.
        return (
            f"{SCALE_FAILED_WHY} (POST /is_scaling_elastic_ep: {status.describe()}): "
            f"{status.error or 'no error given'}; the scaling gate is still up"
        )
    # The gate is the word on serving (external EP prepares new ranks while the old
    # ones still serve); the route only names the phase.
    if not (readings.scaling or gated):
        return ""
    if readings.scaling:
        said = "/health answers 503: the model is currently scaling"
    else:
        said = "vLLM's scaling middleware answers 503: the model is currently scaling"
    if status is not None and (status.scaling or status.phase):
        said = f"elastic EP {status.describe()}; {said}"
    return said


def _retiring_why(status: ScaleStatus | None) -> str:
    """Why a rank the gate calls retired is still mid-scale ("" where the route does not
    say so): vLLM marks it retired before its commit returns (``AsyncLLM._scale_elastic_ep``)."""
    if status is None or not (status.scaling or status.phase in RUNNING):
        return ""
    return (
        f"{RETIRING_WHY} and its commit has not returned (POST /is_scaling_elastic_ep: "
        f"{status.describe()}); vLLM's middleware answers 503: retired"
    )


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


def _paused_refusal_kept(readings: Readings, now: float) -> bool:
    """Whether the readings' paused refusal is still its word at ``now`` (KEEP_WORD past it)."""
    at = readings.paused_refusal_at
    return readings.paused_refusal is not None and (at is None or now - at < KEEP_WORD)


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
