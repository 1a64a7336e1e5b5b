"""The ledger: canary bookkeeping per epoch, restarts, and the evidence it freezes.

Pure and synchronous: every method takes "now", so the times below are the
whole story.
"""

from __future__ import annotations

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.evidence.metrics import MetricsSample
from sentinel.evidence.process_model import (
    Attribution,
    ProcessInfo,
    ProcessRole,
    ProcessSnapshot,
    ProcessState,
)
from sentinel.record.ledger import HISTORY, Ledger
from sentinel.verdict import Action

TEXT, STRUCTURED = CanaryKind("text"), CanaryKind("structured")


def _ledger(now: float = 0.0) -> Ledger:
    return Ledger(
        [(TEXT, Action.RESTART, None), (STRUCTURED, Action.UNREADY, 3.0)],
        now,
    )


def _result(kind: CanaryKind = TEXT, at: float = 0.0, reason: Reason = Reason.OK) -> CanaryResult:
    return CanaryResult(
        name=str(kind), kind=kind, reason=reason, started=at, duration=0.5, completion_tokens=2
    )


def test_a_sent_canary_is_outstanding_until_done() -> None:
    ledger = _ledger()
    token = ledger.canary_sent(TEXT, 10.0)
    other = ledger.canary_sent(STRUCTURED, 11.0)
    assert token != other
    assert ledger.in_flight() == 2
    assert ledger.records[TEXT].outstanding == {token: 10.0}
    ledger.canary_done(TEXT, token, _result(at=10.0), 10.5, epoch=0)
    assert ledger.in_flight() == 1
    assert list(ledger.records[TEXT].results) == [_result(at=10.0)]


def test_a_path_result_is_kept_beside_its_control() -> None:
    ledger = _ledger()
    token = ledger.canary_sent(STRUCTURED, 1.0)
    control = _result(TEXT, 1.0)
    ledger.canary_done(STRUCTURED, token, _result(STRUCTURED, 1.0), 2.0, control=control, epoch=0)
    record = ledger.records[STRUCTURED]
    assert list(record.controls) == [control]
    assert len(record.results) == 1


def test_a_result_from_an_earlier_epoch_is_dropped_but_not_left_outstanding() -> None:
    ledger = _ledger()
    token = ledger.canary_sent(TEXT, 1.0)
    ledger.new_epoch("API server restarted", 2.0)
    ledger.canary_done(TEXT, token, _result(at=1.0), 3.0, epoch=0)
    assert list(ledger.records[TEXT].results) == []
    assert ledger.in_flight() == 0


def test_history_is_bounded() -> None:
    ledger = _ledger()
    for i in range(HISTORY + 5):
        token = ledger.canary_sent(TEXT, float(i))
        ledger.canary_done(TEXT, token, _result(at=float(i)), i + 0.5, epoch=0)
    results = ledger.records[TEXT].results
    assert len(results) == HISTORY
    assert results[0].started == 5.0


def test_a_new_epoch_forgets_the_previous_server() -> None:
    ledger = _ledger(now=0.0)
    token = ledger.canary_sent(TEXT, 1.0)
    ledger.canary_done(TEXT, token, _result(at=1.0), 1.5, epoch=0)
    ledger.disable(STRUCTURED, "no grammar backend")
    ledger.model = "m"
    ledger.startup_judged(True)
    ledger.observe_health(503, 2.0)
    ledger.progress.observe(MetricsSample(2.0, counters={"completions": 1.0}))

    ledger.new_epoch("a vLLM counter went down", 5.0)

    assert (ledger.epoch, ledger.epoch_started, ledger.epoch_reason) == (
        1,
        5.0,
        "a vLLM counter went down",
    )
    assert list(ledger.records[TEXT].results) == []
    assert ledger.records[STRUCTURED].enabled  # a new server may take the kind again
    assert ledger.records[STRUCTURED].disabled_reason == ""
    assert ledger.model is None
    assert not ledger.plan.startup_passed
    assert ledger.health_failing_since is None
    assert ledger.progress.last_sample_at is None


def test_a_refusal_is_never_a_new_epoch_it_starts_the_listener_timer() -> None:
    ledger = _ledger()
    ledger.saw_refusal(1.0)
    assert (ledger.epoch, ledger.reachable, ledger.refused_since) == (0, False, 1.0)
    ledger.saw_answer()
    assert ledger.evidence(1.5, freshness=2.0).refused_since is None
    ledger.saw_refusal(2.0)
    ledger.saw_refusal(3.0)  # still refused: the timer keeps its start
    assert (ledger.epoch, ledger.refused_since) == (0, 2.0)
    assert ledger.evidence(4.0, freshness=2.0).refused_since == 2.0


def test_a_failed_canary_of_any_kind_is_never_a_new_epoch() -> None:
    ledger = _ledger()
    ledger.saw_answer()
    for n, reason in enumerate((Reason.PROTOCOL, Reason.HTTP_STATUS, Reason.EMPTY)):
        token = ledger.canary_sent(TEXT, float(n))
        failed = CanaryResult("text", TEXT, reason, float(n), 0.1)
        ledger.canary_done(TEXT, token, failed, n + 0.1, epoch=0)
    assert ledger.epoch == 0
    assert len(ledger.records[TEXT].results) == 3


def test_the_credit_of_a_canary_follows_it_from_send_to_done() -> None:
    ledger = _ledger()
    ledger.progress.observe(MetricsSample(0.0, counters={"generation_tokens": 10.0}))
    token = ledger.canary_sent(TEXT, 1.0, {"generation_tokens": 2.0})
    # The canary's first token, while it is still in flight: not progress.
    assert not ledger.progress.observe(
        MetricsSample(2.0, counters={"generation_tokens": 11.0})
    ).progressed
    ledger.canary_abandoned(TEXT, token, 3.0)
    assert ledger.records[TEXT].outstanding == {}
    # Abandoned without a result: what it may have caused (its whole reply of
    # 2) stays explained; work beyond that is progress.
    assert not ledger.progress.observe(
        MetricsSample(4.0, counters={"generation_tokens": 12.0})
    ).progressed
    assert ledger.progress.observe(
        MetricsSample(5.0, counters={"generation_tokens": 13.0})
    ).progressed


def test_busy_while_real_completions_are_recent() -> None:
    ledger = _ledger()
    assert not ledger.busy(100.0, 30.0)  # nothing seen yet
    ledger.progress.observe(MetricsSample(9.0, counters={"completions": 4.0}))
    ledger.progress.observe(MetricsSample(10.0, counters={"completions": 5.0}))
    assert ledger.busy(40.0, 30.0)
    assert not ledger.busy(40.5, 30.0)


def test_health_failing_since_holds_the_first_failure() -> None:
    ledger = _ledger()
    ledger.observe_health(503, 1.0)
    ledger.observe_health(500, 2.0)
    assert (ledger.health_status, ledger.health_failing_since) == (500, 1.0)
    ledger.observe_health(200, 3.0)
    assert ledger.health_failing_since is None


def test_evidence_freezes_each_kind_and_counts_progress_only_when_fresh() -> None:
    ledger = _ledger()
    ledger.canary_sent(TEXT, 4.0)
    ledger.disable(STRUCTURED, "unsupported")
    ledger.progress.observe(MetricsSample(5.0, counters={"generation_tokens": 1.0}))
    ledger.progress.observe(MetricsSample(6.0, counters={"generation_tokens": 9.0}))

    fresh = ledger.evidence(7.0, freshness=2.0, unobserved=((3.0, 4.0),))
    assert fresh.progress_available
    assert fresh.last_progress_at == 6.0
    assert fresh.last_evidence_at == 6.0
    assert fresh.unobserved == ((3.0, 4.0),)
    assert fresh.kinds[TEXT].outstanding == (4.0,)
    assert fresh.kinds[STRUCTURED].action is Action.UNREADY
    assert fresh.kinds[STRUCTURED].latency_slo == 3.0
    assert not fresh.kinds[STRUCTURED].enabled

    stale = ledger.evidence(8.5, freshness=2.0)
    assert not stale.progress_available
    # Frozen: later canaries do not change evidence already taken.
    ledger.canary_sent(TEXT, 9.0)
    assert fresh.kinds[TEXT].outstanding == (4.0,)


def _snapshot(at: float, pid: int | None) -> ProcessSnapshot:
    api = None
    if pid is not None:
        api = ProcessInfo(pid, ProcessRole.API_SERVER, "vllm", ProcessState.SLEEPING, 100.0)
    return ProcessSnapshot(at=at, api=api, attribution=Attribution.LISTENING_SOCKET)


def test_an_api_server_that_exits_ends_its_epoch_once() -> None:
    """Gone is a server's end; its successor appearing afterwards is not a second restart."""
    ledger = _ledger()
    ledger.observe_processes(_snapshot(1.0, None), 1.0)  # never attributed: nothing ends
    ledger.observe_processes(_snapshot(2.0, 41), 2.0)
    ledger.observe_processes(_snapshot(3.0, 41), 3.0)
    assert ledger.epoch == 0
    ledger.observe_processes(_snapshot(4.0, None), 4.0)
    assert (ledger.epoch, ledger.epoch_reason) == (1, "API server exited (pid 41)")
    ledger.observe_processes(_snapshot(5.0, None), 5.0)
    ledger.observe_processes(_snapshot(6.0, 42), 6.0)
    assert ledger.epoch == 1
    ledger.observe_processes(_snapshot(7.0, 43), 7.0)
    assert (ledger.epoch, ledger.epoch_reason) == (2, "API server restarted (pid 42 -> 43)")


def test_the_process_step_tells_the_watcher_of_each_new_refusal_once() -> None:
    """A refusal sends the watcher to the target's socket at the next sample, once per episode."""
    import asyncio

    from sentinel.record.observers import Observers

    class Watcher:
        def __init__(self) -> None:
            self.told = 0

        def port_refused(self) -> None:
            self.told += 1

        async def sample_async(self) -> ProcessSnapshot:
            return ProcessSnapshot(at=0.0)

    ledger = _ledger()
    watcher = Watcher()
    step = Observers(ledger, lambda: 0.0).process_step(watcher)  # type: ignore[arg-type]

    async def samples(refusals: list[float | None]) -> list[int]:
        told = []
        for refused in refusals:
            if refused is None:
                ledger.saw_answer()
            else:
                ledger.saw_refusal(refused)
            await step()
            told.append(watcher.told)
        return told

    assert asyncio.run(samples([None, 5.0, 6.0, 7.0, None, 9.0])) == [0, 1, 1, 1, 1, 2]
