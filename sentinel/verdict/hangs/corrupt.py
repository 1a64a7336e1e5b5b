"""The corrupt rule: correctness checks that left the model's fingerprint.

A correctness check (:mod:`sentinel.canary.correctness`) sends fixed prompts at
temperature 0 and gets token ids with their log-probabilities; the sidecar
keeps the first such answer for the model and weights served as their
fingerprint (:mod:`sentinel.fingerprint.book`). Here each later check is compared
with it, prompt by prompt, and corruption is confirmed (docs/design.md,
"Correctness"):

* **at once** when a check shows a sign no batching noise makes: the
  generation turned into one token repeated where the fingerprint's was not
  (weights lost on wake-up answer ``!!!!!!!!``), its mean log-probability fell
  :data:`COLLAPSE` nats below the fingerprint's, a log-probability is NaN (or
  vLLM refused to encode one: :data:`NAN_ANSWER`), the check was answered
  with a 5xx while its text control succeeded (NaNs surfacing as a server
  error), or vLLM's ``vllm:corrupted_requests`` counter
  moved since the last check that matched;
* **after** :data:`REPEATS` checks in a row that *depart*: a prompt's first
  :data:`EARLY_TOKENS` tokens differ, unless the check chose any candidate the
  fingerprint recorded within :data:`FLIP_MARGIN` nats of its token (a near-tie
  flipped by batching noise), or the log-probability of
  a token both agree on moved more than :data:`LOGPROB_TOLERANCE` nats.

The tolerance is for batched inference: the same greedy request computed in
a different batch gives slightly different logits, so a token whose lead was
a near-tie may flip, and everything after it differs. Agreement is therefore
asked of the early tokens only, a flip is forgiven where the fingerprint shows
a near-tie, and log-probabilities are compared only where the tokens agree.
A random-weight test model's repetitive fingerprint is no alarm by itself;
a change from it is.

Pure: reads frozen evidence, returns a :class:`~sentinel.verdict.model.Hang` or None.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from sentinel.canary.correctness import CORRECTNESS
from sentinel.canary.refusal import engine_dead
from sentinel.canary.result import CanaryResult, Generation, Reason
from sentinel.knob import setting
from sentinel.verdict.knobs import Knobs
from sentinel.verdict.model import Action, Evidence, Hang, HangKind
from sentinel.verdict.rule import Gate, HangRule
from sentinel.verdict.stall import floor as window_floor

# The tolerance (docs/design.md, "Correctness"; the measurements behind it are
# in tests/bench/bench_correctness.py).
EARLY_TOKENS = 4  # the tokens of each prompt that must agree with the fingerprint
FLIP_MARGIN = 0.5  # nats: a fingerprint token led a candidate by less: a flip to it is noise
LOGPROB_TOLERANCE = 1.0  # nats: how far an agreed token's log-probability may move
COLLAPSE = 4.0  # nats: a mean log-probability this far below the fingerprint's
DEGENERATE = 4  # tokens: a generation this long of one token repeated
REPEATS = 2  # departing checks in a row that confirm corruption
# vLLM 0.32 answers a reply whose log-probabilities are NaN with this 400
# (Python's JSON encoder refusing the value); older releases with a 500.
NAN_ANSWER = "Out of range float values are not JSON compliant"
# vLLM's EngineDeadError (in every release's words: sentinel.canary.refusal.engine_dead):
# the engine is gone (a crash, or a server shutting down), which the dead rule judges;
# a check answered with it says nothing about the weights.
SHOWN = 3  # departures named in a reason


class CorruptKnobs(Knobs):
    """The corruption rule's knobs."""

    corrupt_policy: Action = setting(
        Action.UNREADY,
        "Correctness checks that left the model's fingerprint: out of rotation while someone "
        "looks.",
    )


@dataclass(frozen=True, slots=True)
class Departure:
    """How one prompt's generation left the fingerprint's."""

    prompt: int
    sign: str  # diverged, logprobs, degenerate, collapse, nan, shape, error, counter
    detail: str
    immediate: bool = False

    def describe(self) -> str:
        return f"prompt {self.prompt}: {self.sign} ({self.detail})"


def degenerate(generation: Generation) -> bool:
    """One token repeated over the whole generation (and it is long enough to tell)."""
    ids = generation.token_ids
    return len(ids) >= DEGENERATE and len(set(ids)) == 1


# Every evaluation judges the same kept checks against the same fingerprint again,
# so the comparison of one pair of generation tuples, by identity, is remembered.
COMPARED_KEPT = 64
_compared: OrderedDict[tuple[int, int], tuple[object, object, tuple[Departure, ...]]] = (
    OrderedDict()
)


def compare(base: Sequence[Generation], check: Sequence[Generation]) -> tuple[Departure, ...]:
    """Every way ``check`` left ``base``, prompt by prompt (empty: within the tolerance)."""
    key = (id(base), id(check))
    kept = _compared.get(key)
    if kept is not None and kept[0] is base and kept[1] is check:
        return kept[2]
    found = _compare(base, check)
    if isinstance(base, tuple) and isinstance(check, tuple):  # immutable: safe to remember
        _compared[key] = (base, check, found)
        if len(_compared) > COMPARED_KEPT:
            _compared.popitem(last=False)
    return found


def _compare(base: Sequence[Generation], check: Sequence[Generation]) -> tuple[Departure, ...]:
    if len(base) != len(check):
        return (Departure(0, "shape", f"{len(check)} generations, fingerprint has {len(base)}"),)
    found: list[Departure] = []
    for prompt, (b, c) in enumerate(zip(base, check, strict=True)):
        found.extend(_prompt(prompt, b, c))
    return tuple(found)


def _prompt(prompt: int, b: Generation, c: Generation) -> list[Departure]:
    if any(math.isnan(v) for v in c.logprobs):
        return [Departure(prompt, "nan", "a log-probability is NaN", immediate=True)]
    if not c.token_ids:
        return []
    found: list[Departure] = []
    if degenerate(c) and not degenerate(b):
        found.append(
            Departure(
                prompt,
                "degenerate",
                f"token {c.token_ids[0]} repeated {len(c.token_ids)} times; "
                f"the fingerprint's reply was not",
                immediate=True,
            )
        )
    if b.logprobs and c.logprobs:
        drop = _mean(b.logprobs) - _mean(c.logprobs)
        if drop > COLLAPSE:
            found.append(
                Departure(
                    prompt,
                    "collapse",
                    f"mean log-probability {_mean(c.logprobs):.2f}, "
                    f"fingerprint {_mean(b.logprobs):.2f}",
                    immediate=True,
                )
            )
    agreed = _agreed(b.token_ids, c.token_ids)
    early = min(EARLY_TOKENS, len(b.token_ids))
    if agreed < early and not _near_tie(b, c, agreed):
        want = b.token_ids[agreed] if agreed < len(b.token_ids) else "end"
        got = c.token_ids[agreed] if agreed < len(c.token_ids) else "end"
        found.append(Departure(prompt, "diverged", f"token {agreed}: {got}, fingerprint {want}"))
    drift = max(
        (abs(c.logprobs[i] - b.logprobs[i]) for i in range(min(agreed, len(b.logprobs)))),
        default=0.0,
    )
    if drift > LOGPROB_TOLERANCE:
        found.append(Departure(prompt, "logprobs", f"an agreed token moved {drift:.2f} nats"))
    return found


def _agreed(base: Sequence[int], check: Sequence[int]) -> int:
    """How many leading tokens the two generations share."""
    for i, (b, c) in enumerate(zip(base, check, strict=False)):
        if b != c:
            return i
    return min(len(base), len(check))


def _near_tie(base: Generation, check: Generation, at: int) -> bool:
    """Whether the check flipped a near-tie: it chose, at ``at``, a candidate the
    fingerprint's token led by at most :data:`FLIP_MARGIN` nats.

    Every candidate the fingerprint recorded counts (GPU kernels are
    batch-variant, so under load any close rival may win, the third as well as
    the second); a fingerprint recorded with one runner-up (``candidates``
    empty) is judged by that one, and a candidate named by text only (no id)
    forgives any flip at that margin.
    """
    if at >= len(check.token_ids):
        return False
    chosen = check.token_ids[at]
    if at < len(base.candidates) and base.candidates[at]:
        return any(
            lead <= FLIP_MARGIN and (ident is None or ident == chosen)
            for ident, lead in base.candidates[at]
        )
    if at >= len(base.margins):
        return False
    margin = base.margins[at]
    runner = base.runner_ups[at] if at < len(base.runner_ups) else None
    if margin is None or margin > FLIP_MARGIN:
        return False
    return runner is None or runner == chosen


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def judge_check(
    evidence: Evidence, result: CanaryResult, control: CanaryResult | None
) -> tuple[Departure, ...] | None:
    """How one check left the fingerprint (empty: it matched; None: it says nothing).

    A 5xx on the check while its text control succeeded is a departure at
    once: the server generates, but not this (NaNs failing its serialisation);
    vLLM's engine-dead 500 is not (the engine went away between the two).
    """
    facts = evidence.correctness
    if facts is None or facts.fingerprint is None:
        return None
    if result.reason is Reason.HTTP_STATUS and NAN_ANSWER in result.detail:
        return (Departure(0, "nan", "the reply's log-probabilities are NaN", immediate=True),)
    if result.reason is Reason.HTTP_STATUS and (result.http_status or 500) >= 500:
        if engine_dead(result.detail.partition(": ")[2]):
            return None
        if control is not None and control.ok:
            return (
                Departure(
                    0,
                    "error",
                    f"the check failed ({result.detail[:80]}) while its text control succeeded",
                    immediate=True,
                ),
            )
        return None
    if not result.ok or not result.generations:
        return None
    return compare(facts.fingerprint.generations, result.generations)


def corrupt_hang(evidence: Evidence, policy: CorruptKnobs, now: float) -> Hang | None:
    """Corruption confirmed from the newest checks, or None.

    Judged over this epoch's checks sent after the fingerprint was taken and
    after the last sleep or pause ended. Off while the server is asleep or
    paused (its checks fail by design).
    """
    facts = evidence.correctness
    kind = next((k for k in evidence.enabled if k.kind == CORRECTNESS), None)
    if facts is None or facts.fingerprint is None or kind is None or evidence.lifecycle.stalled:
        return None
    start = max(facts.since, window_floor(evidence))
    judged: list[tuple[CanaryResult, tuple[Departure, ...]]] = []
    controls = list(kind.controls) + [None] * (len(kind.results) - len(kind.controls))
    for result, control in zip(kind.results, controls, strict=False):
        if result.started < start or (facts.canary and result.name != facts.canary):
            continue
        departures = judge_check(evidence, result, control)
        if departures is not None:
            judged.append((result, departures))
    corrupted = facts.corrupted_at
    if corrupted is not None and corrupted >= start:
        matched_after = any(not d and r.started > corrupted for r, d in judged)
        if not matched_after:
            return _hang(
                policy,
                "vLLM counted requests with NaN logits (vllm:corrupted_requests)",
                corrupted,
            )
    # Per data-parallel engine (the scheduler aims checks at each in turn): one
    # engine with corrupt weights among good ones alternates departures with matches.
    for engine in dict.fromkeys(r.engine for r, _ in judged):
        hang = _confirmed([(r, d) for r, d in judged if r.engine == engine], policy)
        if hang is not None:
            return hang
    return None


def _confirmed(
    judged: Sequence[tuple[CanaryResult, tuple[Departure, ...]]], policy: CorruptKnobs
) -> Hang | None:
    """Corruption in one engine's checks (oldest first): the newest at once, or a run."""
    if not judged:
        return None
    newest, departures = judged[-1]
    engines = () if newest.engine is None else (newest.engine,)
    where = "" if newest.engine is None else f"engine {newest.engine}: "
    immediate = [d for d in departures if d.immediate]
    if immediate:
        return _hang(policy, where + _describe(immediate), newest.started, engines)
    run: list[tuple[CanaryResult, tuple[Departure, ...]]] = []
    for entry in judged:
        run = [*run, entry] if entry[1] else []
    if len(run) < REPEATS:
        return None
    return _hang(
        policy,
        f"{where}{len(run)} checks in a row left the fingerprint: {_describe(run[-1][1])}",
        run[0][0].started,
        engines,
    )


def _describe(departures: Sequence[Departure]) -> str:
    shown = "; ".join(d.describe() for d in departures[:SHOWN])
    more = len(departures) - SHOWN
    return shown + (f"; and {more} more" if more > 0 else "")


def _hang(policy: CorruptKnobs, what: str, since: float, engines: tuple[int, ...] = ()) -> Hang:
    reason = f"corrupt output: {what}"
    return Hang(HangKind.CORRUPT, policy.corrupt_policy, reason, since, engines)


RULE = HangRule(
    "corrupt",
    corrupt_hang,
    CorruptKnobs,
    kinds=(HangKind.CORRUPT,),
    action="corrupt_policy",
    off_when=frozenset({Gate.STALLED}),
    evidence="correctness checks (fixed greedy prompts) left the model's fingerprint, repeatedly, "
    "or at once on degenerate output, collapsed log-probabilities or NaN",
)
