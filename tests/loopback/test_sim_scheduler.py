"""The simulator's scheduler keeps vLLM 0.32's semantics: directly, then from a plain HTTP client.

Priority orders only the waiting queue (and only under ``priority``); a running
request is displaced only by KV-cache pressure, the victim being the worst
``(priority, arrival)`` under ``priority`` and the last admitted under ``fcfs``;
a client that hangs up aborts its request.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sentinel_sim.launch import SimProcess
from sentinel_sim.scheduler import EngineRequest, Scheduler

PERIOD = 0.01


def _scheduler(policy: str, *, seqs: int = 1, kv_tokens: int = 4096) -> Scheduler:
    return Scheduler(
        max_num_seqs=seqs, kv_cache_tokens=kv_tokens, block_size=16, policy=policy, prefill_tps=1e9
    )


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
            _complete(client, {"prompt": "block", "max_tokens": 100, "ignore_eos": True})
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
