"""Hangs a passing canary cannot see, against the simulator, both ways.

- A scheduler that admits nothing but the priority canary (a leaked KV cache,
  a scheduler bug) starves real traffic while every canary passes: *starved*.
- Decode stuck after the first token, masked by other clients' one-token
  requests that keep completing: one-token completions prove no decode, so
  they neither keep the server alive nor gate the text canary off, and the
  text canary (streamed, at least 2 tokens) catches the silence: *engine*.
- The working servers in the same clothes stay green: a saturated server
  whose requests wait but progress, and a server whose only traffic is
  one-token requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest

from chaos.load import LoadConfig, run_load
from sentinel_sim.launch import SimProcess
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar

pytestmark = pytest.mark.timeout(240)

GREEN_WITHIN = 45.0
RED_WITHIN = 25.0  # 45 s at the shipped 15 s window, scaled like the other loopback suites
STARVED_WITHIN = 35.0  # 60 s at the shipped window, scaled the same way
HOLD = 30.0


@contextlib.asynccontextmanager
async def _load(config: LoadConfig) -> AsyncIterator[None]:
    stop = asyncio.Event()

    async def loop() -> None:
        while not stop.is_set():
            await run_load(config)

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        stop.set()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _kinds(sidecar: Sidecar) -> list[str]:
    status = await sidecar.json("/status")
    return [str(h["kind"]) for h in status["verdict"]["hangs"]]


async def _red(sidecar: Sidecar, within: float) -> float:
    async def red() -> bool:
        return await sidecar.code("/livez") == 503

    return await eventually(red, within, "/livez 503")


async def _failures(sidecar: Sidecar, seconds: float) -> int:
    failures, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        if await sidecar.code("/livez") != 200:
            failures += 1
        await asyncio.sleep(0.25)  # the polling interval, not a wait for a state
    return failures


async def test_real_traffic_starved_behind_a_passing_priority_canary_is_starved() -> None:
    async with SimProcess(scheduling_policy="priority", max_num_seqs=4) as sim:
        load = LoadConfig(target=sim.base_url, concurrency=6, duration=20.0, max_tokens=32)
        async with _load(load), running_sidecar(sim.base_url) as sidecar:
            await eventually(sidecar.green, GREEN_WITHIN, "green first")
            sim.control.set_fault("starve", below=0)  # only negative priorities admitted
            took = await _red(sidecar, STARVED_WITHIN)
            kinds = await _kinds(sidecar)
            print(f"starved: red after {took:.1f}s, {kinds}")
            assert kinds == ["starved"]
            status = await sidecar.json("/status")
            assert status["canaries"]["text"]["passing"], "the priority canary still passes"


# The two working servers below are held at once, each with its own simulator and
# sentinel, so the file pays for one HOLD rather than two; each test then asserts on
# what its own server showed.


@dataclass
class Held:
    failures: int
    text_passing: bool = False


async def _saturated_held() -> Held:
    async with SimProcess(scheduling_policy="priority", max_num_seqs=4) as sim:
        load = LoadConfig(target=sim.base_url, concurrency=24, duration=30.0, max_tokens=16)
        async with _load(load), running_sidecar(sim.base_url) as sidecar:
            await eventually(sidecar.green, GREEN_WITHIN, "green first")

            async def waiting() -> bool:
                status = await sidecar.json("/status")
                return float(status["evidence"]["waiting_real"] or 0) >= 1

            await eventually(waiting, 20.0, "real requests shown waiting")
            return Held(await _failures(sidecar, HOLD))


async def _one_token_held() -> Held:
    async with SimProcess(scheduling_policy="priority") as sim:
        one_token = LoadConfig(target=sim.base_url, concurrency=4, duration=30.0, max_tokens=1)
        async with _load(one_token), running_sidecar(sim.base_url) as sidecar:
            await eventually(sidecar.green, GREEN_WITHIN, "green first")
            failures = await _failures(sidecar, HOLD)
            status = await sidecar.json("/status")
            return Held(failures, bool(status["canaries"]["text"]["passing"]))


@pytest.fixture(scope="module")
def held() -> dict[str, Held | BaseException]:
    async def both() -> tuple[Held | BaseException, Held | BaseException]:
        return await asyncio.gather(_saturated_held(), _one_token_held(), return_exceptions=True)

    saturated, one_token = asyncio.run(both())
    return {"saturated": saturated, "one_token": one_token}


def _held(held: dict[str, Held | BaseException], name: str) -> Held:
    got = held[name]
    if isinstance(got, BaseException):
        raise got
    return got


def test_a_saturated_server_whose_waiting_requests_progress_is_never_starved(
    held: dict[str, Held | BaseException],
) -> None:
    assert _held(held, "saturated").failures == 0


async def test_decode_stalled_behind_one_token_completions_is_an_engine_hang() -> None:
    async with SimProcess(scheduling_policy="priority") as sim:
        one_token = LoadConfig(target=sim.base_url, concurrency=4, duration=20.0, max_tokens=1)
        async with _load(one_token), running_sidecar(sim.base_url) as sidecar:
            await eventually(sidecar.green, GREEN_WITHIN, "green first")
            sim.control.set_fault("stall_after_first")
            took = await _red(sidecar, RED_WITHIN)
            kinds = await _kinds(sidecar)
            print(f"one-token masked decode stall: red after {took:.1f}s, {kinds}")
            assert kinds == ["engine"]


def test_a_server_serving_only_one_token_requests_stays_green(
    held: dict[str, Held | BaseException],
) -> None:
    one_token = _held(held, "one_token")
    assert one_token.failures == 0
    # one-token completions do not gate the text canary: it keeps proving decode
    assert one_token.text_passing


async def test_a_caching_front_cannot_answer_for_a_hung_server() -> None:
    """Every canary body varies (a nonce in ``user``), so a cache never answers one."""
    body = {"messages": [{"role": "user", "content": "Say ok."}], "max_tokens": 2}
    async with (
        SimProcess(scheduling_policy="priority") as sim,
        running_sidecar(sim.base_url) as sidecar,
        httpx.AsyncClient(base_url=sim.base_url, timeout=5.0) as client,
    ):
        await eventually(sidecar.green, GREEN_WITHIN, "green first")
        sim.control.set_fault("cache_front")
        first = await client.post("/v1/chat/completions", json=body)
        sim.control.set_fault("engine_hang")
        # the front answers a body it has seen, though the engine is hung
        again = await client.post("/v1/chat/completions", json=body)
        assert first.status_code == again.status_code == 200
        assert again.json() == first.json()
        took = await _red(sidecar, RED_WITHIN)
        kinds = await _kinds(sidecar)
        print(f"caching front: red after {took:.1f}s, {kinds}")
        assert "engine" in kinds
