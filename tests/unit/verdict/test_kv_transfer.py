"""A disaggregated decode node whose KV transfers never land, both ways, on a virtual clock.

A decode node's routed requests wait in ``WAITING_FOR_REMOTE_KVS`` (vLLM's
waiting-by-reason ``deferred``) until their transfer lands. Deferred requests
whose transfers land, even slowly and with the gauge never at 0, are a
working node; deferred requests in every sample past ``kv_transfer_bound``
with no transfer landing, while the canaries pass, are the ``kv_transfer``
hang (policy unready). Where no landing counter is exposed, real progress
stands in; where the deferred reason is not counted, the rule has nothing to
judge.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.evidence.metrics import MetricsSample, parse_vllm_metrics
from sentinel.record.kv_transfer import KvTransferWatch
from sentinel.record.ledger import Ledger
from sentinel.verdict import (
    Action,
    Evidence,
    HangKind,
    KindEvidence,
    Lifecycle,
    Phase,
    Policy,
    VerdictState,
    evaluate,
)
from sentinel.verdict.hangs.kv_transfer import SECTION, KvTransferSection

TEXT = CanaryKind.TEXT
NIXL = "vllm:nixl_xfer_time_seconds"
AWAKE = Lifecycle()

Counters = Callable[[float], dict[str, float]]


def _ok(sent: float) -> CanaryResult:
    return CanaryResult("text-canary", TEXT, Reason.OK, sent, 0.3)


def _timeout(sent: float) -> CanaryResult:
    return CanaryResult("text-canary", TEXT, Reason.TIMEOUT, sent, 8.0)


def _watch() -> KvTransferWatch:
    return KvTransferWatch(Ledger([(TEXT, Action.RESTART, None)], 0.0), bound=120.0)


def _never(at: float) -> dict[str, float]:
    return {"kv_transfers": 7.0, "kv_failed_transfers": 0.0}


def _every_5s(at: float) -> dict[str, float]:
    return {"kv_transfers": 7.0 + at // 5, "kv_failed_transfers": 0.0}


def _run(
    counters: Counters,
    *,
    until: float,
    deferred: float | None = 3.0,
    canary_ok: bool = True,
    decode_at: Callable[[float], float | None] = lambda now: None,
    lifecycle: Lifecycle = AWAKE,
    **policy: object,
) -> list[tuple[float, HangKind, bool, bool]]:
    """Each second a scrape and an evaluation: (time, kind, ready, live) of every hang found."""
    watch = _watch()
    state = VerdictState(epoch=0, startup_passed=True)
    found: list[tuple[float, HangKind, bool, bool]] = []
    for second in range(int(until) + 1):
        now = float(second)
        gauges = {} if deferred is None else {"waiting_deferred": deferred}
        watch.observe_sample(MetricsSample(now, counters=counters(now), gauges=gauges))
        results = tuple((_ok if canary_ok else _timeout)(float(t)) for t in range(0, second - 8, 5))
        evidence = Evidence(
            kinds={TEXT: KindEvidence(TEXT, results=results)},
            progress_available=True,
            last_progress_at=decode_at(now),
            lifecycle=lifecycle,
            sections={SECTION.name: watch.section(now)},
        )
        state, verdict = evaluate(state, evidence, Policy(**policy), now)  # type: ignore[arg-type]
        for hang in verdict.hangs:
            found.append((now, hang.kind, verdict.readiness.ok, verdict.liveness.ok))
    return found


def test_transfers_that_never_land_are_named_at_the_bound_and_unready() -> None:
    found = _run(_never, until=130.0)
    assert found[0] == (120.0, HangKind.KV_TRANSFER, False, True)  # unready, never a restart
    assert {kind for _, kind, _, _ in found} == {HangKind.KV_TRANSFER}


def test_the_operator_may_choose_a_restart() -> None:
    found = _run(_never, until=121.0, kv_transfer_policy="restart")
    assert found[0][:2] == (120.0, HangKind.KV_TRANSFER)
    assert not found[0][3]  # liveness fails


def test_transfers_that_land_every_few_seconds_keep_a_busy_decode_node_green() -> None:
    # Deferred in every sample (the gauge never reads 0), each transfer landing late.
    assert _run(_every_5s, until=600.0) == []


def test_one_landing_within_the_bound_times_it_again() -> None:
    def once(at: float) -> dict[str, float]:
        return {"kv_transfers": 7.0 if at < 100 else 8.0}

    found = _run(once, until=221.0)
    assert found[0][:2] == (220.0, HangKind.KV_TRANSFER)


def test_without_a_landing_counter_real_progress_stands_in() -> None:
    def none(at: float) -> dict[str, float]:
        return {}

    assert _run(none, until=300.0, decode_at=lambda now: now - 1.0) == []
    found = _run(none, until=121.0)
    assert found[0][:2] == (120.0, HangKind.KV_TRANSFER)


def test_canaries_failing_too_are_not_the_transfers() -> None:
    kinds = {kind for _, kind, _, _ in _run(_never, until=200.0, canary_ok=False)}
    assert HangKind.KV_TRANSFER not in kinds


def test_a_server_that_does_not_count_deferred_requests_has_none_to_judge() -> None:
    assert _run(_never, until=300.0, deferred=None) == []
    watch = _watch()
    watch.observe_sample(MetricsSample(0.0, counters=_never(0.0)))
    fragment = watch.status(watch.section(0.0), 0.0)
    assert fragment == {"deferred": None, "why": "the server does not count deferred requests"}


def test_no_deferred_request_is_nothing_to_judge() -> None:
    assert _run(_never, until=300.0, deferred=0.0) == []


def test_a_paused_server_is_left_to_the_pause_bound() -> None:
    paused = Lifecycle(Phase.PAUSED, since=0.0, why="paused by POST /pause")
    kinds = {kind for _, kind, _, _ in _run(_never, until=200.0, lifecycle=paused)}
    assert HangKind.KV_TRANSFER not in kinds


def test_the_section_and_status_name_the_deferral_its_age_and_failures() -> None:
    watch = _watch()
    for at, failed in ((0.0, 2.0), (10.0, 3.0), (20.0, 5.0)):
        counters = {"kv_transfers": 7.0, "kv_failed_transfers": failed}
        watch.observe_sample(MetricsSample(at, counters=counters, gauges={"waiting_deferred": 4}))
    section = watch.section(20.0)
    assert section == KvTransferSection(True, 4.0, 0.0, NIXL, None, 3.0)
    status = watch.status(section, 25.0)
    assert status is not None
    assert (status["deferred"], status["deferred_for"], status["bound"]) == (4.0, 25.0, 120.0)
    assert (status["landing"], status["failed_transfers"]) == (NIXL, 3.0)


def test_a_sample_without_deferred_requests_ends_the_deferral() -> None:
    watch = _watch()
    for at, deferred in ((0.0, 2.0), (5.0, 0.0), (10.0, 1.0)):
        watch.observe_sample(MetricsSample(at, gauges={"waiting_deferred": deferred}))
    section = watch.section(10.0)
    assert isinstance(section, KvTransferSection)
    assert section.deferred_since == 10.0
    assert section.landing == ""


def test_sentinels_own_structured_canaries_are_not_remote_requests() -> None:
    ledger = Ledger([(CanaryKind.STRUCTURED, Action.RESTART, None)], 0.0)
    watch = KvTransferWatch(ledger, bound=120.0)
    ledger.canary_sent(CanaryKind.STRUCTURED, 0.0)  # its grammar compiling: deferred too
    watch.observe_sample(MetricsSample(1.0, gauges={"waiting_deferred": 1.0}))
    assert watch.section(1.0) == KvTransferSection(counted=True)
    watch.observe_sample(MetricsSample(2.0, gauges={"waiting_deferred": 3.0}))
    assert watch.section(2.0) == KvTransferSection(True, 2.0, 2.0)


def test_a_new_server_epoch_forgets_the_old_deferral() -> None:
    ledger = Ledger([(TEXT, Action.RESTART, None)], 0.0)
    watch = KvTransferWatch(ledger, bound=120.0)
    watch.observe_sample(MetricsSample(0.0, gauges={"waiting_deferred": 2.0}))
    ledger.new_epoch("a vLLM counter went down", 50.0)
    assert watch.section(50.0) == KvTransferSection()
    watch.observe_sample(MetricsSample(60.0, gauges={"waiting_deferred": 2.0}))
    section = watch.section(60.0)
    assert isinstance(section, KvTransferSection)
    assert section.deferred_since == 60.0


EXPOSITION = """\
vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="deferred"} 3.0
vllm:nixl_xfer_time_seconds_count{engine="0",model_name="m"} 12.0
vllm:nixl_xfer_time_seconds_sum{engine="0",model_name="m"} 0.4
vllm:nixl_num_failed_transfers_total{engine="0",model_name="m"} 1.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="external_kv_transfer"} 640.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_compute"} 99.0
"""


@pytest.mark.parametrize(
    ("key", "value"),
    [("kv_transfers", 12.0), ("kv_failed_transfers", 1.0), ("kv_external_tokens", 640.0)],
)
def test_the_landing_counters_are_read_under_their_real_names(key: str, value: float) -> None:
    sample = parse_vllm_metrics(EXPOSITION, 1.0)
    assert sample.counters[key] == value
    assert sample.gauges["waiting_deferred"] == 3.0
