"""The evaluation: confirmed hangs, the restart-loop brake, the restart budget and readiness."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from sentinel.canary.result import CanaryResult, Reason
from sentinel.verdict.model import (
    Action,
    Evidence,
    Hang,
    KindEvidence,
    ProbeAnswer,
    Verdict,
    VerdictState,
)
from sentinel.verdict.policy import Policy
from sentinel.verdict.registry import confirmed_hangs

# Results that say nothing about the server's health: the model takes no such
# input, or a reasoning model spent the canary's tokens thinking.
NOT_JUDGED = frozenset({Reason.UNSUPPORTED, Reason.INCONCLUSIVE})


def evaluate(
    state: VerdictState, evidence: Evidence, policy: Policy, now: float
) -> tuple[VerdictState, Verdict]:
    """Judge the evidence at ``now``; return the next state and the verdict."""
    new_epoch = evidence.epoch != state.epoch
    if new_epoch:
        # A real restart is a new server identity after an enforced red episode;
        # the first evaluation (epoch -1) and red-free restarts are not counted.
        restarts = state.restarts
        if state.red_in_epoch:
            restarts = (*restarts, now)
        state = VerdictState(
            epoch=evidence.epoch,
            restarts=restarts,
            liveness=_flip(state.liveness, ProbeAnswer(True, "no hang confirmed"), now),
            readiness=_flip(state.readiness, ProbeAnswer(False, "startup has not passed"), now),
            startup=_flip(
                state.startup,
                ProbeAnswer(False, "waiting for every canary kind to succeed"),
                now,
            ),
        )

    enabled = evidence.enabled

    # Startup: every enabled kind succeeded at least once in this epoch.
    unstarted = sorted(
        (
            k
            for k in enabled
            if not any(r.ok and r.started >= evidence.epoch_started for r in k.results)
        ),
        key=lambda k: k.kind.value,
    )
    startup_passed = state.startup_passed or (bool(enabled) and not unstarted)
    if startup_passed:
        aside = [
            f"{k.kind.value} ({k.disabled_reason})"
            for k in evidence.kinds.values()
            if not k.enabled and k.disabled_reason
        ]
        startup = ProbeAnswer(
            True,
            "every canary kind succeeded" + ("; set aside: " + ", ".join(aside) if aside else ""),
        )
    else:
        missing = ", ".join(_why_not_started(k, evidence.epoch_started) for k in unstarted)
        startup = ProbeAnswer(False, "waiting for canary kinds: " + missing)

    hangs = tuple(confirmed_hangs(evidence, policy, now, startup_passed=state.startup_passed))
    new_hangs = tuple(h for h in hangs if h.kind not in state.confirmed)

    # Restart-loop brake and liveness.
    restart_hangs = [h for h in hangs if h.action is Action.RESTART]
    restarts = tuple(t for t in state.restarts if now - t < policy.brake_window)
    in_episode, braked, red = state.in_episode, state.braked, state.red_in_epoch
    if restart_hangs and policy.enforce and not in_episode:
        in_episode = True
        braked = len(restarts) >= policy.brake_max_restarts
    elif not restart_hangs:
        in_episode, braked = False, False
    # The pool's restart budget: a restart it holds keeps liveness green, unready.
    wanted = bool(restart_hangs) and policy.enforce and not braked
    gate = evidence.restart_gate
    held = wanted and not gate.open

    if wanted and not held:
        liveness = ProbeAnswer(False, _describe(restart_hangs))
        red = True
    elif held:
        liveness = ProbeAnswer(True, gate.reason + "; not failing liveness until a slot frees")
    elif restart_hangs and braked:
        liveness = ProbeAnswer(
            True,
            f"restart-loop brake: {len(restarts)} hang restarts within "
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
    life = evidence.lifecycle
    # After a wake-up or a resume every kind passes again before ready; a
    # readiness gate only (the kubelet runs no second startup probe), so a
    # server that hangs on wake-up is still a liveness matter.
    resumed = life.resumed_at
    unproven = sorted(
        k.kind.value
        for k in enabled
        if resumed is not None and not any(r.ok and r.started >= resumed for r in k.results)
    )
    if not startup_passed:
        readiness = ProbeAnswer(False, "startup has not passed")
    elif life.stalled:
        readiness = ProbeAnswer(False, f"{life.phase.value}: {life.why}")
    elif braked:
        readiness = ProbeAnswer(False, "restart-loop brake engaged: " + _describe(restart_hangs))
    elif held:
        readiness = ProbeAnswer(False, f"{gate.reason}: {_describe(restart_hangs)}")
    elif unready_hangs:
        readiness = ProbeAnswer(False, _describe(unready_hangs))
    elif unproven:
        readiness = ProbeAnswer(False, "resumed; waiting for canary kinds: " + ", ".join(unproven))
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
        restarts=restarts,
        red_in_epoch=red,
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
        restart_wanted=wanted,
        budget_held=held,
    )
    return next_state, verdict


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
    """``structured`` or ``structured (last: bad_body: ...)``: the kind and its last failure."""
    last = next((r for r in reversed(kind.results) if r.started >= epoch_started), None)
    if last is None:
        return kind.kind.value
    detail = f": {last.detail[:120]}" if last.detail else ""
    return f"{kind.kind.value} (last: {last.reason.value}{detail})"


def _bad(result: CanaryResult, slo: float | None) -> bool:
    return not result.ok or (slo is not None and result.duration > slo)


def _describe(hangs: Iterable[Hang]) -> str:
    return "; ".join(h.reason for h in hangs)


def _flip(previous: ProbeAnswer, current: ProbeAnswer, now: float) -> ProbeAnswer:
    """Keep the flip time while the pass/fail state stays the same."""
    since = previous.since if previous.ok == current.ok else now
    return ProbeAnswer(current.ok, current.reason, since)
