"""Progress is completed work minus sentinel's own canaries, at all times, on a virtual clock.

The cases of issue "progress, not motion" at the progress level: a hung engine
with a stuck request whose canaries prefill and emit a first token, gauge and
preemption churn on frozen counters, absent counters, restarts by identity.
"""

from __future__ import annotations

import pytest

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.evidence.metrics import MetricsSample
from sentinel.progress.tracker import RECENT, ProgressTracker, canary_budget


def sample(
    at: float, gauges: dict[str, float] | None = None, /, **counters: float
) -> MetricsSample:
    return MetricsSample(at=at, counters=counters, gauges=gauges or {})


def result(
    completion: int | None = 2, prompt: int | None = 5, reason: Reason = Reason.OK
) -> CanaryResult:
    return CanaryResult(
        name="text",
        kind=CanaryKind.TEXT,
        reason=reason,
        started=0.0,
        duration=0.1,
        prompt_tokens=prompt,
        completion_tokens=completion,
    )


BUDGET = canary_budget(reply_tokens=2.0, prompt_tokens=8.0)
WORK = {"generation_tokens": 10.0, "prompt_tokens": 50.0, "engine_tokens": 20.0, "completions": 3}


def test_first_sample_is_a_baseline_not_progress() -> None:
    t = ProgressTracker()
    assert not t.observe(sample(1.0, generation_tokens=10)).progressed
    assert t.last_progress_at is None
    assert t.available
    assert t.last_evidence_at == 1.0


def test_rising_counter_is_progress_at_the_sample_time() -> None:
    t = ProgressTracker()
    t.observe(sample(1.0, generation_tokens=10, completions=1))
    update = t.observe(sample(3.0, generation_tokens=11, completions=1))
    assert update.progressed
    assert update.changed == ("generation_tokens",)
    assert t.last_progress_at == 3.0


def test_flat_counters_are_no_progress() -> None:
    t = ProgressTracker()
    t.observe(sample(1.0, generation_tokens=10, engine_tokens=4))
    assert not t.observe(sample(3.0, generation_tokens=10, engine_tokens=4)).progressed
    assert t.last_progress_at is None


def test_a_finished_canary_explains_exactly_its_usage() -> None:
    t = ProgressTracker()
    t.observe(sample(1.0, **WORK))
    t.canary_sent(1, 1.5, BUDGET)
    t.canary_finished(1, result(completion=2, prompt=5), 1.8)
    update = t.observe(
        sample(3.0, generation_tokens=12, prompt_tokens=55, completions=4, engine_tokens=22)
    )
    assert not update.progressed
    assert update.real_completions == 0
    assert t.last_real_completion_at is None
    assert update.signals["prompt_tokens"].discounted == 5


def test_real_traffic_beside_a_canary_is_progress() -> None:
    t = ProgressTracker()
    t.observe(sample(1.0, generation_tokens=10, completions=3))
    t.canary_sent(1, 1.5, BUDGET)
    t.canary_finished(1, result(completion=2), 1.8)
    update = t.observe(sample(3.0, generation_tokens=40, completions=5))
    assert update.progressed
    assert update.real_completions == 1
    assert update.signals["generation_tokens"].real == 28
    assert t.last_real_completion_at == 3.0


def test_a_failed_canary_explains_no_completion() -> None:
    t = ProgressTracker()
    t.observe(sample(1.0, completions=3))
    t.canary_sent(1, 1.5, BUDGET)
    t.canary_finished(1, result(completion=None, reason=Reason.TIMEOUT), 1.8)
    assert t.observe(sample(3.0, completions=4)).real_completions == 1


@pytest.mark.parametrize(
    "gauges",
    [
        pytest.param({"running": 1.0, "waiting": 0.0}, id="idle-but-a-stuck-request"),
        pytest.param({"running": 4.0, "waiting": 60.0}, id="busy-gauges"),
        pytest.param({}, id="no-gauges"),
    ],
)
def test_in_flight_canary_prefill_and_first_token_are_never_progress(
    gauges: dict[str, float],
) -> None:
    """A hung engine with stuck requests: the canary's own prefill and first token do not count."""
    t = ProgressTracker()
    t.observe(sample(1.0, gauges, **WORK))
    t.canary_sent(1, 1.5, BUDGET)
    update = t.observe(
        sample(3.0, gauges, generation_tokens=11, prompt_tokens=58, engine_tokens=22, completions=3)
    )
    assert not update.progressed
    assert t.last_progress_at is None


def test_every_retry_is_discounted_again() -> None:
    """Each retried canary brings its own credit; none re-arms progress on a hung engine."""
    t = ProgressTracker()
    t.observe(sample(0.0, **WORK))
    tokens, prompts = 10.0, 50.0
    for n in range(1, 10):
        sent = 10.0 * n
        t.canary_sent(n, sent, BUDGET)
        tokens, prompts = tokens + 1, prompts + 8  # prefill and a first token, then stuck
        update = t.observe(
            sample(sent + 2, generation_tokens=tokens, prompt_tokens=prompts, engine_tokens=20)
        )
        assert not update.progressed, f"retry {n}"
        t.canary_finished(n, result(completion=None, prompt=None, reason=Reason.TIMEOUT), sent + 8)


def test_work_beyond_the_credit_is_progress() -> None:
    t = ProgressTracker()
    t.observe(sample(1.0, **WORK))
    t.canary_sent(1, 1.5, BUDGET)  # explains its whole reply (2) while in flight
    update = t.observe(sample(3.0, generation_tokens=15, prompt_tokens=50, engine_tokens=20))
    assert update.progressed
    assert update.signals["generation_tokens"].real == 3


def test_real_streams_on_a_slow_server_are_counted_once_each_canary_ends() -> None:
    """2 s per token, two real streams, canaries cut off and retried: no real token is lost.

    A canary in flight explains its whole reply (32), so real tokens may wait
    while it runs; cut off with one token received, it gives back what it
    charged beyond that: every real token counts by the sample after it ended,
    but the one per canary that it may have caused unseen.
    """
    t = ProgressTracker()
    t.observe(sample(0.0, **WORK))
    tokens, real = 10.0, 0.0
    big = canary_budget(reply_tokens=32.0, prompt_tokens=8.0)
    for n in range(5):
        sent = 10.0 * n + 0.5
        t.canary_sent(n, sent, big)
        for step in (2.0, 4.0, 6.0, 8.0):
            tokens += 2 + (1 if step == 2.0 else 0)  # two real streams, the canary's first token
            real += 2
            t.observe(sample(10.0 * n + step, **{**WORK, "generation_tokens": tokens}))
        cut = CanaryResult("text", CanaryKind.TEXT, Reason.TIMEOUT, sent, 8.0, tokens_received=1)
        t.canary_finished(n, cut, sent + 8.0)
        tokens, real = tokens + 2, real + 2
        update = t.observe(sample(10.0 * n + 10.0, **{**WORK, "generation_tokens": tokens}))
        assert update.progressed, f"canary {n}"
        # Each cut-off canary keeps the one token that may have been on its way.
        assert t.totals["generation_tokens"].real == real - (n + 1), f"canary {n}"


def test_credit_expires_after_recent_window() -> None:
    t = ProgressTracker()
    t.observe(sample(1.0, **WORK))
    t.canary_sent(1, 1.5, BUDGET)
    t.canary_finished(1, result(completion=None, prompt=None, reason=Reason.TIMEOUT), 2.0)
    t.observe(sample(3.0, **WORK))
    t.observe(sample(2.0 + RECENT + 1, **WORK))
    update = t.observe(sample(2.0 + RECENT + 3, **{**WORK, "generation_tokens": 11}))
    assert update.progressed


@pytest.mark.parametrize(
    ("before", "after"),
    [
        pytest.param({"running": 3, "waiting": 1}, {"running": 3, "waiting": 9}, id="waiting"),
        pytest.param({"running": 3}, {"running": 1}, id="running"),
        pytest.param({"kv_cache_usage": 0.2}, {"kv_cache_usage": 0.9}, id="kv-cache"),
    ],
)
def test_gauge_churn_on_frozen_counters_is_no_progress(
    before: dict[str, float], after: dict[str, float]
) -> None:
    t = ProgressTracker()
    t.observe(sample(1.0, before, **WORK))
    assert not t.observe(sample(3.0, after, **WORK)).progressed


def test_preemptions_are_no_progress() -> None:
    t = ProgressTracker()
    t.observe(sample(1.0, preemptions=0, **WORK))
    update = t.observe(sample(3.0, preemptions=40, **WORK))
    assert not update.progressed
    assert "preemptions" not in t.signals


def test_absent_counter_is_no_evidence() -> None:
    t = ProgressTracker()
    t.observe(sample(1.0, {"running": 1}, preemptions=1))
    assert not t.available
    assert t.last_evidence_at is None
    assert not t.observe(sample(3.0, {"running": 2}, preemptions=2)).progressed


def test_a_counter_that_appears_later_is_compared_only_from_then() -> None:
    t = ProgressTracker()
    t.observe(sample(1.0, generation_tokens=10))
    assert not t.observe(sample(3.0, generation_tokens=10, prompt_tokens=500)).progressed


def test_every_counter_going_down_together_means_restart() -> None:
    t = ProgressTracker()
    t.observe(sample(1.0, generation_tokens=100, prompt_tokens=900))
    t.observe(sample(3.0, generation_tokens=120, prompt_tokens=950))
    update = t.observe(sample(5.0, generation_tokens=3, prompt_tokens=10))
    assert update.restarted
    assert t.last_progress_at is None


def test_one_counter_going_down_alone_is_neither_restart_nor_progress() -> None:
    t = ProgressTracker()
    t.observe(sample(1.0, generation_tokens=100, prompt_tokens=900))
    update = t.observe(sample(3.0, generation_tokens=3, prompt_tokens=900))
    assert not update.restarted
    assert not update.progressed


def test_report_names_what_moved_and_what_was_sentinels_own() -> None:
    t = ProgressTracker()
    t.observe(sample(1.0, **WORK))
    t.canary_sent(1, 1.5, BUDGET)
    t.observe(sample(3.0, **{**WORK, "generation_tokens": 15.0}))
    report = t.report(3.0)
    assert report["moved"] == ["generation_tokens"]
    interval = report["last_interval"]
    assert isinstance(interval, dict)
    assert interval["generation_tokens"] == {"delta": 5.0, "own": 2.0, "progress": 3.0}
