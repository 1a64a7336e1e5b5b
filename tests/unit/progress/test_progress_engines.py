"""Per-engine progress obeys the two rules the whole server's does.

Two data-parallel engines, "0" and "1", each with its own counters (vLLM's
``engine`` label); the server's sums are their sums. Engine 1 is the one in
question. Per engine, as in the total:

* sentinel's own canaries are discounted at all times: an aimed canary on the
  engine it was aimed at alone, an unaimed one on whichever engine shows it;
* where the engine counts first tokens, only its decode progress vouches for
  it: new arrivals prefilled (and handed a first token) by an engine whose
  decode is stuck are work, but not work that proves it alive.

Each case feeds a baseline sample at 0, the canaries, and samples at 2 and
4; the table gives what engine 1's track says at the end: its progress
beyond sentinel's own, its decode progress, and what vouches for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.evidence.metrics import MetricsSample
from sentinel.progress.tracker import ProgressTracker, canary_budget

BUDGET = canary_budget(reply_tokens=4.0, prompt_tokens=8.0)
IDLE: dict[str, float] = {
    "generation_tokens": 100.0,
    "first_tokens": 20.0,
    "prompt_tokens": 500.0,
    "engine_tokens": 600.0,
    "completions": 20.0,
}


def moved(base: Mapping[str, float], **delta: float) -> dict[str, float]:
    """``base`` with each named counter moved by ``delta``."""
    return {k: v + delta.get(k, 0.0) for k, v in base.items()}


def without_first_tokens(counters: Mapping[str, float]) -> dict[str, float]:
    return {k: v for k, v in counters.items() if k != "first_tokens"}


# What one request does to an engine's counters.
PREFILL = {"prompt_tokens": 8.0, "engine_tokens": 8.0}  # prefilled, no token yet
FIRST = {"generation_tokens": 1.0, "first_tokens": 1.0, "engine_tokens": 1.0}  # its first token
DECODE = {"generation_tokens": 1.0, "engine_tokens": 1.0}  # one token decoded past the first
DONE = {"completions": 1.0}


def plus(*parts: Mapping[str, float]) -> dict[str, float]:
    total: dict[str, float] = {}
    for part in parts:
        for key, value in part.items():
            total[key] = total.get(key, 0.0) + value
    return total


def answered(engine: int | None) -> CanaryResult:
    """A canary answered with 4 tokens for an 8-token prompt."""
    return CanaryResult(
        "text", CanaryKind.TEXT, Reason.OK, 1.0, 0.2, prompt_tokens=8, completion_tokens=4,
        engine=engine,
    )  # fmt: skip


def cut_off(engine: int | None) -> CanaryResult:
    """A streamed canary timed out with its first token received."""
    return CanaryResult(
        "text", CanaryKind.TEXT, Reason.TIMEOUT, 1.0, 0.2, tokens_received=1, engine=engine
    )


@dataclass(frozen=True)
class Case:
    """Engine 1's (and 0's) work in the samples at 2 and 4, and the canaries sent at 1."""

    at_2: Mapping[str, Mapping[str, float]]  # engine -> what moved by 2
    at_4: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # by 4, beyond that
    canaries: tuple[tuple[int | None, CanaryResult | None], ...] = ()  # (aimed at, result)
    first_tokens: bool = True  # the engines count first tokens (vLLM's TTFT histogram)
    scrape_at_4: bool = True


def run(case: Case) -> ProgressTracker:
    tracker = ProgressTracker()
    counters = {"0": dict(IDLE), "1": dict(IDLE)}

    def scrape(at: float) -> None:
        engines = {
            e: (c if case.first_tokens else without_first_tokens(c)) for e, c in counters.items()
        }
        total = {k: engines["0"][k] + engines["1"][k] for k in engines["0"]}
        tracker.observe(MetricsSample(at, counters=total, engines=engines))

    scrape(0.0)
    for token, (aim, _) in enumerate(case.canaries, start=1):
        tracker.canary_sent(token, 1.0, BUDGET, aim)
    for label, delta in case.at_2.items():
        counters[label] = moved(counters[label], **delta)
    for token, (_, result) in enumerate(case.canaries, start=1):
        if result is not None:
            tracker.canary_finished(token, result, 1.2)
    scrape(2.0)
    for label, delta in case.at_4.items():
        counters[label] = moved(counters[label], **delta)
    if case.scrape_at_4:
        scrape(4.0)
    return tracker


NEVER = (None, None, None)  # (progress, decode progress, vouched) never seen

CASES = {
    # A stuck engine prefills the canary aimed at it and hands it its first token.
    "aimed-canary-prefill-and-first-token": (
        Case({"1": plus(PREFILL, FIRST)}, canaries=((1, None),)),
        NEVER,
    ),
    "aimed-canary-without-first-token-count": (
        Case({"1": plus(PREFILL, FIRST)}, canaries=((1, None),), first_tokens=False),
        NEVER,
    ),
    # The canary aimed at engine 0 explains nothing of engine 1's.
    "canary-aimed-elsewhere-explains-nothing": (
        Case({"1": plus(PREFILL, FIRST)}, canaries=((0, None),), first_tokens=False),
        (2.0, None, 2.0),
    ),
    # Unaimed: which engine served it is unknown, so either may charge it.
    "unaimed-canary-on-engine-1": (
        Case({"1": plus(PREFILL, FIRST)}, canaries=((None, None),), first_tokens=False),
        NEVER,
    ),
    # New arrivals prefilled and handed a first token; nothing decodes.
    "prefill-without-decode": (
        Case({"1": plus(PREFILL, FIRST, PREFILL, FIRST)}, {"1": plus(PREFILL, FIRST)}),
        (4.0, None, None),
    ),
    "prefill-without-decode-and-no-first-token-count": (
        Case({"1": plus(PREFILL, FIRST)}, {"1": PREFILL}, first_tokens=False),
        (4.0, None, 4.0),  # without the count, any real work vouches (the broader rule)
    ),
    # A slow engine decodes one token of a real request per sample: it vouches.
    "slow-decode": (Case({"1": DECODE}, {"1": DECODE}), (4.0, 4.0, 4.0)),
    # A canary in flight explains its whole reply: decode it could be waits for its end ...
    "slow-decode-beside-a-canary-in-flight": (
        Case({"1": plus(PREFILL, FIRST, DECODE)}, {"1": DECODE}, canaries=((1, None),)),
        NEVER,
    ),
    # ... and once cut off with its first token (one more may be on its way), the rest vouches.
    "slow-decode-beside-a-canary-cut-off": (
        Case({"1": plus(PREFILL, FIRST, DECODE)}, {"1": DECODE}, canaries=((1, cut_off(1)),)),
        (4.0, 4.0, 4.0),
    ),
    # An idle engine's own answered canary never proves it alive.
    "idle-engine-answering-its-canary": (
        Case(
            {"1": plus(PREFILL, FIRST, DECODE, DECODE, DECODE, DONE)}, canaries=((1, answered(1)),)
        ),
        NEVER,
    ),
    "a-real-completion-beside-it": (
        Case(
            {"1": plus(PREFILL, FIRST, DECODE, DECODE, DECODE, DONE)},
            {"1": DONE},
            canaries=((1, answered(1)),),
        ),
        (4.0, 4.0, 4.0),
    ),
}


@pytest.mark.parametrize(("case", "expected"), CASES.values(), ids=CASES.keys())
def test_engine_progress(case: Case, expected: tuple[float | None, ...]) -> None:
    track = run(case).engines["1"]
    assert (track.last_progress_at, track.last_decode_at, track.vouched_at) == expected


def test_the_total_still_discounts_an_aimed_canary_once() -> None:
    """Aimed at engine 1, the canary's work is charged in the sum as before, once."""
    tracker = run(Case({"1": plus(PREFILL, FIRST)}, canaries=((1, None),)))
    assert tracker.last_progress_at is None
    update = tracker.totals
    assert update["prompt_tokens"].discounted == 8.0
    assert update["prompt_tokens"].real == 0.0


def test_an_unaimed_canary_is_charged_in_full_on_each_engine() -> None:
    """Both engines prefill 8 tokens while one unaimed canary is in flight: each may be it."""
    tracker = run(Case({"0": PREFILL, "1": PREFILL}, canaries=((None, None),), first_tokens=False))
    assert tracker.engines["0"].last_progress_at is None
    assert tracker.engines["1"].last_progress_at is None
    assert tracker.last_progress_at == 2.0  # the sum: 16 tokens, one canary's 8 explained


def test_report_shows_each_engines_own_work_and_decode_age() -> None:
    case = Case({"0": DECODE, "1": plus(PREFILL, FIRST)}, canaries=((1, None),), scrape_at_4=False)
    engines = run(case).report(5.0)["engines"]
    assert isinstance(engines, dict)
    assert engines["1"]["progress_age"] is None
    assert engines["1"]["decode_evidence"] is True
    assert engines["0"]["decode_age"] == 3.0
    assert engines["1"]["last_interval"]["prompt_tokens"] == 8.0
    assert engines["1"]["last_own"]["prompt_tokens"] == 8.0
    assert engines["0"]["last_own"]["generation_tokens"] == 0.0
