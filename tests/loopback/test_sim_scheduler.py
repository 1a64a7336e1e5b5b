"""The simulator's scheduler keeps vLLM 0.32's semantics: directly, then from a plain HTTP client.

Priority orders only the waiting queue (and only under ``priority``); a running
request is displaced only by KV-cache pressure, the victim being the worst
``(priority, arrival)`` under ``priority`` and the last admitted under ``fcfs``;
a client that hangs up aborts its request. Each step has a token budget:
running requests first (a decode takes one token, a prefill a chunk as large
as the budget allows, its KV blocks allocated chunk by chunk), then waiting
ones while budget remains; a prefill step with no output moves no counter.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sentinel_sim.launch import SimProcess
from sentinel_sim.scheduler import EngineRequest, EngineStats, Scheduler

PERIOD = 0.01


def _scheduler(
    policy: str,
    *,
    seqs: int = 1,
    kv_tokens: int = 4096,
    budget: int = 8192,
    prefill_tps: float = 1e9,
) -> Scheduler:
    return Scheduler(
        max_num_seqs=seqs,
        kv_cache_tokens=kv_tokens,
        block_size=16,
        policy=policy,
        prefill_tps=prefill_tps,
        max_num_batched_tokens=budget,
    )


def _stats(stats: EngineStats | None) -> EngineStats:
    assert stats is not None
    return stats


def _request(rid: int, priority: int, arrival: float, max_tokens: int = 4) -> EngineRequest:
    return EngineRequest(rid, 2, max_tokens, None, priority, arrival)


def _finish_order(scheduler: Scheduler, start: float = 0.0, limit: int = 10_000) -> list[int]:
    order: list[int] = []
    now = start
    for _ in range(limit):
        if not scheduler.has_work:
            return order
        now += PERIOD
        result = scheduler.step(now, period=PERIOD)
        order += [rid for rid, _, done in result.outputs if done is not None]
    raise AssertionError("scheduler never drained")


# -- the step function itself ------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "expected"), [("priority", [0, 3, 1, 2]), ("fcfs", [0, 1, 2, 3])]
)
def test_waiting_queue_order(policy: str, expected: list[int]) -> None:
    scheduler = _scheduler(policy)
    scheduler.add(_request(0, 0, 0.0))
    scheduler.step(0.0, period=PERIOD)  # the blocker is running
    scheduler.add(_request(1, 10, 1.0))
    scheduler.add(_request(2, 10, 2.0))
    scheduler.add(_request(3, -5, 3.0))
    assert _finish_order(scheduler) == expected


def test_priority_never_preempts_without_kv_pressure() -> None:
    scheduler = _scheduler("priority")
    scheduler.add(_request(0, 10, 0.0, max_tokens=50))
    scheduler.step(0.0, period=PERIOD)
    scheduler.add(_request(1, -100, 1.0))
    result = scheduler.step(PERIOD, period=PERIOD)
    assert [rid for rid, _, _ in result.outputs] == [0]
    assert result.stats is not None
    assert result.stats.preemptions == 0
    assert [r.rid for r in scheduler.waiting()] == [1]


@pytest.mark.parametrize(("policy", "first"), [("priority", 1), ("fcfs", 0)])
def test_kv_pressure_preempts_the_policy_victim(policy: str, first: int) -> None:
    scheduler = _scheduler(policy, seqs=4, kv_tokens=64)  # 4 blocks of 16
    scheduler.add(_request(0, 5, 0.0, max_tokens=40))  # worse priority, earlier arrival
    scheduler.step(0.0, period=PERIOD)
    scheduler.add(_request(1, 0, 1.0, max_tokens=40))
    preemptions = 0
    order: list[int] = []
    now = 0.0
    while scheduler.has_work:
        now += PERIOD
        result = scheduler.step(now, period=PERIOD)
        assert result.stats is not None
        preemptions += result.stats.preemptions
        assert scheduler.free_blocks >= 0
        order += [rid for rid, _, done in result.outputs if done is not None]
    assert preemptions >= 1
    assert order[0] == first
    assert sorted(order) == [0, 1]


def test_structured_requests_wait_deferred_while_text_runs() -> None:
    scheduler = _scheduler("fcfs", seqs=4)
    structured = _request(0, 0, 0.0)
    structured.structured = True
    scheduler.add(structured)
    scheduler.add(_request(1, 0, 1.0))
    result = scheduler.step(0.0, period=PERIOD, defer_structured=True)
    assert [rid for rid, _, _ in result.outputs] == [1]
    assert result.stats is not None
    assert result.stats.waiting_deferred == 1
    result = scheduler.step(PERIOD, period=PERIOD)  # compilation "finished"
    assert 0 in [rid for rid, _, _ in result.outputs]


def test_abort_frees_slot_and_kv() -> None:
    scheduler = _scheduler("fcfs")
    scheduler.add(_request(0, 0, 0.0, max_tokens=100))
    scheduler.step(0.0, period=PERIOD)
    scheduler.add(_request(1, 0, 1.0))
    assert scheduler.abort(0)
    assert scheduler.free_blocks == scheduler.total_blocks
    assert _finish_order(scheduler) == [1]


# -- the token budget and chunked prefill ------------------------------------------------


def test_long_prompt_prefills_in_chunks_moving_only_gauges() -> None:
    scheduler = _scheduler("fcfs", seqs=4, budget=100)
    scheduler.add(EngineRequest(0, 450, 2, None, 0, 0.0))
    kv: list[float] = []
    for step in range(4):  # 4 chunks of 100 tokens
        result = scheduler.step(step * PERIOD)
        stats = _stats(result.stats)
        assert result.outputs == []
        assert result.prefill_tokens == 100
        assert (stats.prompt_tokens, stats.generation_tokens, stats.iteration_tokens) == (0, 0, 0)
        assert stats.ttfts == ()
        assert stats.running == 1
        kv.append(stats.kv_usage)
    assert kv == sorted(set(kv))  # a new maximum every chunk
    assert kv[0] == scheduler._blocks_for(100) / scheduler.total_blocks
    result = scheduler.step(4 * PERIOD)  # the last 50 tokens, then the first token
    stats = _stats(result.stats)
    assert result.outputs == [(0, 1, None)]
    assert result.prefill_tokens == 50
    assert (stats.prompt_tokens, stats.generation_tokens, len(stats.ttfts)) == (450, 1, 1)
    assert stats.iteration_tokens == 451


def test_running_first_a_decode_takes_one_token_the_admitted_prefill_the_rest() -> None:
    scheduler = _scheduler("fcfs", seqs=4, budget=10)
    scheduler.add(_request(0, 0, 0.0, max_tokens=50))
    scheduler.step(0.0)  # prompt of 2 tokens, first token sampled: now decoding
    scheduler.add(EngineRequest(1, 30, 5, None, 0, 1.0))
    scheduler.add(_request(2, 0, 2.0))
    plan = scheduler.schedule(PERIOD)
    assert plan.scheduled == {0: 1, 1: 9}  # request 2 waits: the budget is spent
    assert plan.prefill_tokens == 9
    result = scheduler.execute(plan, PERIOD)
    assert [rid for rid, _, _ in result.outputs] == [0]
    assert _stats(result.stats).waiting == 1
    plan = scheduler.schedule(2 * PERIOD)  # running first: 0 decodes, 1 continues
    assert plan.scheduled == {0: 1, 1: 9}


@pytest.mark.parametrize("policy", ["priority", "fcfs"])
def test_waiting_requests_wait_behind_a_long_prefill(policy: str) -> None:
    scheduler = _scheduler(policy, seqs=4, budget=100)
    scheduler.add(EngineRequest(0, 1000, 4, None, 0, 0.0))
    scheduler.step(0.0)
    scheduler.add(_request(1, -100, 0.5))  # the priority canary
    for step in range(1, 10):  # chunks 2..10 take the whole budget
        result = scheduler.step(step * PERIOD)
        stats = _stats(result.stats)
        assert stats.waiting == 1
        assert all(rid == 0 for rid, _, _ in result.outputs)
    assert scheduler.requests[0].generated == 1  # the long prompt's first token, at last
    result = scheduler.step(10 * PERIOD)  # now it decodes one token: the canary gets in
    assert {rid for rid, _, _ in result.outputs} == {0, 1}


def test_a_200k_prompt_holds_the_canary_for_over_90_simulated_seconds() -> None:
    # --max-num-batched-tokens 8192 --prefill-tps 2000: each chunk lasts about 4 s.
    scheduler = _scheduler("priority", seqs=16, kv_tokens=262144, budget=8192, prefill_tps=2000)
    scheduler.add(EngineRequest(0, 200_000, 16, None, 0, 0.0))
    now = 0.0
    plan = scheduler.schedule(now)
    canary = _request(1, -100, 0.001, max_tokens=1)
    scheduler.add(canary)
    while canary.first_token_at is None:
        seconds = scheduler.step_seconds(plan, PERIOD)
        scheduler.execute(plan, now + seconds)
        now += seconds
        plan = scheduler.schedule(now)
        assert now < 1000, "the canary never got a token"
    assert canary.first_token_at - canary.arrival >= 90


def test_preemption_takes_back_the_victims_scheduled_tokens() -> None:
    scheduler = _scheduler("priority", seqs=4, kv_tokens=64, budget=100)  # 4 blocks of 16
    scheduler.add(EngineRequest(0, 20, 40, None, 5, 0.0))  # worse priority, 2 blocks
    scheduler.step(0.0)
    scheduler.add(EngineRequest(1, 32, 40, None, 0, 1.0))  # 2 more: the cache is full
    scheduler.step(PERIOD)
    # request 0 is scheduled its decode token first; request 1 then needs a 3rd block and
    # the victim (worst priority) is request 0: its token and blocks are taken back.
    plan = scheduler.schedule(2 * PERIOD)
    assert plan.preemptions == 1
    assert plan.scheduled == {1: 1}
    assert [r.rid for r in scheduler.waiting()] == [0]
    assert scheduler.requests[0].computed == 0  # its KV is gone, recomputed on readmission
    result = scheduler.execute(plan, 2 * PERIOD)
    assert [rid for rid, _, _ in result.outputs] == [1]


def test_paused_admission_keeps_waiting_requests_while_running_ones_drain() -> None:
    scheduler = _scheduler("fcfs", seqs=4)
    scheduler.add(_request(0, 0, 0.0, max_tokens=3))
    scheduler.step(0.0)
    scheduler.add(_request(1, 0, 1.0))
    order: list[int] = []
    for step in range(1, 5):
        result = scheduler.step(step * PERIOD, admit=False)
        order += [rid for rid, _, done in result.outputs if done is not None]
    assert order == [0]
    assert [r.rid for r in scheduler.waiting()] == [1]
    assert _finish_order(scheduler, start=PERIOD * 5) == [1]


def test_abort_all_reports_every_request_as_aborted() -> None:
    scheduler = _scheduler("fcfs", seqs=1)
    scheduler.add(_request(0, 0, 0.0, max_tokens=10))
    scheduler.step(0.0)
    scheduler.add(_request(1, 0, 1.0))
    outputs, finished = scheduler.abort_all(2.0)
    assert outputs == [(0, 1, "abort"), (1, 0, "abort")]
    assert [f.reason for f in finished] == ["abort", "abort"]
    assert not scheduler.has_work
    assert scheduler.free_blocks == scheduler.total_blocks


# -- over HTTP, against the simulator process ----------------------------------------------


def _metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


async def _wait_metric(
    client: httpx.AsyncClient, name: str, value: float, deadline_s: float = 10.0
) -> str:
    deadline = time.monotonic() + deadline_s
    while True:
        text = (await client.get("/metrics")).text
        if _metric(text, name) == value:
            return text
        assert time.monotonic() < deadline, f"{name} never reached {value}"
        await asyncio.sleep(0.01)  # polling /metrics with a deadline


async def _complete(client: httpx.AsyncClient, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
    response = await client.post("/v1/completions", json=body, **kw)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("priority", ["high", "low1", "low2"]), ("fcfs", ["low1", "low2", "high"])],
)
async def test_http_priority_orders_waiting_queue_only_under_priority(
    policy: str, expected: list[str]
) -> None:
    async with (
        SimProcess(scheduling_policy=policy, max_num_seqs=1, decode_tps=200) as sim,
        httpx.AsyncClient(base_url=sim.base_url, timeout=30) as client,
    ):
        blocker = asyncio.create_task(
            _complete(client, {"prompt": "block", "max_tokens": 300, "ignore_eos": True})
        )
        await _wait_metric(client, "vllm:num_requests_running", 1)
        order: list[str] = []

        async def tracked(name: str, body_priority: int, header: str | None = None) -> None:
            headers = {"X-Vllm-Priority": header} if header is not None else {}
            body = {"prompt": name, "max_tokens": 1, "priority": body_priority}
            await _complete(client, body, headers=headers)
            order.append(name)

        tasks = []
        for count, (name, prio, header) in enumerate(
            [("low1", 10, None), ("low2", 10, None), ("high", 50, "-5")], start=1
        ):
            tasks.append(asyncio.create_task(tracked(name, prio, header)))
            await _wait_metric(client, "vllm:num_requests_waiting", count)
        await asyncio.gather(blocker, *tasks)
        assert order == expected


@pytest.mark.parametrize(("policy", "first"), [("priority", "urgent"), ("fcfs", "early")])
async def test_http_kv_pressure_preempts_the_policy_victim(policy: str, first: str) -> None:
    async with (
        SimProcess(
            scheduling_policy=policy, max_num_seqs=4, kv_cache_tokens=128, decode_tps=250
        ) as sim,
        httpx.AsyncClient(base_url=sim.base_url, timeout=30) as client,
    ):
        order: list[str] = []

        async def tracked(name: str, priority: int) -> None:
            body = {"prompt": "x", "max_tokens": 120, "ignore_eos": True, "priority": priority}
            await _complete(client, body)
            order.append(name)

        early = asyncio.create_task(tracked("early", 5))
        await _wait_metric(client, "vllm:num_requests_running", 1)
        urgent = asyncio.create_task(tracked("urgent", 0))
        await asyncio.gather(early, urgent)
        text = (await client.get("/metrics")).text
        assert _metric(text, "vllm:num_preemptions_total") >= 1
        assert order[0] == first


async def test_http_disconnect_aborts_and_frees_the_slot() -> None:
    async with (
        SimProcess(max_num_seqs=1) as sim,
        httpx.AsyncClient(base_url=sim.base_url, timeout=30) as client,
    ):
        long_body = {"prompt": "long", "max_tokens": 1000, "ignore_eos": True, "stream": True}
        async with client.stream("POST", "/v1/completions", json=long_body) as response:
            lines = response.aiter_lines()  # keep a reference: a dropped iterator hangs up
            while not (await anext(lines)).startswith("data: "):
                pass
            waiter = asyncio.create_task(_complete(client, {"prompt": "next", "max_tokens": 2}))
            await _wait_metric(client, "vllm:num_requests_waiting", 1)
        # hung up: the 10 s request is aborted and the waiting one runs
        reply = await asyncio.wait_for(waiter, timeout=5.0)
        assert reply["usage"]["completion_tokens"] == 2
        text = await _wait_metric(client, "vllm:num_requests_running", 0)
        success = _metric(text, "vllm:request_success_total")
        assert success == 1  # the aborted request is not a success
        assert _metric(text, "vllm:request_success_total", finished_reason="abort") == 0

        # a non-streaming client that times out is aborted too
        with pytest.raises(httpx.ReadTimeout):
            await client.post(
                "/v1/completions",
                json={"prompt": "slow", "max_tokens": 1000, "ignore_eos": True},
                timeout=0.3,
            )
        await _wait_metric(client, "vllm:num_requests_running", 0, deadline_s=5.0)
