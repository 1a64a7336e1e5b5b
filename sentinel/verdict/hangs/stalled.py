"""The stall-bound rule: a pause (or a sleep, where bounded) that outlasted its bound.

Sleep, pause, a weight update and a maintenance window are legitimate
stalls, never hangs; but a pause nobody ends is worth a word: past
``pause_bound`` it is reported as a hang kind of its own (policy ``alert``).
Sleep has no bound unless one is set.
"""

from __future__ import annotations

from sentinel.knob import DAY, seconds, setting
from sentinel.verdict.knobs import Knobs
from sentinel.verdict.model import Action, Evidence, Hang, HangKind, Phase
from sentinel.verdict.rule import HangRule, past_bound


class StalledKnobs(Knobs):
    """The stall-bound rule's knobs."""

    pause_bound: float = seconds(
        900.0,
        "A pause (or weight update, or maintenance window) longer than this is reported as a "
        "hang kind of its own.",
        1.0,
        30 * DAY,
    )
    paused_policy: Action = setting(Action.ALERT, "What a pause past its bound does.")
    sleep_bound: float | None = seconds(
        None, "A sleep longer than this is reported (unset: sleep is unbounded).", 1.0, 365 * DAY
    )
    asleep_policy: Action = setting(Action.ALERT, "What a sleep past its bound does.")


def lifecycle_bound(evidence: Evidence, policy: StalledKnobs, now: float) -> Hang | None:
    """A pause (or sleep, where bounded) that outlasted its bound."""
    life = evidence.lifecycle
    if life.phase is Phase.PAUSED:
        bound, kind, action = policy.pause_bound, HangKind.PAUSED, policy.paused_policy
    elif life.phase is Phase.ASLEEP and policy.sleep_bound is not None:
        bound, kind, action = policy.sleep_bound, HangKind.ASLEEP, policy.asleep_policy
    else:
        return None
    return past_bound(
        kind,
        action,
        life.since,
        bound,
        evidence,
        now,
        lambda elapsed: f"{life.phase.value} for {elapsed:.0f}s, past {bound:.0f}s: {life.why}",
    )


RULE = HangRule(
    "stalled",
    lifecycle_bound,
    StalledKnobs,
    kinds=(HangKind.PAUSED, HangKind.ASLEEP),
    action="paused_policy",
    windows=("pause_bound", "sleep_bound"),
    evidence="paused (a weight update, a maintenance window) or asleep past its bound",
)
