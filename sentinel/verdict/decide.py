"""The evaluation: confirmed hangs, the restart-loop brake, the restart budget and readiness."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from sentinel.canary.refusal import Refusal
from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import TEXT
from sentinel.verdict.cause import cause_key, describe, escalation, recent
from sentinel.verdict.hangs.refused import server_paused
from sentinel.verdict.model import (
    Action,
    Evidence,
    Hang,
    Ineffective,
    KindEvidence,
    Phase,
    ProbeAnswer,
    Verdict,
    VerdictState,
)
from sentinel.verdict.policy import Policy
from sentinel.verdict.registry import confirmed_hangs, readiness_word, served_since_resume
from sentinel.verdict.rule import Point, Standing
from sentinel.verdict.sections import SectionKey

# Results that say nothing about the server's health: the model takes no such
# input, or a reasoning model spent the canary's tokens thinking.
# Neither good nor bad for readiness: a kind the model cannot do, a reply that
# proves nothing, and a refusal at vLLM's admission cap (load shedding: a replica
# at its cap stays in the endpoints, or a pool at peak loses every replica at once).
NOT_JUDGED = frozenset({Reason.UNSUPPORTED, Reason.INCONCLUSIVE, Reason.ADMISSION})
PAUSED_START = "startup is earned once it resumes; ready after every canary kind succeeded"
RESTART_ASKED = "a restart was asked for; the restarted server earns its startup afresh"
# Why nothing answers ('' while it does), quoted by startup (sentinel.record.reachability).
REACHABILITY: SectionKey[str] = SectionKey("reachability", str)


def evaluate(
    state: VerdictState, evidence: Evidence, policy: Policy, now: float
) -> tuple[VerdictState, Verdict]:
    """Judge the evidence at ``now``; return the next state and the verdict."""
    new_epoch = evidence.epoch != state.epoch
    if new_epoch:
        state = _new_epoch(state, evidence.epoch, now)
    enabled = evidence.enabled
    startup_passed, served, startup = _startup(state, evidence)
    hangs = tuple(confirmed_hangs(evidence, policy, now, startup_passed=state.startup_passed))
    restart = _restart(state, hangs, evidence, policy, now)
    if restart.wanted and not restart.held and startup.ok:
        # The kubelet asks /startupz only of a container it just started: while
        # liveness asks for a restart, that is the restarted server, which earns
        # its startup afresh (it may ask before sentinel sees the old one gone).
        startup = ProbeAnswer(False, RESTART_ASKED)
    # Readiness hysteresis over canary results newer than the last judged one.
    degraded, bad, good, judged = _hysteresis(state, enabled, policy, evidence.epoch_started)
    started = (startup_passed, served)
    readiness = _readiness(evidence, policy, hangs, restart, started, degraded, now)
    next_state = replace(
        state,
        startup_passed=startup_passed,
        served=served,
        degraded=degraded,
        bad_streak=bad,
        good_streak=good,
        judged_until=judged,
        restarts=restart.restarts,
        causes=restart.causes,
        red_in_epoch=restart.red,
        red_cause=restart.red_cause,
        in_episode=restart.in_episode,
        braked=restart.braked,
        ineffective=restart.ineffective,
        confirmed=frozenset(h.kind for h in hangs),
        liveness=_flip(state.liveness, restart.liveness, now),
        readiness=_flip(state.readiness, readiness, now),
        startup=_flip(state.startup, startup, now),
    )
    verdict = Verdict(
        liveness=next_state.liveness,
        readiness=next_state.readiness,
        startup=next_state.startup,
        hangs=hangs,
        new_hangs=tuple(h for h in hangs if h.kind not in state.confirmed),
        brake_engaged=restart.braked,
        ineffective=restart.ineffective,
        would_restart=bool(restart.hangs) and not policy.enforce,
        new_epoch=new_epoch,
        restart_wanted=restart.wanted,
        budget_held=restart.held,
    )
    return next_state, verdict


def _new_epoch(state: VerdictState, epoch: int, now: float) -> VerdictState:
    """Everything forgotten but the brake's memory of real restarts.

    A real restart is a new server identity after an enforced red episode;
    the first evaluation (epoch -1) and red-free restarts are not counted.
    """
    red = state.red_in_epoch
    restarts = (*state.restarts, now) if red else state.restarts
    _, causes = recent(state.restarts, state.causes, float("inf"), now)
    return VerdictState(
        epoch=epoch,
        restarts=restarts,
        causes=(*causes, state.red_cause) if red else causes,
        liveness=_flip(state.liveness, ProbeAnswer(True, "no hang confirmed"), now),
        readiness=_flip(state.readiness, ProbeAnswer(False, "startup has not passed"), now),
        startup=_flip(
            state.startup,
            ProbeAnswer(False, "waiting for the text canary to succeed", settling=True),
            now,
        ),
    )


def _unstarted(evidence: Evidence) -> list[KindEvidence]:
    """The enabled kinds with no success in this epoch, by name."""
    return sorted(
        (
            k
            for k in evidence.enabled
            if not any(r.ok and r.started >= evidence.epoch_started for r in k.results)
        ),
        key=lambda k: k.kind.value,
    )


def _startup(state: VerdictState, evidence: Evidence) -> tuple[bool, bool, ProbeAnswer]:
    """(every kind passed, the server served, the ``/startupz`` answer); each, once so, stays.

    ``/startupz`` passes once the server has shown that it serves: the text
    canary (tokens produced) passed in this epoch, so a restarted server is
    not held out of liveness for its slowest path's first compile. Every
    other kind still has to pass before readiness counts the server
    (:func:`_readiness_waits`). Without a text kind, startup waits for all.
    """
    unstarted = _unstarted(evidence)
    passed = state.startup_passed or (bool(evidence.enabled) and not unstarted)
    texts = [k for k in evidence.enabled if k.kind == TEXT]
    served = passed or state.served or (bool(texts) and texts[0] not in unstarted)
    if not served and evidence.lifecycle.phase is Phase.PAUSED and server_paused(evidence):
        # Started paused (vLLM 0.34 --checkpoint-prepare-on-startup) until its
        # orchestrator restores: the model loaded and the server is there, so the
        # kubelet's startup budget is not spent waiting; readiness stays red. Only
        # the server's own word: a maintenance window or the weight-update gauge
        # says nothing of a load that may hang (the kubelet never asks again).
        return (
            False,
            False,
            ProbeAnswer(True, f"started paused ({evidence.lifecycle.why}): {PAUSED_START}"),
        )
    if not served:
        missing = ", ".join(_why_not_started(k, evidence.epoch_started) for k in unstarted)
        # Why nothing answers at all, where that is so (sentinel.record.reachability's section).
        words = evidence.section(REACHABILITY)
        head = f"target unreachable: {words}; " if words else ""
        waiting = head + "waiting for canary kinds: " + missing
        return False, False, ProbeAnswer(False, waiting, settling=True)
    aside = [
        f"{k.kind.value} ({k.disabled_reason})"
        for k in evidence.kinds.values()
        if not k.enabled and k.disabled_reason
    ]
    fell_back = [f"{k.kind.value} ({k.fallback})" for k in evidence.enabled if k.fallback]
    waits = ", ".join(k.kind.value for k in unstarted)
    said = (
        "every canary kind succeeded"
        if passed
        else f"the server serves (the text canary passed); readiness waits on {waits}"
    )
    said += "; fell back: " + ", ".join(fell_back) if fell_back else ""
    said += "; set aside: " + ", ".join(aside) if aside else ""
    return passed, True, ProbeAnswer(True, said)


def _readiness_waits(evidence: Evidence) -> str:
    """``readiness waits on structured: not yet passed since the restart`` (with each's last)."""
    since = "the restart" if evidence.epoch > 0 else "sentinel started"
    waits = ", ".join(_why_not_started(k, evidence.epoch_started) for k in _unstarted(evidence))
    return f"readiness waits on {waits}: not yet passed since {since}"


def _settling(evidence: Evidence) -> bool:
    """Whether every kind readiness waits on has its canary in flight right now."""
    waits = _unstarted(evidence)
    return bool(waits) and all(k.outstanding for k in waits)


@dataclass(frozen=True, slots=True)
class _Restart:
    """What the confirmed restart hangs do to liveness: the brake and the restart budget."""

    hangs: tuple[Hang, ...]
    restarts: tuple[float, ...]
    causes: tuple[str, ...]  # each restart's cause (sentinel.verdict.cause)
    in_episode: bool
    braked: bool
    ineffective: Ineffective | None  # braked for a cause its restarts did not fix
    red: bool
    red_cause: str
    wanted: bool
    held: bool
    liveness: ProbeAnswer


def _restart(
    state: VerdictState,
    hangs: Sequence[Hang],
    evidence: Evidence,
    policy: Policy,
    now: float,
) -> _Restart:
    """The restart-loop brake, the pool's restart budget and liveness."""
    restart_hangs = tuple(h for h in hangs if h.action is Action.RESTART)
    restarts, causes = recent(state.restarts, state.causes, policy.brake_window, now)
    in_episode, braked, red = state.in_episode, state.braked, state.red_in_epoch
    ineffective, red_cause = state.ineffective, state.red_cause
    if restart_hangs and policy.enforce and not in_episode:
        in_episode = True
        braked = len(restarts) >= policy.brake_max_restarts
        # Keyed by the cause as well as the count: the same hang after each restart.
        limit = policy.brake_max_restarts
        ineffective = escalation(causes, restart_hangs, evidence, limit) if braked else None
    elif not restart_hangs:
        in_episode, braked, ineffective = False, False, None
    # The pool's restart budget: a restart it holds keeps liveness green, unready.
    wanted = bool(restart_hangs) and policy.enforce and not braked
    gate = evidence.restart_gate
    held = wanted and not gate.open
    if wanted and not held:
        liveness = ProbeAnswer(False, _describe(restart_hangs))
        # The cause of the red flip: what the restart that follows is for.
        red, red_cause = True, cause_key(restart_hangs) if state.liveness.ok else red_cause
    elif held:
        liveness = ProbeAnswer(True, gate.reason + "; not failing liveness until a slot frees")
    elif restart_hangs and braked:
        liveness = ProbeAnswer(
            True,
            f"restart-loop brake: {len(restarts)} hang restarts within "
            f"{policy.brake_window:.0f}s; not failing liveness again"
            + (f"; {describe(ineffective)}" if ineffective else ""),
        )
    elif restart_hangs:
        liveness = ProbeAnswer(True, "observe-only: would restart: " + _describe(restart_hangs))
    else:
        liveness = ProbeAnswer(True, "no hang confirmed")
    return _Restart(
        restart_hangs,
        restarts,
        causes,
        in_episode,
        braked,
        ineffective,
        red,
        red_cause,
        wanted,
        held,
        liveness,
    )


def _readiness(
    evidence: Evidence,
    policy: Policy,
    hangs: Sequence[Hang],
    restart: _Restart,
    started: tuple[bool, bool],
    degraded: bool,
    now: float,
) -> ProbeAnswer:
    """Readiness, in order of what an operator most needs to read first.

    ``started``: every kind passed in this epoch, and the text canary passed.
    A state a rule owns (a scale, a weight update, an idle sleep, a refusal
    nobody taught sentinel) is that rule's word, asked at its declared point
    (:class:`~sentinel.verdict.rule.Readiness`).
    """
    startup_passed, served = started
    life = evidence.lifecycle
    if not startup_passed and life.phase is Phase.PAUSED:
        return ProbeAnswer(False, f"started paused: {life.why}")
    if not startup_passed and served:
        return ProbeAnswer(False, _readiness_waits(evidence), settling=_settling(evidence))
    if not startup_passed:
        return ProbeAnswer(False, "startup has not passed")
    # Observe-only mode changes no kubelet answer because of a hang: it reports.
    heeded = tuple(
        h for h in hangs if h.action in (Action.RESTART, Action.UNREADY) and policy.enforce
    )
    standing = Standing(evidence, tuple(hangs), heeded, _hangs_say(evidence, restart, heeded))
    said = readiness_word(Point.STATE, standing, policy, now)
    if said is not None:
        return said
    if life.stalled:
        return ProbeAnswer(False, f"{life.phase.value}: {life.why}")
    if standing.hangs_say is not None:
        return standing.hangs_say
    said = readiness_word(Point.CANNOT_TELL, standing, policy, now)
    if said is not None:
        return said
    # After a wake-up or a resume every kind passes again before ready; a
    # readiness gate only (the kubelet runs no second startup probe), so a
    # server that hangs on wake-up is still a liveness matter.
    resumed = life.resumed_at
    unproven = sorted(
        k.kind.value
        for k in evidence.enabled
        if resumed is not None and not any(r.ok and r.started >= resumed for r in k.results)
    )
    if unproven and not served_since_resume(evidence):
        return ProbeAnswer(False, "resumed; waiting for canary kinds: " + ", ".join(unproven))
    if degraded:
        return ProbeAnswer(False, "degraded: recent canaries failed or were slow")
    return ProbeAnswer(True, "serving")


def _hangs_say(evidence: Evidence, restart: _Restart, heeded: Sequence[Hang]) -> ProbeAnswer | None:
    """Readiness's answer for the hangs: the brake, a restart the budget holds, or the hangs."""
    if restart.braked:
        cause = f"{describe(restart.ineffective)}: " if restart.ineffective else ""
        return ProbeAnswer(False, "restart-loop brake engaged: " + cause + _describe(restart.hangs))
    if restart.held:
        return ProbeAnswer(False, f"{evidence.restart_gate.reason}: {_describe(restart.hangs)}")
    if heeded:
        return ProbeAnswer(False, _describe(heeded))
    return None


def _hysteresis(
    state: VerdictState, enabled: Sequence[KindEvidence], policy: Policy, epoch_started: float
) -> tuple[bool, int, int, float]:
    """Feed each new result into the out-after-N-bad / back-after-M-good counter."""
    fresh = sorted(
        (
            (r.finished, _bad(r, k.latency_slo))
            for k in enabled
            for r in k.results
            if r.finished > state.judged_until
            and r.started >= epoch_started
            and r.reason not in NOT_JUDGED
            and r.refusal is not Refusal.PAUSED  # the pause's word: the phase's, not degradation
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


def _why_not_started(kind: KindEvidence, epoch_started: float) -> str:
    """``structured`` or ``structured (last: bad_body: ...)``: the kind and its last failure.

    A kind on its way to being set aside says how far ("refused 2 of 5 before
    it is set aside"), so a startup that waits for it is not silent.
    """
    last = next((r for r in reversed(kind.results) if r.started >= epoch_started), None)
    said = "; ".join(n for n in (kind.fallback, kind.set_aside_waiting) if n)
    note = f"{said}; " if said else ""
    if last is None:
        return f"{kind.kind.value} ({said})" if note else kind.kind.value
    detail = f": {last.detail[:120]}" if last.detail else ""
    return f"{kind.kind.value} ({note}last: {last.reason.value}{detail})"


def _bad(result: CanaryResult, slo: float | None) -> bool:
    return not result.ok or (slo is not None and result.duration > slo)


def _describe(hangs: Iterable[Hang]) -> str:
    return "; ".join(h.reason for h in hangs)


def _flip(previous: ProbeAnswer, current: ProbeAnswer, now: float) -> ProbeAnswer:
    """Keep the flip time while the pass/fail state stays the same."""
    since = previous.since if previous.ok == current.ok else now
    return ProbeAnswer(current.ok, current.reason, since, current.settling)
