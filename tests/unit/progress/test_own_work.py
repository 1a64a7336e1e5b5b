"""sentinel's own work, discounted exactly: with no client, real progress is zero.

One case per leak found on a server with no client at all (issue 39), each
failing on the tracker as it was: the multimodal canary's baseline (a side
request, one per server), a canary answered but judged failed (its request
completed in the engine all the same), a canary's own decode seen while it is
still in flight, credits charged oldest first that a finished canary's
usage shows were another canary's, and a correctness canary's three requests
in the running gauge read as one canary (two "real" requests running).
Then the property itself over many random interleavings of canaries and
scrapes, and real work beside them counted exactly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from sentinel.auto_sleep import AutoSleepWatch
from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.evidence.metrics import MetricsSample
from sentinel.progress.tracker import ProgressTracker, canary_budget
from sentinel.progress.work import WORK_COUNTERS
from sentinel.record.ledger import Ledger
from sentinel.verdict import Action

TEXT, MULTIMODAL = CanaryKind("text"), CanaryKind("multimodal")
CORRECTNESS = CanaryKind("correctness")
MULTIMODAL_BUDGET = canary_budget(reply_tokens=2, prompt_tokens=24, side_requests=1)
COUNTERS = ("generation_tokens", "first_tokens", "prompt_tokens", "engine_tokens", "completions")


@dataclass
class Engine:
    """vLLM V1's accounting: a prompt and the first token at the step that ends the prefill."""

    counters: dict[str, float]

    @classmethod
    def idle(cls) -> Engine:
        return cls(dict.fromkeys(COUNTERS, 0.0))

    def first(self, prompt: int) -> None:
        for key, value in (
            ("prompt_tokens", prompt),
            ("generation_tokens", 1),
            ("first_tokens", 1),
        ):
            self.counters[key] += value
        self.counters["engine_tokens"] += prompt + 1

    def decode(self, tokens: int = 1) -> None:
        self.counters["generation_tokens"] += tokens
        self.counters["engine_tokens"] += tokens

    def done(self) -> None:
        self.counters["completions"] += 1

    def sample(self, at: float) -> MetricsSample:
        return MetricsSample(at=at, counters=dict(self.counters))


def answer(
    kind: CanaryKind = TEXT,
    reason: Reason = Reason.OK,
    prompt: int = 10,
    reply: int = 2,
    side: tuple[int | None, int | None] | None = None,
) -> CanaryResult:
    return CanaryResult(
        kind.value, kind, reason, 0.0, 0.1, prompt_tokens=prompt, completion_tokens=reply,
        side_usage=side,
    )  # fmt: skip


def real(tracker: ProgressTracker) -> dict[str, float]:
    return {k: r.real for k, r in tracker.totals.items() if r.real}


def test_the_multimodal_baseline_is_sentinels_own_work() -> None:
    """The baseline (the prompt without the image, one token) completed: sentinel's request."""
    tracker, engine = ProgressTracker(), Engine.idle()
    tracker.observe(engine.sample(0.0))
    tracker.canary_sent(1, 0.5, MULTIMODAL_BUDGET)
    engine.first(24)
    engine.decode()
    engine.done()
    engine.first(14)  # the baseline, sent once the canary's reply is in
    engine.done()
    tracker.observe(engine.sample(0.6))  # scraped before the canary's result is in
    tracker.canary_finished(1, answer(MULTIMODAL, prompt=24, side=(14, 1)), 0.7)
    tracker.observe(engine.sample(2.0))
    assert real(tracker) == {}
    assert tracker.last_real_completion_at is None


def test_a_baseline_whose_reply_never_said_is_still_sentinels() -> None:
    tracker, engine = ProgressTracker(), Engine.idle()
    tracker.observe(engine.sample(0.0))
    tracker.canary_sent(1, 0.5, MULTIMODAL_BUDGET)
    engine.first(24)
    engine.decode()
    engine.done()
    engine.first(14)
    engine.done()
    failed = answer(MULTIMODAL, Reason.BAD_BODY, prompt=24, side=(None, None))
    tracker.canary_finished(1, failed, 0.7)
    tracker.observe(engine.sample(2.0))
    assert real(tracker) == {}


@pytest.mark.parametrize(
    "reason", [Reason.SCHEMA, Reason.IMAGE_NOT_CONSUMED, Reason.INCONCLUSIVE, Reason.EMPTY]
)
def test_a_canary_answered_but_judged_failed_completed_all_the_same(reason: Reason) -> None:
    tracker, engine = ProgressTracker(), Engine.idle()
    tracker.observe(engine.sample(0.0))
    tracker.canary_sent(1, 0.5, canary_budget(reply_tokens=2, prompt_tokens=10))
    engine.first(10)
    engine.decode()
    engine.done()
    tracker.canary_finished(1, answer(reason=reason), 0.7)
    tracker.observe(engine.sample(2.0))
    assert tracker.last_real_completion_at is None
    assert real(tracker) == {}


def test_a_canary_cut_off_completed_nothing() -> None:
    """A timed-out canary was aborted: a completion beside it is real."""
    tracker, engine = ProgressTracker(), Engine.idle()
    tracker.observe(engine.sample(0.0))
    tracker.canary_sent(1, 0.5, canary_budget(reply_tokens=2, prompt_tokens=10))
    cut = CanaryResult("text", TEXT, Reason.TIMEOUT, 0.5, 8.0, tokens_received=0)
    tracker.canary_finished(1, cut, 8.5)
    engine.done()
    tracker.observe(engine.sample(9.0))
    assert tracker.last_real_completion_at == 9.0


def test_a_canarys_decode_seen_in_flight_is_its_own() -> None:
    """A scrape in the middle of the correctness canary's 3 x 8 tokens shows its decode."""
    tracker, engine = ProgressTracker(), Engine.idle()
    tracker.observe(engine.sample(0.0))
    tracker.canary_sent(1, 0.5, canary_budget(reply_tokens=24, prompt_tokens=29, requests=3))
    for prompt in (10, 9, 10):
        engine.first(prompt)
    engine.decode(9)
    tracker.observe(engine.sample(1.0))  # mid-flight
    assert tracker.last_decode_at is None
    engine.decode(12)
    for _ in range(3):
        engine.done()
    tracker.canary_finished(1, answer(CORRECTNESS, prompt=29, reply=24), 1.2)
    tracker.observe(engine.sample(2.0))
    assert real(tracker) == {}
    assert tracker.last_decode_at is None
    assert tracker.last_step_at is None


def test_what_an_older_credit_charged_of_a_younger_canarys_work_stays_sentinels() -> None:
    """Charged oldest first, the first canary's credit took the second's tokens: given back."""
    tracker, engine = ProgressTracker(), Engine.idle()
    tracker.observe(engine.sample(0.0))
    tracker.canary_sent(1, 0.5, canary_budget(reply_tokens=32, prompt_tokens=13))
    tracker.canary_sent(2, 0.5, canary_budget(reply_tokens=24, prompt_tokens=29, requests=3))
    engine.first(13)
    engine.decode(4)  # canary 1 is done at 5 tokens
    engine.done()
    for prompt in (10, 9, 10):
        engine.first(prompt)
    engine.decode(15)  # canary 2 part way
    tracker.observe(engine.sample(1.0))  # canary 1's credit took 31 decode tokens
    tracker.canary_finished(1, answer(CanaryKind("structured"), prompt=13, reply=5), 1.1)
    tracker.observe(engine.sample(2.0))  # given back, to canary 2's credit
    engine.decode(6)
    for _ in range(3):
        engine.done()
    tracker.canary_finished(2, answer(CORRECTNESS, prompt=29, reply=24), 2.5)
    tracker.observe(engine.sample(3.0))
    assert real(tracker) == {}
    assert tracker.last_decode_at is None


def test_real_work_beside_the_canaries_is_counted_exactly() -> None:
    tracker, engine = ProgressTracker(), Engine.idle()
    tracker.observe(engine.sample(0.0))
    tracker.canary_sent(1, 0.5, canary_budget(reply_tokens=32, prompt_tokens=13))
    engine.first(13)
    engine.first(100)  # a real request
    engine.decode(4 + 20)
    engine.done()
    engine.done()
    tracker.observe(engine.sample(1.0))
    tracker.canary_finished(1, answer(CanaryKind("structured"), prompt=13, reply=5), 1.1)
    tracker.observe(engine.sample(2.0))
    assert real(tracker) == {
        "prompt_tokens": 100,
        "generation_tokens": 21,
        "decode_tokens": 20,
        "engine_tokens": 121,
        "completions": 1,
    }
    assert tracker.last_decode_at is not None


@pytest.mark.parametrize("seed", range(40))
def test_no_client_is_zero_real_progress_however_scrapes_fall(seed: int) -> None:
    """Canaries of every shape, overlapping, answered or cut off, scraped at random moments."""
    rng = random.Random(seed)
    tracker, engine = ProgressTracker(), Engine.idle()
    now = 0.0
    tracker.observe(engine.sample(now))
    for token in range(1, 31):
        requests = rng.choice((1, 1, 3))
        max_tokens = rng.choice((1, 2, 8, 32)) * requests
        prompt = rng.randint(5, 40)
        side = rng.random() < 0.2
        budget = canary_budget(
            reply_tokens=max_tokens, prompt_tokens=prompt * 2, requests=requests,
            side_requests=int(side),
        )  # fmt: skip
        tracker.canary_sent(token, now, budget)
        reply = rng.randint(requests, max_tokens) if max_tokens >= requests else requests
        cut = rng.random() < 0.2
        produced, received = 0, 0
        for _request in range(requests):
            engine.first(prompt // requests)
            produced += 1
        steps = [1] * (reply - produced)
        if cut:
            steps = steps[: rng.randint(0, len(steps))]
        for step in steps:
            engine.decode(step)
            produced += step
            if rng.random() < 0.3:
                now += rng.uniform(0.01, 0.5)
                tracker.observe(engine.sample(now))
        received = max(produced - 1, 0) if cut else produced
        if not cut:
            for _request in range(requests):
                engine.done()
            if side:
                engine.first(prompt // 2)
                engine.done()
        now += rng.uniform(0.0, 0.3)
        if rng.random() < 0.5:
            tracker.observe(engine.sample(now))  # the scrape may land before the answer is in
        if cut:
            result = CanaryResult("t", TEXT, Reason.TIMEOUT, 0.0, 8.0, tokens_received=received)
        else:
            usage = (prompt // 2, 1) if side else None
            result = answer(prompt=prompt // requests * requests, reply=produced, side=usage)
        tracker.canary_finished(token, result, now)
        now += rng.uniform(0.0, 2.0)
        tracker.observe(engine.sample(now))
    assert real(tracker) == {}, seed
    assert tracker.last_progress_at is None
    assert tracker.last_real_completion_at is None
    assert tracker.last_step_at is None
    assert set(tracker.totals) <= set(WORK_COUNTERS)


def test_a_correctness_canarys_three_requests_are_no_real_traffic() -> None:
    """One canary, a prompt list of three: the gauges show three requests, all sentinel's."""
    ledger = Ledger([(CORRECTNESS, Action.RESTART, None)], 0.0)
    watch = AutoSleepWatch(ledger, 3.0, hold=60.0)
    budget = canary_budget(reply_tokens=24, prompt_tokens=29, requests=3)
    token = ledger.canary_sent(CORRECTNESS, 1.0, budget)
    shown = MetricsSample(at=2.0, gauges={"running": 3.0, "waiting": 0.0})
    ledger.progress.observe(shown)
    watch.observe_sample(shown)
    assert watch.real_at() is None
    # Answered while the scrape was on its way: the gauges still show it.
    ledger.canary_done(CORRECTNESS, token, answer(CORRECTNESS, prompt=29, reply=24), 2.9, epoch=0)
    late = MetricsSample(at=3.0, gauges={"running": 3.0, "waiting": 0.0}, read_from=2.5)
    ledger.progress.observe(late)
    watch.observe_sample(late)
    assert watch.real_at() is None
    # A real request beside it is real traffic.
    real = MetricsSample(at=6.0, gauges={"running": 1.0, "waiting": 0.0}, read_from=5.9)
    ledger.progress.observe(real)
    watch.observe_sample(real)
    assert watch.real_at() == 6.0
