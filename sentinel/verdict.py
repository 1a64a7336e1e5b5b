"""The verdict: a pure function from evidence, policy and "now" to kubelet answers.

Nothing here does I/O, reads a clock or touches asyncio: the daemon gathers
:class:`Evidence`, calls :func:`evaluate` with the previous :class:`VerdictState`
and publishes what comes back. That keeps every rule of DESIGN.md's "Verdict
semantics" testable with tables and exact times.

Rules, in the order they are applied:

* A new server epoch (restart seen by the daemon) resets everything except the
  restart-loop brake's memory of earlier hang episodes.
* Windows count only time sentinel itself observed: after sentinel's own
  process stalled (``observed_since``), every window starts afresh, so a
  starved sidecar never mistakes its own pause for a hung server.
* *engine hang*: some canary has been unanswered (outstanding or timed out) for
  the confirmation window while no canary succeeded and no progress signal
  moved since it was sent. Without progress evidence (metrics absent or
  unreachable) the longer ``no_evidence_window`` applies.
* *path hang* (every path kind of the registry, e.g. structured and
  multimodal): the last ``path_misses`` canaries of the kind timed out while
  each paired text control succeeded. The hang is named after the canary kind.
* *engine dead*: vLLM's ``/health`` failing, or an engine process stopped,
  zombie or gone, for longer than ``dead_grace``.
* Liveness fails only for confirmed hangs whose action is ``restart``, when
  enforcing, and unless the restart-loop brake is engaged.
* Readiness fails before startup, on any confirmed ``restart``/``unready``
  hang (unless observe-only), while the brake is engaged, and when recent canaries fail or run over
  their latency SLO (out after ``ready_out_after`` bad results, back after
  ``ready_back_after`` good ones).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import ClassVar

from sentinel.canary.kinds import is_path, path_kinds
from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind, OpenName


class HangKind(OpenName):
    """What was confirmed; also the ``kind`` label of ``sentinel_hang_detections_total``.

    ``engine`` and ``dead`` are the verdict's own; a path hang takes the name
    of its canary kind, so a kind added to the registry brings its hang kind
    with it (see :func:`hang_kinds`).
    """

    __slots__ = ()
    ENGINE: ClassVar[HangKind]
    DEAD: ClassVar[HangKind]


HangKind.ENGINE = HangKind("engine")
HangKind.DEAD = HangKind("dead")


def hang_kinds() -> tuple[HangKind, ...]:
    """Every hang the verdict can confirm with the kinds registered now, engine first."""
    return (HangKind.ENGINE, *(HangKind(k) for k in path_kinds()), HangKind.DEAD)


class Action(StrEnum):
    """What a confirmed hang of a kind does to the kubelet answers."""

    RESTART = "restart"  # fail liveness (and readiness)
    UNREADY = "unready"  # fail readiness only
    ALERT = "alert"  # report only


@dataclass(frozen=True, slots=True)
class ProbeAnswer:
    """One kubelet-facing answer: pass or fail, and a short human reason."""

    ok: bool
    reason: str
    since: float = 0.0  # when this answer last flipped


@dataclass(frozen=True, slots=True)
class KindEvidence:
    """What sentinel saw of one canary kind since the current server epoch began."""

    kind: CanaryKind
    action: Action = Action.RESTART
    enabled: bool = True
    results: tuple[CanaryResult, ...] = ()  # oldest first
    outstanding: tuple[float, ...] = ()  # send times of canaries still in flight
    # For structured and multimodal: the paired text control of each result
    # (aligned with ``results``; None when no control was sent).
    controls: tuple[CanaryResult | None, ...] = ()
    latency_slo: float | None = None


@dataclass(frozen=True, slots=True)
class Evidence:
    """Everything the verdict may use, gathered by the daemon at one instant."""

    epoch: int = 0  # increments on every server (re)start the daemon sees
    epoch_started: float = 0.0
    kinds: Mapping[CanaryKind, KindEvidence] = field(default_factory=dict)
    progress_available: bool = False  # a fresh /metrics sample with progress counters
    last_progress_at: float | None = None
    health_failing_since: float | None = None  # vLLM /health non-200 since
    engine_down_since: float | None = None  # engine process stopped/zombie/gone since
    engine_down_detail: str = ""
    # Since when sentinel itself has run without stalling. Time sentinel did
    # not see (its own process starved or paused) proves nothing about the
    # server, so no hang window counts from before it.
    observed_since: float = float("-inf")


@dataclass(frozen=True, slots=True)
class Policy:
    """Thresholds of the verdict (DESIGN.md defaults)."""

    enforce: bool = True
    hang_window: float = 15.0
    no_evidence_window: float = 30.0
    dead_grace: float = 5.0
    path_misses: int = 2
    ready_out_after: int = 2
    ready_back_after: int = 3
    brake_max_restarts: int = 3
    brake_window: float = 3600.0
    engine_action: Action = Action.RESTART
    dead_action: Action = Action.RESTART


@dataclass(frozen=True, slots=True)
class Hang:
    """A confirmed hang: its kind, the action its policy takes, and why."""

    kind: HangKind
    action: Action
    reason: str
    since: float  # when the condition started (e.g. the oldest unanswered canary)


@dataclass(frozen=True, slots=True)
class VerdictState:
    """What the verdict remembers between evaluations."""

    epoch: int = -1
    startup_passed: bool = False
    degraded: bool = False  # readiness hysteresis output
    bad_streak: int = 0
    good_streak: int = 0
    judged_until: float = float("-inf")  # finish time of the newest result judged
    episodes: tuple[float, ...] = ()  # starts of enforced liveness-red episodes
    in_episode: bool = False
    braked: bool = False
    confirmed: frozenset[HangKind] = frozenset()
    liveness: ProbeAnswer = ProbeAnswer(True, "no hang confirmed")
    readiness: ProbeAnswer = ProbeAnswer(False, "startup has not passed")
    startup: ProbeAnswer = ProbeAnswer(False, "waiting for every canary kind to succeed")


@dataclass(frozen=True, slots=True)
class Verdict:
    """The answers plus what changed, for views, metrics, logs and Events."""

    liveness: ProbeAnswer
    readiness: ProbeAnswer
    startup: ProbeAnswer
    hangs: tuple[Hang, ...] = ()
    new_hangs: tuple[Hang, ...] = ()  # confirmed in this evaluation
    brake_engaged: bool = False
    would_restart: bool = False  # a restart-action hang under observe-only mode
    new_epoch: bool = False


def evaluate(
    state: VerdictState, evidence: Evidence, policy: Policy, now: float
) -> tuple[VerdictState, Verdict]:
    """Judge the evidence at ``now``; return the next state and the verdict."""
    new_epoch = evidence.epoch != state.epoch
    if new_epoch:
        state = VerdictState(
            epoch=evidence.epoch,
            episodes=state.episodes,
            liveness=_flip(state.liveness, ProbeAnswer(True, "no hang confirmed"), now),
            readiness=_flip(state.readiness, ProbeAnswer(False, "startup has not passed"), now),
            startup=_flip(
                state.startup,
                ProbeAnswer(False, "waiting for every canary kind to succeed"),
                now,
            ),
        )

    enabled = [k for k in evidence.kinds.values() if k.enabled]
    hangs = tuple(_confirmed_hangs(evidence, enabled, policy, now))
    new_hangs = tuple(h for h in hangs if h.kind not in state.confirmed)

    # Startup: every enabled kind succeeded at least once in this epoch.
    missing = sorted(
        k.kind.value
        for k in enabled
        if not any(r.ok and r.started >= evidence.epoch_started for r in k.results)
    )
    startup_passed = state.startup_passed or (bool(enabled) and not missing)
    if startup_passed:
        startup = ProbeAnswer(True, "every canary kind succeeded")
    else:
        startup = ProbeAnswer(False, "waiting for canary kinds: " + ", ".join(missing))

    # Restart-loop brake and liveness.
    restart_hangs = [h for h in hangs if h.action is Action.RESTART]
    episodes, in_episode, braked = state.episodes, state.in_episode, state.braked
    if restart_hangs and policy.enforce and not in_episode:
        recent = tuple(t for t in episodes if now - t < policy.brake_window)
        in_episode = True
        braked = len(recent) >= policy.brake_max_restarts
        episodes = recent if braked else (*recent, now)
    elif not restart_hangs:
        in_episode, braked = False, False

    if restart_hangs and policy.enforce and not braked:
        liveness = ProbeAnswer(False, _describe(restart_hangs))
    elif restart_hangs and braked:
        liveness = ProbeAnswer(
            True,
            f"restart-loop brake: {len(episodes)} hang restarts within "
            f"{policy.brake_window:.0f}s; not failing liveness again",
        )
    elif restart_hangs:
        liveness = ProbeAnswer(True, "observe-only: would restart: " + _describe(restart_hangs))
    else:
        liveness = ProbeAnswer(True, "no hang confirmed")

    # Readiness hysteresis over canary results newer than the last judged one.
    degraded, bad, good, judged = _hysteresis(state, enabled, policy, evidence.epoch_started)
    # Observe-only mode changes no kubelet answer because of a hang: it reports.
    unready_hangs = [
        h for h in hangs if h.action in (Action.RESTART, Action.UNREADY) and policy.enforce
    ]
    if not startup_passed:
        readiness = ProbeAnswer(False, "startup has not passed")
    elif braked:
        readiness = ProbeAnswer(False, "restart-loop brake engaged: " + _describe(restart_hangs))
    elif unready_hangs:
        readiness = ProbeAnswer(False, _describe(unready_hangs))
    elif degraded:
        readiness = ProbeAnswer(False, "degraded: recent canaries failed or were slow")
    else:
        readiness = ProbeAnswer(True, "serving")

    next_state = replace(
        state,
        startup_passed=startup_passed,
        degraded=degraded,
        bad_streak=bad,
        good_streak=good,
        judged_until=judged,
        episodes=episodes,
        in_episode=in_episode,
        braked=braked,
        confirmed=frozenset(h.kind for h in hangs),
        liveness=_flip(state.liveness, liveness, now),
        readiness=_flip(state.readiness, readiness, now),
        startup=_flip(state.startup, startup, now),
    )
    verdict = Verdict(
        liveness=next_state.liveness,
        readiness=next_state.readiness,
        startup=next_state.startup,
        hangs=hangs,
        new_hangs=new_hangs,
        brake_engaged=braked,
        would_restart=bool(restart_hangs) and not policy.enforce,
        new_epoch=new_epoch,
    )
    return next_state, verdict


def _confirmed_hangs(
    evidence: Evidence, enabled: list[KindEvidence], policy: Policy, now: float
) -> Iterable[Hang]:
    engine = _engine_hang(evidence, enabled, policy, now)
    if engine is not None:
        yield engine
    for k in enabled:
        if is_path(k.kind):
            path = _path_hang(k, max(evidence.epoch_started, evidence.observed_since), policy)
            if path is not None:
                yield path
    dead = _dead(evidence, policy, now)
    if dead is not None:
        yield dead


def _engine_hang(
    evidence: Evidence, enabled: list[KindEvidence], policy: Policy, now: float
) -> Hang | None:
    """The oldest canary sent after the last success and the last progress, if old enough."""
    results = [r for k in enabled for r in k.results if r.started >= evidence.epoch_started]
    last_success = max((r.finished for r in results if r.ok), default=float("-inf"))
    if evidence.progress_available:
        window = policy.hang_window
        last_progress = (
            evidence.last_progress_at if evidence.last_progress_at is not None else float("-inf")
        )
    else:
        window, last_progress = policy.no_evidence_window, float("-inf")
    floor = max(last_success, last_progress, evidence.epoch_started)
    unanswered = [r.started for r in results if r.reason is Reason.TIMEOUT]
    unanswered += [sent for k in enabled for sent in k.outstanding]
    candidates = [sent for sent in unanswered if sent >= floor]
    if not candidates:
        return None
    since = max(min(candidates), evidence.observed_since)
    if now - since < window:
        return None
    basis = "no engine progress" if evidence.progress_available else "no progress evidence"
    return Hang(
        HangKind.ENGINE,
        policy.engine_action,
        f"engine hang: canary unanswered for {now - since:.0f}s with {basis}",
        since,
    )


def _path_hang(k: KindEvidence, epoch_started: float, policy: Policy) -> Hang | None:
    pairs = [
        (r, c) for r, c in zip(k.results, k.controls, strict=False) if r.started >= epoch_started
    ]
    last = pairs[-policy.path_misses :]
    if len(last) < policy.path_misses:
        return None
    if all(r.reason is Reason.TIMEOUT and c is not None and c.ok for r, c in last):
        return Hang(
            HangKind(k.kind.value),
            k.action,
            f"{k.kind.value} path hang: {policy.path_misses} canaries missed their deadline "
            "while text controls succeeded",
            last[0][0].started,
        )
    return None


def _dead(evidence: Evidence, policy: Policy, now: float) -> Hang | None:
    causes = (
        (evidence.health_failing_since, "vLLM /health failing"),
        (evidence.engine_down_since, evidence.engine_down_detail or "engine process down"),
    )
    for since, what in causes:
        if since is None:
            continue
        since = max(since, evidence.observed_since)
        if now - since >= policy.dead_grace:
            reason = f"engine dead: {what} for {now - since:.0f}s"
            return Hang(HangKind.DEAD, policy.dead_action, reason, since)
    return None


def _hysteresis(
    state: VerdictState, enabled: list[KindEvidence], policy: Policy, epoch_started: float
) -> tuple[bool, int, int, float]:
    """Feed each new result into the out-after-N-bad / back-after-M-good counter."""
    fresh = sorted(
        (
            (r.finished, _bad(r, k.latency_slo))
            for k in enabled
            for r in k.results
            if r.finished > state.judged_until
            and r.started >= epoch_started
            and r.reason is not Reason.UNSUPPORTED
        ),
        key=lambda item: item[0],
    )
    degraded, bad, good = state.degraded, state.bad_streak, state.good_streak
    judged = state.judged_until
    for finished, is_bad in fresh:
        judged = finished
        if is_bad:
            bad, good = bad + 1, 0
            if bad >= policy.ready_out_after:
                degraded = True
        else:
            bad, good = 0, good + 1
            if good >= policy.ready_back_after:
                degraded = False
    return degraded, bad, good, judged


def _bad(result: CanaryResult, slo: float | None) -> bool:
    return not result.ok or (slo is not None and result.duration > slo)


def _describe(hangs: Iterable[Hang]) -> str:
    return "; ".join(h.reason for h in hangs)


def _flip(previous: ProbeAnswer, current: ProbeAnswer, now: float) -> ProbeAnswer:
    """Keep the flip time while the pass/fail state stays the same."""
    since = previous.since if previous.ok == current.ok else now
    return ProbeAnswer(current.ok, current.reason, since)
