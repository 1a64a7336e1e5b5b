"""Progress tracking: counters minus sentinel's own canaries, restarts, gauges."""

from __future__ import annotations

from sentinel.canary.result import CanaryKind, CanaryResult, Reason
from sentinel.evidence.metrics import MetricsSample
from sentinel.progress import ProgressTracker


def sample(at: float, gauges: dict[str, float] | None = None, **counters: float) -> MetricsSample:
    return MetricsSample(at=at, counters=counters, gauges=gauges or {})


def canary(completion: int = 2, prompt: int = 5, ok: bool = True) -> CanaryResult:
    return CanaryResult(
        name="text",
        kind=CanaryKind.TEXT,
        reason=Reason.OK if ok else Reason.TIMEOUT,
        started=0.0,
        duration=0.1,
        prompt_tokens=prompt,
        completion_tokens=completion,
    )


def test_first_sample_is_a_baseline_not_progress() -> None:
    t = ProgressTracker()
    assert not t.observe(sample(1.0, generation_tokens=10)).progressed
    assert t.last_progress_at is None
    assert t.available


def test_rising_counter_is_progress_at_the_sample_time() -> None:
    t = ProgressTracker()
    t.observe(sample(1.0, generation_tokens=10, completions=1))
    update = t.observe(sample(3.0, generation_tokens=11, completions=1))
    assert update.progressed
    assert update.changed == ("generation_tokens",)
    assert t.last_progress_at == 3.0


def test_flat_counters_are_no_progress() -> None:
    t = ProgressTracker()
    t.observe(sample(1.0, generation_tokens=10, engine_steps=4))
    assert not t.observe(sample(3.0, generation_tokens=10, engine_steps=4)).progressed
    assert t.last_progress_at is None


def test_own_canary_work_is_subtracted() -> None:
    t = ProgressTracker()
    t.observe(sample(1.0, generation_tokens=10, prompt_tokens=50, completions=3, engine_steps=20))
    t.observe_canary(canary(completion=2, prompt=5))
    update = t.observe(
        sample(3.0, generation_tokens=12, prompt_tokens=55, completions=4, engine_steps=22)
    )
    assert not update.progressed
    assert update.real_completions == 0
    assert t.last_real_completion_at is None


def test_real_traffic_beside_a_canary_is_progress() -> None:
    t = ProgressTracker()
    t.observe(sample(1.0, generation_tokens=10, completions=3))
    t.observe_canary(canary(completion=2))
    update = t.observe(sample(3.0, generation_tokens=40, completions=5))
    assert update.progressed
    assert update.real_completions == 1
    assert t.last_real_completion_at == 3.0


def test_failed_canaries_are_not_subtracted() -> None:
    t = ProgressTracker()
    t.observe(sample(1.0, generation_tokens=10))
    t.observe_canary(canary(ok=False))
    assert t.observe(sample(3.0, generation_tokens=12)).progressed


def test_counter_going_down_means_restart() -> None:
    t = ProgressTracker()
    t.observe(sample(1.0, generation_tokens=100))
    t.observe(sample(3.0, generation_tokens=120))
    update = t.observe(sample(5.0, generation_tokens=3))
    assert update.restarted
    assert t.last_progress_at is None


def test_gauge_change_counts_unless_canaries_moved() -> None:
    t = ProgressTracker()
    t.observe(sample(1.0, {"running": 0}, generation_tokens=1))
    assert not t.observe(
        sample(2.0, {"running": 1}, generation_tokens=1), canaries_moving=True
    ).progressed
    assert t.observe(sample(3.0, {"running": 2}, generation_tokens=1)).progressed


def test_absent_counter_is_no_evidence() -> None:
    t = ProgressTracker()
    t.observe(sample(1.0))
    assert not t.available
    assert not t.observe(sample(3.0)).progressed


IDLE = {"running": 1.0, "waiting": 0.0}
BUDGET = {"generation_tokens": 2.0, "prompt_tokens": 8.0, "engine_steps": 4.0}


def test_first_tokens_of_a_canary_sent_in_the_interval_are_not_progress() -> None:
    """A stream that stalls after its first token must not read as engine progress."""
    t = ProgressTracker()
    t.observe(sample(1.0, IDLE, generation_tokens=10, prompt_tokens=50, engine_steps=20))
    update = t.observe(
        sample(3.0, IDLE, generation_tokens=11, prompt_tokens=58, engine_steps=22),
        sent_budget=BUDGET,
        own_in_flight=1,
    )
    assert not update.progressed


def test_nothing_is_discounted_while_others_are_served() -> None:
    t = ProgressTracker()
    busy = {"running": 4.0, "waiting": 60.0}
    t.observe(sample(1.0, busy, generation_tokens=10))
    update = t.observe(sample(3.0, busy, generation_tokens=11), sent_budget=BUDGET, own_in_flight=1)
    assert update.progressed


def test_budget_not_applied_without_gauges() -> None:
    t = ProgressTracker()
    t.observe(sample(1.0, generation_tokens=10))
    update = t.observe(sample(3.0, generation_tokens=11), sent_budget=BUDGET, own_in_flight=1)
    assert update.progressed
