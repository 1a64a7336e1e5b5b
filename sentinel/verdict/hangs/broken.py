"""The broken rule: every canary failing fast while nothing else completes.

An answer that comes quickly without a generated token (5xx, reset, an
empty reply, garbage) proves the server answers but serves nothing; a
refusal or a timeout among them belongs to another rule, and a real request
completing, or a canary passing, ends the run.
"""

from __future__ import annotations

from sentinel.canary.result import Reason
from sentinel.knob import DAY, seconds, setting
from sentinel.verdict.answers import epoch_results, fast_failure, or_never
from sentinel.verdict.knobs import Knobs
from sentinel.verdict.model import Action, Evidence, Hang, HangKind
from sentinel.verdict.rule import Gate, HangRule, past_bound
from sentinel.verdict.stall import floor as window_floor


class BrokenKnobs(Knobs):
    """The broken rule's knobs."""

    broken_window: float = seconds(
        60.0, "Broken: every canary failing fast this long, nothing else completing.", 1.0, DAY
    )
    broken_policy: Action = setting(Action.RESTART, "What a broken server does.")


def broken(evidence: Evidence, policy: BrokenKnobs, now: float) -> Hang | None:
    """Every canary failing fast for the broken window while nothing else completes."""
    results = [
        r
        for r in epoch_results(evidence, evidence.enabled)
        if r.reason not in (Reason.UNSUPPORTED, Reason.INCONCLUSIVE)
    ]
    floor = max(
        max((r.finished for r in results if r.ok), default=float("-inf")),
        or_never(evidence.last_real_completion_at),
        window_floor(evidence),
    )
    # Every canary: the window runs over the newest unbroken run of fast
    # failures; a refusal or a timeout among them belongs to another rule.
    run: list[float] = []
    for r in sorted((r for r in results if r.started >= floor), key=lambda r: r.started):
        run = [*run, r.started] if fast_failure(r) else []
    return past_bound(
        HangKind.BROKEN,
        policy.broken_policy,
        run[0] if run else None,
        policy.broken_window,
        evidence,
        now,
        lambda elapsed: (
            f"broken: every canary failed fast for {elapsed:.0f}s and no other request completed"
        ),
    )


RULE = HangRule(
    "broken",
    broken,
    BrokenKnobs,
    kinds=(HangKind.BROKEN,),
    action="broken_policy",
    windows=("broken_window",),
    off_when=frozenset({Gate.STALLED}),
    evidence="every canary failed fast (5xx, reset, empty, garbage) and no other request completed",
)
