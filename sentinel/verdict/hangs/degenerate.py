"""The degenerate rule: text canaries answering garbage, where no correctness check can tell.

The correctness check needs token ids and log-probabilities; a server or a
proxy that strips them disables it, and a server whose weights are gone
(``!!!!!!!!`` to the length limit) or whose output is undecodable then passes
every canary, since each asks only whether tokens come. The text kind notes a
reply of degenerate shape in its detail (:mod:`sentinel.canary.degenerate`);
this rule confirms it when the newest :attr:`DegenerateKnobs.degenerate_repeats`
successful text canaries all had that shape (docs/design.md, "Degenerate
output"). Conservative: one odd reply is nothing, a failed canary in between
is not counted either way, and a correctness check that matched its
fingerprint after the run began says the model really answers so.

Pure: reads frozen evidence, returns a :class:`~sentinel.verdict.model.Hang` or None.
"""

from __future__ import annotations

from sentinel.canary.correctness import CORRECTNESS
from sentinel.canary.degenerate import DEGENERATE_PREFIX
from sentinel.canary.spec import TEXT
from sentinel.knob import setting
from sentinel.verdict.hangs.corrupt import judge_check
from sentinel.verdict.knobs import Knobs
from sentinel.verdict.model import Action, Evidence, Hang, HangKind
from sentinel.verdict.rule import Gate, HangRule
from sentinel.verdict.stall import floor as window_floor


class DegenerateKnobs(Knobs):
    """The degenerate rule's knobs."""

    degenerate_repeats: int = setting(
        3,
        "Degenerate output: this many successful text canaries in a row answered one "
        "'!' (token 0 of all-zero logits) repeated to the limit, or undecodable text.",
        (2, 100, "canaries"),
    )
    degenerate_policy: Action = setting(
        Action.UNREADY,
        "Text canaries answering degenerate output (weights lost, garbage): out of rotation "
        "while someone looks.",
    )


def degenerate_hang(evidence: Evidence, policy: DegenerateKnobs, now: float) -> Hang | None:
    """Degenerate output confirmed from the newest text canaries, or None."""
    text = evidence.kinds.get(TEXT)
    if text is None:
        return None
    start = window_floor(evidence)
    answered = [r for r in text.results if r.ok and r.started >= start]
    run = answered[-policy.degenerate_repeats :]
    if len(run) < policy.degenerate_repeats:
        return None
    if not all(r.detail.startswith(DEGENERATE_PREFIX) for r in run):
        return None
    if _matched_since(evidence, run[0].started):
        return None
    shape = run[-1].detail[len(DEGENERATE_PREFIX) :]
    reason = f"degenerate output: {len(run)} text canaries in a row answered {shape}"
    return Hang(HangKind.DEGENERATE, policy.degenerate_policy, reason, run[0].started)


def _matched_since(evidence: Evidence, since: float) -> bool:
    """A correctness check sent at or after ``since`` matched the model's fingerprint."""
    kind = evidence.kinds.get(CORRECTNESS)
    if kind is None or not kind.enabled:
        return False
    return any(
        result.started >= since and judge_check(evidence, result, None) == ()
        for result in kind.results
    )


RULE = HangRule(
    "degenerate",
    degenerate_hang,
    DegenerateKnobs,
    kinds=(HangKind.DEGENERATE,),
    action="degenerate_policy",
    off_when=frozenset({Gate.STALLED}),
    evidence="text canaries answering '!' (token 0) repeated to the length limit, "
    "or undecodable text, several in a row (no correctness check matched meanwhile)",
)
