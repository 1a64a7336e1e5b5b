"""The simulator's decode node under a KV connector keeps vLLM's semantics (``remote_kv``).

A request marked remote gets its blocks and waits deferred (reason
``deferred``, holding its blocks, generating nothing) until its transfer
lands; then it is admitted with its prompt computed and samples its first
token with no prefill. Transfers that never land leave it deferred while
local requests run and finish. Without a connector the mark is ignored, as
vLLM without a KV connector ignores ``kv_transfer_params``.
"""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

from sentinel_sim.faults import ActiveFault, Fault, FaultSpec, remote_kv_of
from sentinel_sim.metrics import VllmMetrics
from sentinel_sim.openai_request import remote_prefill
from sentinel_sim.scheduler import EngineRequest, EngineStats, RemoteKv, Scheduler

NIXL_2S = RemoteKv(wait=2.0, connector="nixl")
NEVER = RemoteKv(wait=math.inf, connector="nixl")


def _scheduler() -> Scheduler:
    return Scheduler(
        max_num_seqs=4, kv_cache_tokens=4096, block_size=16, policy="fcfs", prefill_tps=1e9
    )


def _remote(rid: int, prompt: int = 64, max_tokens: int = 3) -> EngineRequest:
    return EngineRequest(rid, prompt, max_tokens, None, 0, 0.0, remote=True)


def _stats(stats: EngineStats | None) -> EngineStats:
    assert stats is not None
    return stats


def test_a_remote_request_waits_deferred_holding_its_blocks_until_its_transfer_lands() -> None:
    scheduler = _scheduler()
    scheduler.add(_remote(1))
    for now in (0.0, 1.0, 1.9):
        stats = _stats(scheduler.step(now, remote_kv=NIXL_2S).stats)
        assert (stats.running, stats.waiting, stats.waiting_deferred) == (0, 1, 1)
        assert stats.generation_tokens == 0
        assert stats.kv_usage > 0  # WAITING_FOR_REMOTE_KVS holds its blocks
    plan = scheduler.schedule(2.0, remote_kv=NIXL_2S)
    assert (plan.scheduled, plan.prefill_tokens) == ({1: 1}, 0)  # its prompt came computed
    result = scheduler.execute(plan, 2.0)
    stats = _stats(result.stats)
    assert (stats.running, stats.waiting_deferred, stats.generation_tokens) == (1, 0, 1)
    assert (stats.kv_connector, stats.kv_landed) == ("nixl", (2.0,))
    assert stats.prompt_tokens == 64


def test_transfers_that_never_land_leave_it_deferred_while_local_requests_finish() -> None:
    scheduler = _scheduler()
    scheduler.add(_remote(1))
    scheduler.add(EngineRequest(2, 16, 2, None, 0, 0.0))
    finished = 0
    for step in range(200):
        stats = _stats(scheduler.step(step * 5.0, remote_kv=NEVER).stats)
        finished += len(stats.finished)
    assert finished == 1  # the local one
    assert (stats.running, stats.waiting, stats.waiting_deferred) == (0, 1, 1)
    assert scheduler.abort(1)
    assert scheduler.kv_usage() == 0.0  # an abort frees the blocks it held


def test_without_a_kv_connector_the_mark_is_ignored() -> None:
    scheduler = _scheduler()
    scheduler.add(_remote(1))
    plan = scheduler.schedule(0.0)
    assert (plan.scheduled, plan.prefill_tokens, plan.deferred) == ({1: 64}, 64, 0)


def test_a_connector_switched_off_lands_what_it_awaited() -> None:
    scheduler = _scheduler()
    scheduler.add(_remote(1))
    scheduler.step(0.0, remote_kv=NEVER)
    plan = scheduler.schedule(1.0)
    assert (plan.scheduled, plan.prefill_tokens) == ({1: 1}, 0)


def test_the_fault_reads_as_its_connector() -> None:
    spec = FaultSpec.parse("remote_kv:land=never,connector=mooncake")
    entry = ActiveFault(Fault.REMOTE_KV, spec.params, None)
    assert remote_kv_of(entry) == RemoteKv(math.inf, "mooncake")
    assert remote_kv_of(None) is None
    assert remote_kv_of(ActiveFault(Fault.REMOTE_KV, FaultSpec.parse("remote_kv").params, None))
    assert remote_prefill({"kv_transfer_params": {"do_remote_prefill": True}})
    assert not remote_prefill({"kv_transfer_params": {"do_remote_prefill": False}})
    assert not remote_prefill({})


def test_nixl_publishes_the_connectors_families_under_their_real_names() -> None:
    metrics = VllmMetrics("m", max_model_len=4096, kv_cache_tokens=4096)
    assert b"nixl" not in metrics.exposition()  # no connector, no families
    scheduler = _scheduler()
    scheduler.add(_remote(1))
    for now in (0.0, 2.0):
        result = scheduler.step(now, remote_kv=NIXL_2S)
        metrics.record(_stats(result.stats), bool(result.outputs))
    samples = {
        (s.name, s.labels.get("reason", "")): s.value
        for family in text_string_to_metric_families(metrics.exposition().decode())
        for s in family.samples
    }
    assert samples[("vllm:nixl_xfer_time_seconds_count", "")] == 1.0
    assert samples[("vllm:nixl_num_failed_transfers_total", "")] == 0.0
    assert samples[("vllm:nixl_num_failed_notifications_total", "")] == 0.0
    assert samples[("vllm:num_requests_waiting_by_reason", "deferred")] == 0.0
