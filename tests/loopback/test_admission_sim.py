"""Admission control at its cap (issue 30), against the simulator, both ways.

vLLM's ``--max-num-queued-reqs`` refuses a request with HTTP 503 ("The engine
is currently busy ...") before the engine once that many are unfinished,
whatever its priority, and counts ``vllm:admission_rejections_total``, while
the admitted work completes. sentinel's canaries are refused like any other
request there: load shedding, not a failure, so the replica stays live and
ready (a pool at its cap at peak would otherwise leave the endpoints all at
once). The same cap on a hung engine completes nothing: an engine hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import httpx
import pytest

from chaos.load import LoadConfig
from sentinel_sim.launch import SimProcess
from tests.loopback.sidecar import eventually, running_sidecar
from tests.loopback.test_unseen_hangs_sim import _load

pytestmark = pytest.mark.timeout(240)

GREEN_WITHIN = 45.0
RED_WITHIN = 25.0  # as in test_unseen_hangs_sim: 45 s at the shipped window, scaled
HOLD = 25.0
CAP = 6  # unfinished requests admitted
CONCURRENCY = 16  # in flight at most, well past the cap
RATE = 100.0  # requests per second, open loop: most arrivals are refused


def _sim() -> SimProcess:
    return SimProcess(
        scheduling_policy="priority",
        max_num_seqs=2,
        extra_args=("--max-num-queued-reqs", str(CAP)),
    )


def _capped_load(target: str) -> contextlib.AbstractAsyncContextManager[None]:
    config = LoadConfig(
        target=target, concurrency=CONCURRENCY, rate=RATE, duration=20.0, max_tokens=8
    )
    return _load(config)


def _rejections(sim: SimProcess) -> float:
    text = httpx.get(sim.base_url + "/metrics", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:admission_rejections_total{")
    )


async def test_a_server_at_its_admission_cap_stays_live_and_ready() -> None:
    async with (
        _sim() as sim,
        running_sidecar(sim.base_url) as sidecar,
    ):
        await eventually(sidecar.green, GREEN_WITHIN, "green first")
        async with _capped_load(sim.base_url):
            before = await asyncio.to_thread(_rejections, sim)
            live_failures = ready_failures = samples = 0
            end = time.monotonic() + HOLD
            while time.monotonic() < end:
                live_failures += await sidecar.code("/livez") != 200
                ready_failures += await sidecar.code("/readyz") != 200
                samples += 1
                await asyncio.sleep(0.5)  # the polling interval, not a wait for a state
            refused = await asyncio.to_thread(_rejections, sim) - before
            status = await sidecar.json("/status")
        print(
            f"admission cap {CAP}: {refused:.0f} requests refused in {HOLD:.0f}s, "
            f"{live_failures} liveness and {ready_failures} readiness failures "
            f"in {samples} samples; hangs {status['verdict']['hangs']}"
        )
        assert refused > 0, "the load must reach the cap"
        assert live_failures == 0
        assert ready_failures == 0


async def test_a_hung_engine_at_its_admission_cap_is_an_engine_hang() -> None:
    async with (
        _sim() as sim,
        running_sidecar(sim.base_url) as sidecar,
    ):
        await eventually(sidecar.green, GREEN_WITHIN, "green first")
        async with _capped_load(sim.base_url):
            sim.control.set_fault("engine_hang")

            async def red() -> bool:
                return await sidecar.code("/livez") == 503

            try:
                await eventually(red, RED_WITHIN, "/livez 503 (a hung engine behind its cap)")
                status = await sidecar.json("/status")
            finally:
                sim.control.clear_all()
        assert [h["kind"] for h in status["verdict"]["hangs"]] == ["engine"], status["verdict"]
