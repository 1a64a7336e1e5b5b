"""The engine rule: a canary unanswered while the engine made no progress.

Three ways to confirm it. The hang window (15 s): the oldest canary unanswered
since the last success and the last progress (decode progress where the
server tells decode apart; a prompt prefilled in chunks counts), or the
longer no-evidence window without fresh progress evidence. The step window
(8 s, the *still engine*): where vLLM exposes the tokens its engine steps
process, every step that yields a token moves a work counter and every step
refreshes the running and waiting gauges, so a text canary that waited with
no counter moving and both gauges at 0 has a stopped engine loop behind it.
The frozen window (5 s, the *frozen engine*): no counter moving and the
engine's processes using no CPU at all, whatever the gauges show.
A canary aimed at one data-parallel engine counts against the whole server
only once every engine has left one unanswered (:mod:`sentinel.verdict.aim`).
The reasoning is in docs/design.md ("Verdict semantics").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from sentinel.canary.result import CanaryResult, Reason
from sentinel.knob import DAY, seconds, setting
from sentinel.verdict.aim import answered, sends, server_wide
from sentinel.verdict.aim import sends as aimed_sends
from sentinel.verdict.answers import epoch_results, or_never, unanswered
from sentinel.verdict.clock import observed
from sentinel.verdict.knobs import HangWindow
from sentinel.verdict.model import Action, Evidence, Hang, HangKind, KindEvidence
from sentinel.verdict.rule import Gate, HangRule
from sentinel.verdict.sections import SectionKey
from sentinel.verdict.stall import floor as window_floor


@dataclass(frozen=True, slots=True)
class EngineCpuSection:
    """Whether the engine's processes use any CPU, as the ``engine_cpu`` section holds it.

    They used (next to) no CPU and none ran from ``idle_since`` to ``sampled_at``,
    the newest process sample (None: they used some). ``unknown``: why that cannot
    be told ('' when it can); an absent section cannot tell either.
    """

    idle_since: float | None = None
    sampled_at: float | None = None
    unknown: str = "not told"


# The evidence section (sentinel.record.process_readings, from sentinel.evidence.engine_cpu).
ENGINE_CPU: Final = SectionKey("engine_cpu", EngineCpuSection)


class EngineKnobs(HangWindow):
    """The engine rule's knobs."""

    step_window: float = seconds(
        8.0,
        "A text canary unanswered this long while the engine took not a single step beyond "
        "sentinel's own canaries (no work counter moved but what they explain) is an engine "
        "hang without waiting for the whole hang window.",
        1.0,
        DAY,
    )
    frozen_window: float = seconds(
        5.0,
        "A text canary unanswered this long while no work counter moved and the engine's "
        "processes used no CPU at all (a blocked engine loop) is an engine hang without "
        "waiting for the step or hang window; needs the engine's processes in view.",
        1.0,
        DAY,
    )
    no_evidence_window: float = seconds(
        30.0, "The engine-hang window where the server shows no progress evidence.", 1.0, DAY
    )
    engine_policy: Action = setting(
        Action.RESTART, "What an engine hang does: restart, unready or alert."
    )


def engine_hang(evidence: Evidence, policy: EngineKnobs, now: float) -> Hang | None:
    """The oldest canary unanswered since the last success and the last progress, if old enough.

    Without fresh progress evidence the longer no-evidence window applies,
    counted from the last moment evidence was seen: a server whose canaries
    queued while its counters moved has earned that long.

    Where the server tells decode apart (it counts first tokens), only decode
    progress vouches: decoded tokens or completions beyond sentinel's own. A
    server whose decode is stuck still prefills each new arrival and may give
    it a first token, so with other clients arriving its prompt, first-token
    and engine-step counters never stay flat. A healthy server decodes for
    every running request past its prefill at every step, however slowly,
    and one whose requests end at their first token completes them.
    """
    enabled = evidence.enabled
    results = epoch_results(evidence, enabled)
    last_success = max((r.finished for r in results if r.ok), default=float("-inf"))
    # A deliberate refusal (not admission: a hung engine fills its queue to the
    # cap) is the server there and answering on purpose: its state's own rule
    # owns it (sentinel.verdict.hangs.refused), so it ends an unanswered run as
    # an answer would. Only unaimed ones: an aimed one speaks for its engine.
    last_success = max(
        last_success,
        max(
            (r.finished for r in results if r.reason is Reason.REFUSED and r.engine is None),
            default=float("-inf"),
        ),
    )
    # Without fresh evidence, old progress no longer vouches for canaries
    # still unanswered; the lapse itself starts their clock instead.
    if not evidence.progress_available:
        last_progress = float("-inf")
    elif evidence.decode_available:
        last_progress = or_never(evidence.last_decode_at)
    else:
        last_progress = or_never(evidence.last_progress_at)
    # A prompt prefilled in chunks is work that moves no counter.
    last_progress = max(last_progress, or_never(evidence.last_prefill_at))
    floor = max(last_success, last_progress, window_floor(evidence))
    sends = aimed_sends(filter(unanswered, results), enabled)
    for sooner in (frozen_engine, still_engine):  # each picks its own canaries
        found = sooner(evidence, enabled, results, last_success, policy, now)
        if found is not None:
            return found
    candidates = server_wide(evidence, sends, floor, answered(results))
    if not candidates:
        return None
    since = min(candidates)
    if evidence.progress_available:
        window = policy.hang_window
        basis = "no decode progress" if evidence.decode_available else "no engine progress"
    else:
        window, basis = policy.no_evidence_window, "no progress evidence"
        since = max(since, or_never(evidence.last_evidence_at))
    elapsed = observed(since, now, evidence.unobserved)
    if elapsed < window:
        return None
    return Hang(
        HangKind.ENGINE,
        policy.engine_policy,
        f"engine hang: canary unanswered for {elapsed:.0f}s with {basis}",
        since,
    )


def still_engine(
    evidence: Evidence,
    enabled: Sequence[KindEvidence],
    results: Sequence[CanaryResult],
    last_success: float,
    policy: EngineKnobs,
    now: float,
) -> Hang | None:
    """A text canary that waited the step window while the engine took not one step.

    Where tokens processed by engine steps are exposed and were seen moving in
    this epoch, every engine step that yields a token moves a work counter: a
    healthy engine serving a short request yields one within a fraction of a
    second, a slow one too (2 s per token is a token every 2 s), and a busy
    one's running requests keep its counters moving whatever the canary's
    place in the queue. So a canary that waited this long with no counter
    moving beyond what sentinel's canaries explain has a stopped engine loop
    behind it, and the whole hang window need not pass. A step that served
    only sentinel's own canary (its prefill and first token) excuses nothing:
    a decode loop that died after the first token gives every canary exactly
    that step, then drops it when it times out.

    Only while the engine's running and waiting gauges are both 0, so it does
    not even show the canary it was sent: vLLM records no counter for a step
    that produced no token, so a healthy engine prefilling one long prompt in
    chunks moves nothing for as long as that takes and a canary waits behind
    it, but such an engine refreshes its gauges every step and shows both.
    An engine that hung with requests in it (its gauges frozen above 0) is
    left to the hang window.

    Only what samples covered counts (from the send to the newest sample),
    only canaries that waited (in flight or timed out: a fast failure may
    never have reached the engine), and only text canaries: a path canary may
    wait in grammar compilation or image preprocessing, before the engine,
    while the engine idles; its path has its own rule.
    """
    if not evidence.steps_available or not evidence.queue_empty:
        return None
    if not evidence.steps_seen or evidence.sampled_at is None:
        return None  # never seen beating: a heartbeat that may not be one
    resumed = evidence.lifecycle.resumed_at
    floor = max(
        last_success,
        or_never(evidence.last_step_at),
        evidence.epoch_started,
        float("-inf") if resumed is None else resumed,
    )
    candidates = _timed_out_controls(evidence, enabled, results, floor)
    if not candidates:
        return None
    since = min(candidates)
    elapsed = observed(since, min(now, evidence.sampled_at), evidence.unobserved)
    if elapsed < min(policy.step_window, policy.hang_window):
        return None
    return Hang(
        HangKind.ENGINE,
        policy.engine_policy,
        f"engine hang: canary unanswered for {elapsed:.0f}s with no engine step at all",
        since,
    )


def frozen_engine(
    evidence: Evidence,
    enabled: Sequence[KindEvidence],
    results: Sequence[CanaryResult],
    last_success: float,
    policy: EngineKnobs,
    now: float,
) -> Hang | None:
    """A text canary that waited the frozen window while the engine stood still.

    The strongest evidence of no step: since the canary was sent no work
    counter moved beyond sentinel's own work, no prompt was
    prefilled, and the engine's processes used no CPU and none ran
    (:mod:`sentinel.evidence.engine_cpu`), while ``/metrics`` kept answering
    (the API server is alive and the counters were read). A working engine
    burns CPU through every step, long prefills and slow decodes included,
    and one with nothing to do wakes for the canary; an engine waiting on a
    compiler, asleep, paused or updating weights is held by the rule's gates.
    So the engine loop is blocked, whether the engine holds requests (gauges
    frozen above 0) or none. The window counts from the later of the send and
    the engine's last sign of life (a counter moving, a prefill, CPU used): a
    canary in flight when the engine stopped waited through the standstill,
    and the next one would wait its deadline behind it. Where the engine's processes are not in view
    (the ``engine_cpu`` section absent or ``unknown``) the step and hang windows apply.
    """
    cpu = evidence.section(ENGINE_CPU) or EngineCpuSection()
    idle_since, cpu_at = cpu.idle_since, cpu.sampled_at
    if idle_since is None or cpu_at is None or cpu.unknown:
        return None
    if not evidence.steps_available or evidence.sampled_at is None:
        return None
    resumed = evidence.lifecycle.resumed_at
    floor = max(last_success, evidence.epoch_started, float("-inf") if resumed is None else resumed)
    candidates = _timed_out_controls(evidence, enabled, results, floor)
    if not candidates:
        return None
    # Counted from the later of the send and the engine's last sign of life: a
    # canary sent before the engine stopped waited through the whole standstill.
    since = max(
        min(candidates),
        idle_since,
        or_never(evidence.last_step_at),
        or_never(evidence.last_prefill_at),
    )
    elapsed = observed(since, min(now, cpu_at, evidence.sampled_at), evidence.unobserved)
    if elapsed < min(policy.frozen_window, policy.step_window, policy.hang_window):
        return None
    return Hang(
        HangKind.ENGINE,
        policy.engine_policy,
        f"engine hang: a canary unanswered through {elapsed:.0f}s with no work counter "
        "moving and the engine's processes using no CPU",
        since,
    )


def _timed_out_controls(
    evidence: Evidence,
    enabled: Sequence[KindEvidence],
    results: Sequence[CanaryResult],
    floor: float,
) -> list[float]:
    """When the text controls that timed out since ``floor`` were sent, server-wide.

    What the still and frozen engines count from: only canaries of kinds that
    are not paths (a path's wait may be its own, before the engine).
    """
    paths = {k.kind for k in enabled if k.path}
    waited = sends(
        (r for r in results if r.reason is Reason.TIMEOUT and r.kind not in paths),
        (k for k in enabled if not k.path),
    )
    return server_wide(evidence, waited, floor, answered(results))


RULE = HangRule(
    "engine",
    engine_hang,
    EngineKnobs,
    kinds=(HangKind.ENGINE,),
    action="engine_policy",
    windows=("hang_window", "step_window", "frozen_window", "no_evidence_window"),
    off_when=frozenset({Gate.STALLED, Gate.COMPILING}),
    evidence="a canary unanswered (timed out, 5xx, reset, no token) while no decode progress "
    "(or, with no engine step at all, for the step window; with the engine's processes "
    "using no CPU either, for the frozen window)",
)
