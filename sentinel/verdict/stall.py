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

from dataclasses import dataclass
from typing import Final

from sentinel.verdict.clock import observed
from sentinel.verdict.model import Evidence
from sentinel.verdict.sections import SectionKey


@dataclass(frozen=True, slots=True)
class CompileSection:
    """Compilers under the engine, as the ``compile`` section holds them.

    A compiler process busy under the engine since ``since`` (a long first-use
    kernel compile, or a storm of short ones): the engine's long step is work
    within the compile grace. ``seen_at``: the last sample that saw one busy
    (None: not told; the compile counts as busy now). Absent: none seen.
    """

    since: float | None = None
    seen_at: float | None = None
    detail: str = ""


# The evidence section (sentinel.record.process_readings, from sentinel.evidence.compilers).
COMPILE: Final = SectionKey("compile", CompileSection)


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
    section = evidence.section(COMPILE)
    if section is None:
        return False
    since, seen = section.since, section.seen_at
    if since is None or observed(since, now, evidence.unobserved) >= compile_grace:
        return False
    return seen is None or observed(seen, now, evidence.unobserved) <= linger
