"""Legitimate stalls in the verdict: where windows may start, and the compile gate.

A server asleep or paused generates nothing by design, so the rules that
judge generation stay off (:class:`~sentinel.verdict.rule.Gate`) and the
stall is judged against its own bound instead
(:mod:`sentinel.verdict.hangs.stalled`). Every window starts again where
the stall ended. A compiler busy under the engine holds the engine rules for
the compile grace: a long first-use compile step publishes nothing while it
works, and a storm of short-lived compilers for a short linger after the last
one seen. The reasoning is in ``docs/design.md`` ("Lifecycle states are not
hangs", "A long engine step").
"""

from __future__ import annotations

from sentinel.verdict.clock import observed
from sentinel.verdict.model import Evidence


def floor(evidence: Evidence) -> float:
    """Where windows may start: this epoch, after the last sleep or pause ended."""
    return max(
        evidence.epoch_started,
        float("-inf") if evidence.lifecycle.resumed_at is None else evidence.lifecycle.resumed_at,
    )


def compiling(evidence: Evidence, compile_grace: float, now: float, linger: float = 0.0) -> bool:
    """A compiler busy under the engine, within the compile grace: a long step is work.

    A storm of sub-second compilers shows in some samples only, so the hold
    lasts ``linger`` past the last sample that saw one, and never past the
    grace counted from the first.
    """
    since, seen = evidence.compiling_since, evidence.compiler_seen_at
    if since is None or observed(since, now, evidence.unobserved) >= compile_grace:
        return False
    return seen is None or observed(seen, now, evidence.unobserved) <= linger
