"""The hang rules of docs/design.md's "Verdict semantics", one function per confirmed kind.

Each rule reads frozen :class:`~sentinel.verdict.model.Evidence` and returns a
:class:`~sentinel.verdict.model.Hang` or None. Windows are measured in
observed time (:func:`~sentinel.verdict.clock.observed`).

What a canary's failure means is decided here once:

* *unanswered* (engine hang): it timed out, answered 5xx, was reset or came
  back with zero generated tokens; it proves the engine did not serve it.
  A refusal is not (nothing listened: the *listener down* rule), nor is a
  reply that generated tokens but failed validation (the engine worked).
* *fast failure* (broken): an answer that came quickly without a generated
  token (5xx, reset, empty reply, garbage).

A canary aimed at one data-parallel engine (``CanaryResult.engine``) and left
unanswered is evidence against that engine only: the partial rule counts it
for its engine alone, and the engine rule (the whole server) counts aimed
canaries only once every engine has left one unanswered and no other engine
worked after it was sent. Unaimed canaries count against every engine.

An engine *worked* when its own progress vouched for it or a canary aimed at
it was answered (:mod:`sentinel.verdict.aim`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from sentinel.canary.kinds import is_path
from sentinel.canary.result import CanaryResult, Reason
from sentinel.verdict.aim import answered, server_wide, worked_since
from sentinel.verdict.aim import sends as aimed_sends
from sentinel.verdict.api_server import api_server
from sentinel.verdict.clock import held_for, observed
from sentinel.verdict.corrupt import corrupt_hang
from sentinel.verdict.model import (
    EngineProgress,
    Evidence,
    Hang,
    HangKind,
    KindEvidence,
    Policy,
)
from sentinel.verdict.stall import compiling, lifecycle_bound
from sentinel.verdict.stall import floor as window_floor
from sentinel.verdict.starved import starved
from sentinel.verdict.still import still_engine

FAST_FAILURES = frozenset({Reason.HTTP_STATUS, Reason.PROTOCOL, Reason.EMPTY, Reason.BAD_BODY})
UNANSWERED = FAST_FAILURES | {Reason.TIMEOUT}

# A path canary whose tokens arrive this many times slower than the text
# control's is making no progress of its own; slower-but-streaming at the
# engine's pace is a slow server, which the path rule must never fail.
PACE_FACTOR = 10.0


def unanswered(result: CanaryResult) -> bool:
    """Whether a result proves the engine did not serve the canary."""
    if result.reason is Reason.HTTP_STATUS:
        return result.http_status is None or result.http_status >= 500
    return result.reason in UNANSWERED


def fast_failure(result: CanaryResult) -> bool:
    """A quick answer without any generated token (5xx, reset, empty, garbage)."""
    if result.reason is Reason.HTTP_STATUS:
        return result.http_status is None or result.http_status >= 500
    return result.reason in FAST_FAILURES


def confirmed_hangs(
    evidence: Evidence,
    enabled: Sequence[KindEvidence],
    policy: Policy,
    now: float,
    *,
    startup_passed: bool,
) -> Iterable[Hang]:
    """Every hang confirmed at ``now``, engine first.

    A path kind that has not worked in this epoch is never hung: a path that
    never worked on this server is a startup failure, with its reason. The
    engine-side rules need no startup: the kubelet ignores liveness until
    its own startup probe passed, and a sidecar restarted beside a server
    that hung meanwhile must still see the hang. While the server is asleep
    or paused only the rules that need no generation stay on (dead, listener
    down), and the stall itself is judged against its bound.
    """
    stalled = evidence.lifecycle.stalled
    engine_side = not stalled and not compiling(evidence, policy, now)
    found: list[Hang | None] = [lifecycle_bound(evidence, policy, now)]
    if engine_side:
        found += [rule(evidence, enabled, policy, now) for rule in ENGINE_RULES]
    if not stalled:
        floor = window_floor(evidence)
        # A canary stuck on a connection a stuck API-server process holds says
        # nothing of its path: the API-server rule names that process.
        found += [
            path_hang(k, floor, policy, now, evidence.unobserved)
            for k in enabled
            if is_path(k.kind) and evidence.api_stuck_since is None
        ]
        found += [rule(evidence, enabled, policy, now) for rule in (corrupt_hang, broken)]
    found.append(dead(evidence, enabled, policy, now))
    found.append(api_server(evidence, enabled, policy, now))
    if startup_passed:
        found.append(listener_down(evidence, policy, now))
    yield from (hang for hang in found if hang is not None)


def _epoch_results(evidence: Evidence, enabled: Sequence[KindEvidence]) -> list[CanaryResult]:
    return [r for k in enabled for r in k.results if r.started >= evidence.epoch_started]


def engine_hang(
    evidence: Evidence, enabled: Sequence[KindEvidence], policy: Policy, now: float
) -> Hang | None:
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
    results = _epoch_results(evidence, enabled)
    last_success = max((r.finished for r in results if r.ok), default=float("-inf"))
    # Without fresh evidence, old progress no longer vouches for canaries
    # still unanswered; the lapse itself starts their clock instead.
    if not evidence.progress_available:
        last_progress = float("-inf")
    elif evidence.decode_available:
        last_progress = _or_never(evidence.last_decode_at)
    else:
        last_progress = _or_never(evidence.last_progress_at)
    # A prompt prefilled in chunks is work that moves no counter.
    last_progress = max(last_progress, _or_never(evidence.last_prefill_at))
    floor = max(last_success, last_progress, window_floor(evidence))
    sends = aimed_sends(filter(unanswered, results), enabled)
    candidates = server_wide(evidence, sends, floor, answered(results))
    if not candidates:
        return None
    still = still_engine(evidence, enabled, results, last_success, policy, now)
    if still is not None:
        return still
    since = min(candidates)
    if evidence.progress_available:
        window = policy.hang_window
        basis = "no decode progress" if evidence.decode_available else "no engine progress"
    else:
        window, basis = policy.no_evidence_window, "no progress evidence"
        since = max(since, _or_never(evidence.last_evidence_at))
    elapsed = observed(since, now, evidence.unobserved)
    if elapsed < window:
        return None
    return Hang(
        HangKind.ENGINE,
        policy.engine_policy,
        f"engine hang: canary unanswered for {elapsed:.0f}s with {basis}",
        since,
    )


def partial_hang(
    evidence: Evidence, enabled: Sequence[KindEvidence], policy: Policy, now: float
) -> Hang | None:
    """One engine's own work flat for the hang window, a canary unanswered, another engine working.

    Data parallelism spreads requests over engines, so one stuck engine
    leaves its share hanging forever while the others answer: canaries that
    land elsewhere succeed, total progress moves, and the engine-hang rule
    (rightly) sees a working server. Per engine (vLLM's ``engine`` label):
    an engine is stuck when a canary that could have gone to it (aimed at
    it, or unaimed) and was sent after it last worked is still unanswered
    after the hang window while another engine worked since that canary was
    sent. An engine works when its own progress vouches for it (beyond
    sentinel's canaries; only its decode progress where it counts first
    tokens, since an engine whose decode is stuck still prefills arrivals)
    or it answers a canary aimed at it. vLLM's balancer steers new requests
    away from an engine whose requests never finish, so only canaries aimed
    at it (the scheduler aims at every engine) reliably reach a stuck one.
    An idle engine is not stuck: it answers the canaries aimed at it. A
    canary aimed at a busy engine and lost behind its queue is no evidence
    against it while its decode keeps moving, and none at all against the
    others. When no engine worked either, it is the whole
    server's hang, which is the engine rule's.
    """
    if len(evidence.engines) < 2 or not evidence.progress_available:
        return None
    results = _epoch_results(evidence, enabled)
    sends = aimed_sends(filter(unanswered, results), enabled)
    answers = answered(results)
    stuck: list[tuple[EngineProgress, float]] = []
    for engine in evidence.engines:
        flat_since = max(
            engine.first_seen_at if engine.vouched_at is None else engine.vouched_at,
            answers.get(engine.engine, float("-inf")),
            window_floor(evidence),
        )
        # Unaimed canaries may have gone to any engine; an aimed one only to its own.
        candidates = [
            sent
            for sent, aim in sends
            if sent >= flat_since and (aim is None or str(aim) == engine.engine)
        ]
        if not candidates:
            continue
        since = min(candidates)
        working = any(
            worked_since(other, since, answers) for other in evidence.engines if other is not engine
        )
        if working and observed(since, now, evidence.unobserved) >= policy.hang_window:
            stuck.append((engine, since))
    if not stuck:
        return None
    since = min(s for _, s in stuck)
    elapsed = observed(since, now, evidence.unobserved)
    named = [e.engine for e, _ in stuck]
    others = [e.engine for e in evidence.engines if e.engine not in named]
    return Hang(
        HangKind.PARTIAL,
        policy.partial_policy,
        f"partial hang: {_engines(named)} made no progress for {elapsed:.0f}s with a canary "
        f"unanswered; other engines progressed ({', '.join(others)})",
        since,
        engines=tuple(int(e) for e in named if e.isdigit()),
    )


def _engines(labels: Sequence[str]) -> str:
    """``engine 1`` or ``engine 1, engine 2``: each stuck engine named the one way bundles read.

    Only stuck engines are named so (the working ones are listed bare), since
    a bundle learns which engine is stuck from the reason alone.
    """
    return ", ".join(f"engine {label}" for label in labels)


def path_missed(result: CanaryResult, control: CanaryResult | None) -> bool:
    """Whether a path canary made no progress of its own while its text control succeeded.

    A path canary that streams tokens at the engine's current pace is slow,
    not hung; one that produced nothing (no first token before its deadline,
    a 5xx, a reset, an empty reply) or whose tokens came far slower than the
    control's is a miss.
    """
    if control is None or not control.ok or result.ok:
        return False
    if result.reason is not Reason.TIMEOUT:
        return fast_failure(result)
    if result.ttft is None:
        return True  # nothing arrived before the deadline
    if not result.tokens_received:
        return False  # a first token came; how many followed is unknown
    own_rate = result.tokens_received / max(result.duration - result.ttft, 1e-3)
    return own_rate * PACE_FACTOR < _rate(control)


def _rate(control: CanaryResult) -> float:
    """The control's tokens per second after its first token (0 when unknown)."""
    tokens = control.completion_tokens or control.tokens_received or 0
    decode = control.duration - (control.ttft or 0.0)
    return tokens / max(decode, 1e-3)


def path_hang(
    k: KindEvidence,
    floor: float,
    policy: Policy,
    now: float,
    unobserved: tuple[tuple[float, float], ...] = (),
) -> Hang | None:
    """The path's last canaries made no progress beside passing controls.

    Either the last ``path_misses`` canaries all missed, or the last one,
    still awaited for its late answer (no other canary of the kind is sent
    meanwhile), has waited ``path_misses`` hang windows: a slow path (images
    preprocessed one at a time behind real image load) answers late, and a
    late answer is an answer. Never for a kind that has not succeeded since
    ``floor`` (a path that never worked on this server is a startup
    failure), nor for canaries sent before real traffic on the path last got
    through (``traffic_at``).
    """
    pairs = [(r, c) for r, c in zip(k.results, k.controls, strict=False) if r.started >= floor]
    if not any(r.ok for r, _ in pairs) or not pairs:
        return None
    last = pairs[-policy.path_misses :]
    newest, control = last[-1]
    if newest.awaiting_late:
        waited = observed(newest.started, now, unobserved)
        if waited < policy.path_misses * policy.hang_window or not path_missed(newest, control):
            return None
        last = [last[-1]]
        what = f"a canary unanswered for {waited:.0f}s"
    elif len(last) < policy.path_misses or not all(path_missed(r, c) for r, c in last):
        return None
    else:
        what = f"{policy.path_misses} canaries made no progress"
    if k.traffic_at is not None and any(r.started < k.traffic_at for r, _ in last):
        return None  # real requests on the path got through after these were sent
    return Hang(
        HangKind(k.kind.value),
        k.action,
        f"{k.kind.value} path hang: {what} while text controls succeeded",
        last[0][0].started,
    )


def dead(
    evidence: Evidence, enabled: Sequence[KindEvidence], policy: Policy, now: float
) -> Hang | None:
    """vLLM's ``/health`` failing or an engine process down for longer than the grace."""
    causes = (
        (evidence.health_failing_since, "vLLM /health failing", (), ()),
        (
            evidence.engine_down_since,
            evidence.engine_down_detail or "engine process down",
            evidence.down_engines,
            evidence.down_ranks,
        ),
    )
    for since, what, engines, ranks in causes:
        elapsed = held_for(since, policy.dead_grace, now, evidence.unobserved)
        if elapsed is not None and since is not None:
            reason = f"engine dead: {what} for {elapsed:.0f}s"
            return Hang(HangKind.DEAD, policy.dead_policy, reason, since, engines, ranks)
    return None


def broken(
    evidence: Evidence, enabled: Sequence[KindEvidence], policy: Policy, now: float
) -> Hang | None:
    """Every canary failing fast for the broken window while nothing else completes."""
    results = [
        r
        for r in _epoch_results(evidence, enabled)
        if r.reason not in (Reason.UNSUPPORTED, Reason.INCONCLUSIVE)
    ]
    floor = max(
        max((r.finished for r in results if r.ok), default=float("-inf")),
        _or_never(evidence.last_real_completion_at),
        window_floor(evidence),
    )
    # Every canary: the window runs over the newest unbroken run of fast
    # failures; a refusal or a timeout among them belongs to another rule.
    run: list[float] = []
    for r in sorted((r for r in results if r.started >= floor), key=lambda r: r.started):
        run = [*run, r.started] if fast_failure(r) else []
    if not run:
        return None
    since = run[0]
    elapsed = held_for(since, policy.broken_window, now, evidence.unobserved)
    if elapsed is None:
        return None
    return Hang(
        HangKind.BROKEN,
        policy.broken_policy,
        f"broken: every canary failed fast for {elapsed:.0f}s and no other request completed",
        since,
    )


def listener_down(evidence: Evidence, policy: Policy, now: float) -> Hang | None:
    """Connections refused past the grace while the API-server process lives."""
    since = evidence.refused_since
    elapsed = held_for(since, policy.listener_grace, now, evidence.unobserved)
    if since is None or elapsed is None or evidence.api_alive is not True:
        return None
    return Hang(
        HangKind.LISTENER_DOWN,
        policy.listener_policy,
        f"listener down: connections refused for {elapsed:.0f}s while the API server lives",
        since,
    )


def _or_never(at: float | None) -> float:
    return float("-inf") if at is None else at


Rule = Callable[[Evidence, Sequence[KindEvidence], Policy, float], Hang | None]

#: The rules that judge the engine's own work: off while asleep, paused or compiling.
ENGINE_RULES: tuple[Rule, ...] = (engine_hang, partial_hang, starved)
