"""Per-target state: LRU and idle bounds, and progress net of the exporter's own canaries."""

from __future__ import annotations

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.exporter.state import ModuleTrack, OwnWork, TargetStore, canary_work, progress


def result(kind: str = "text", tokens: int | None = 2, prompt: int | None = 5) -> CanaryResult:
    return CanaryResult(
        name=kind,
        kind=CanaryKind(kind),
        reason=Reason.OK,
        started=0.0,
        duration=0.1,
        prompt_tokens=prompt,
        completion_tokens=tokens,
    )


def test_the_store_keeps_at_most_max_targets_dropping_the_least_recent() -> None:
    store = TargetStore(max_targets=3, idle_seconds=100)
    for i, key in enumerate("abcd"):
        store.touch(key, float(i))
    assert len(store) == 3
    assert "a" not in store
    store.touch("b", 10.0)  # b is now the most recent
    store.touch("e", 11.0)
    assert "c" not in store
    assert {"b", "d", "e"} == {k for k in "abcde" if k in store}


def test_idle_targets_are_dropped_and_not_counted() -> None:
    store = TargetStore(max_targets=10, idle_seconds=60)
    store.touch("old", 0.0)
    store.touch("new", 50.0)
    assert store.live(100.0) == 1  # a read: old is idle, still held
    assert len(store) == 2
    store.touch("new", 100.0)  # any write expires
    assert "old" not in store
    assert store.expire(1000.0) == 1
    assert len(store) == 0


def test_a_touched_target_keeps_its_state() -> None:
    store = TargetStore(max_targets=10, idle_seconds=60)
    store.touch("t", 0.0).own = OwnWork(1, 2)
    assert store.touch("t", 30.0).own == OwnWork(1, 2)
    # 70 s after its last probe, past idle_seconds: expired before the touch, so new.
    assert store.touch("t", 100.0).own == OwnWork()


def test_canary_work() -> None:
    assert canary_work(result()) == OwnWork(1, 2)
    assert canary_work(result("multimodal", tokens=3)) == OwnWork(2, 4)  # and its baseline
    cut = CanaryResult(
        name="text",
        kind=CanaryKind.TEXT,
        reason=Reason.TIMEOUT,
        started=0,
        duration=1,
        tokens_received=1,
    )
    assert canary_work(cut) == OwnWork(0, 1)
    assert OwnWork().plus([result(), result()]) == OwnWork(2, 4)


def test_a_first_probe_knows_no_progress() -> None:
    moved, track = progress(None, {"completions": 5, "generation_tokens": 50}, OwnWork(), False, 0)
    assert moved.moved is None
    assert moved.stalled_seconds == 0.0
    assert track.counters == {"completions": 5, "generation_tokens": 50}


def test_own_canaries_are_not_progress() -> None:
    before = ModuleTrack({"completions": 5, "generation_tokens": 50}, OwnWork(1, 2), 0.0)
    own = OwnWork(2, 4)  # one canary of two tokens since
    moved, _ = progress(before, {"completions": 6, "generation_tokens": 52}, own, True, 10.0)
    assert moved.moved is False
    assert moved.stalled_seconds == 10.0
    moved, _ = progress(before, {"completions": 6, "generation_tokens": 53}, own, True, 10.0)
    assert moved.moved is True  # one token more than the canary explains
    assert moved.stalled_seconds == 0.0


def test_stalled_seconds_count_from_the_last_progress_while_busy() -> None:
    counters = {"completions": 5.0}
    _, track = progress(None, counters, OwnWork(), True, 0.0)
    moved, track = progress(track, counters, OwnWork(), True, 15.0)
    assert (moved.moved, moved.stalled_seconds) == (False, 15.0)
    moved, track = progress(track, counters, OwnWork(), True, 30.0)
    assert moved.stalled_seconds == 30.0
    moved, track = progress(track, counters, OwnWork(), False, 45.0)  # idle: not a stall
    assert moved.stalled_seconds == 0.0
    moved, track = progress(track, counters, OwnWork(), True, 60.0)
    assert moved.stalled_seconds == 15.0  # counted from the idle probe
    moved, track = progress(track, {"completions": 6.0}, OwnWork(), True, 75.0)
    assert (moved.moved, moved.stalled_seconds) == (True, 0.0)


def test_a_counter_that_went_down_is_a_restart_with_new_work() -> None:
    before = ModuleTrack({"completions": 100.0}, OwnWork(), 0.0)
    assert progress(before, {"completions": 3.0}, OwnWork(), True, 5.0)[0].moved is True
    assert progress(before, {"completions": 0.0}, OwnWork(), True, 5.0)[0].moved is False


def test_no_common_counter_is_no_evidence() -> None:
    before = ModuleTrack({"completions": 1.0}, OwnWork(), 0.0)
    moved, _ = progress(before, {"generation_tokens": 9.0}, OwnWork(), False, 5.0)
    assert moved.moved is None
