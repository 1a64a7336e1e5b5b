"""Legitimate stalls in the verdict: sleep, pause, a long compile step.

A server asleep or paused generates nothing by design, so the rules that
judge generation (engine, partial, path, broken) stay off and the stall is
judged against its own bound instead; the rules that need no generation
(dead, listener down) stay on. Every window starts again where the stall
ended. A compiler busy under the engine holds the engine rules for the
compile grace: a long first-use compile step publishes nothing while it
works. The reasoning is in ``docs/design.md`` ("Lifecycle states are not hangs").
"""

from __future__ import annotations

from sentinel.verdict.clock import observed
from sentinel.verdict.model import Evidence, Hang, HangKind, Phase, Policy


def floor(evidence: Evidence) -> float:
    """Where windows may start: this epoch, after the last sleep or pause ended."""
    return max(
        evidence.epoch_started,
        float("-inf") if evidence.lifecycle.resumed_at is None else evidence.lifecycle.resumed_at,
    )


def compiling(evidence: Evidence, policy: Policy, now: float) -> bool:
    """A compiler busy under the engine, within the compile grace: a long step is work."""
    since = evidence.compiling_since
    return since is not None and observed(since, now, evidence.unobserved) < policy.compile_grace


def lifecycle_bound(evidence: Evidence, policy: Policy, now: float) -> Hang | None:
    """A pause (or sleep, where bounded) that outlasted its bound."""
    life = evidence.lifecycle
    if life.phase is Phase.PAUSED:
        bound, kind, action = policy.pause_bound, HangKind.PAUSED, policy.paused_policy
    elif life.phase is Phase.ASLEEP and policy.sleep_bound is not None:
        bound, kind, action = policy.sleep_bound, HangKind.ASLEEP, policy.asleep_policy
    else:
        return None
    elapsed = observed(life.since, now, evidence.unobserved)
    if elapsed < bound:
        return None
    return Hang(
        kind,
        action,
        f"{life.phase.value} for {elapsed:.0f}s, past {bound:.0f}s: {life.why}",
        life.since,
    )
