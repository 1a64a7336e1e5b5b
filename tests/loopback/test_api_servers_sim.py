"""One of several API-server processes stuck, against the simulator, both ways.

``--api-server-count 2`` as vLLM runs it: two processes share one listening
socket, so a stuck one is covered by its peer (``/health``, every fresh
connection, the shared metrics). Red: its event loop wedged (blocked or
spinning) while a router's pooled connections to it wait, or the process
stopped by a signal, named with its PID. Green: two API servers under load,
pooled connections and all. And sentinel's own canary never stays on a
connection that outlived its deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest

from sentinel.canary.catalog import load_catalog
from sentinel.canary.result import Reason
from sentinel.canary.runner import CanaryRunner
from sentinel_sim.launch import SimProcess
from sentinel_sim.satellite import SERVER_HEADER
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar

pytestmark = pytest.mark.timeout(180)

API_WINDOW = 16.0  # the shipped 60 s, scaled like the loopback suites' hang window
RED_WITHIN = 30.0  # 90 s at the shipped window, scaled the same way
GREEN_WITHIN = 45.0
HOLD = 30.0


async def _client_on(server: str, base_url: str, model: str) -> httpx.AsyncClient:
    """A one-connection client whose pooled connection is held by API server ``server``."""
    for _ in range(40):
        client = httpx.AsyncClient(base_url=base_url, limits=httpx.Limits(max_connections=1))
        answer = await client.post(
            "/v1/completions", json={"model": model, "prompt": "hi", "max_tokens": 2}
        )
        if answer.headers.get(SERVER_HEADER) == server:
            return client
        await client.aclose()
    raise AssertionError(f"no connection landed on API server {server} in 40 tries")


@contextlib.asynccontextmanager
async def _router(
    sim: SimProcess, server: str, count: int
) -> AsyncIterator[list[httpx.AsyncClient]]:
    """A router's pooled keep-alive connections, ``count`` of them held by ``server``."""
    clients = [await _client_on(server, sim.base_url, sim.model) for _ in range(count)]
    try:
        yield clients
    finally:
        for client in clients:
            await client.aclose()


async def _send_over(clients: list[httpx.AsyncClient], model: str) -> list[asyncio.Task[object]]:
    body = {"model": model, "prompt": "hello", "max_tokens": 4}
    return [
        asyncio.create_task(c.post("/v1/completions", json=body, timeout=None)) for c in clients
    ]


async def _hang(sidecar: Sidecar) -> dict[str, object]:
    status = await sidecar.json("/status")
    hangs = [h for h in status["verdict"]["hangs"] if h["kind"] == "api_server"]
    assert hangs, status["verdict"]["hangs"]
    return dict(hangs[0])


async def _red(sidecar: Sidecar) -> float:
    async def red() -> bool:
        return await sidecar.code("/livez") == 503

    return await eventually(red, RED_WITHIN, "/livez 503")


@dataclass
class Wedged:
    """What one wedged API server's sentinel showed when it turned red."""

    pid: int
    took: float
    judged_over: float  # seconds from the wedge to the red verdict and its metrics read
    reason: str
    users_answered: bool
    metrics: str


async def _wedged(spin: bool) -> Wedged:
    async with (
        SimProcess(api_server_count=2) as sim,
        running_sidecar(sim.base_url, api_window=API_WINDOW) as sidecar,
    ):
        await eventually(sidecar.green, GREEN_WITHIN, "green first")
        wedged = sim.api_pids[1]
        async with _router(sim, "1", 2) as pooled:
            sim.control.set_fault("api_wedge", server=1, spin=spin)
            started = time.monotonic()
            waiting = await _send_over(pooled, sim.model)
            try:
                took = await _red(sidecar)
                hang = await _hang(sidecar)
                answered = any(task.done() for task in waiting)
                metrics = (await sidecar.client.get(sidecar.url + "/metrics")).text
                judged_over = time.monotonic() - started
                return Wedged(wedged, took, judged_over, str(hang["reason"]), answered, metrics)
            finally:
                for task in waiting:
                    task.cancel()
                await asyncio.gather(*waiting, return_exceptions=True)


@dataclass
class Stopped:
    """What the sentinel beside a stopped API server showed when it turned red."""

    pid: int
    took: float
    reason: str
    states: dict[int, str]


async def _stopped() -> Stopped:
    async with (
        SimProcess(api_server_count=2) as sim,
        running_sidecar(sim.base_url, api_window=API_WINDOW) as sidecar,
    ):
        await eventually(sidecar.green, GREEN_WITHIN, "green first")
        stopped = sim.api_pids[1]
        os.kill(stopped, signal.SIGSTOP)
        try:
            took = await _red(sidecar)
            reason = str((await _hang(sidecar))["reason"])
            status = await sidecar.json("/status")
            states = {
                p["pid"]: p["state"] for p in status["evidence"]["processes"]["api_processes"]
            }
            return Stopped(stopped, took, reason, states)
        finally:
            os.kill(stopped, signal.SIGCONT)


Judged = tuple[Wedged | BaseException, Wedged | BaseException, Stopped | BaseException]


@pytest.fixture(scope="module")
def judged() -> Judged:
    """Both wedges and the stopped server at once, each on its own simulator and sentinel.

    The file pays for one API window rather than three; each test then asserts on
    what its own server's sentinel showed.
    """

    async def all_three() -> Judged:
        return await asyncio.gather(
            _wedged(False), _wedged(True), _stopped(), return_exceptions=True
        )

    return asyncio.run(all_three())


@pytest.mark.parametrize("spin", [False, True], ids=["blocked", "spinning"])
def test_a_wedged_api_server_holding_pooled_connections_is_named(
    judged: Judged, spin: bool
) -> None:
    got = judged[1] if spin else judged[0]
    if isinstance(got, BaseException):
        raise got
    assert f"API-server process {got.pid}" in got.reason, got.reason
    assert "unread" in got.reason
    assert not got.users_answered  # its users still wait
    assert 'sentinel_hang_detections_total{kind="api_server"} 1.0' in got.metrics
    print(f"wedged API server ({'spinning' if spin else 'blocked'}) red in {got.took:.1f}s")
    assert got.judged_over >= API_WINDOW * 0.9  # judged over the window


def test_a_stopped_api_server_is_named_though_its_peer_answers_everything(
    judged: Judged,
) -> None:
    got = judged[2]
    if isinstance(got, BaseException):
        raise got
    assert f"(pid {got.pid}) stopped" in got.reason, got.reason
    assert "VLLM::APIServer_1" in got.reason
    assert got.states == {got.pid: "stopped"}
    print(f"stopped API server red in {got.took:.1f}s")


async def test_two_api_servers_under_load_with_pooled_connections_stay_green() -> None:
    async with (
        SimProcess(api_server_count=2, max_num_seqs=4, decode_tps=20.0) as sim,
        running_sidecar(sim.base_url, api_window=API_WINDOW) as sidecar,
    ):
        await eventually(sidecar.green, GREEN_WITHIN, "green first")
        body = {"model": sim.model, "prompt": "hello", "max_tokens": 24}
        stop = asyncio.Event()

        async def user(client: httpx.AsyncClient) -> None:
            while not stop.is_set():
                await client.post("/v1/completions", json=body, timeout=None)

        async with _router(sim, "1", 3) as on_1, _router(sim, "0", 3) as on_0:
            users = [asyncio.create_task(user(c)) for c in (*on_1, *on_0)]
            failures, end = 0, time.monotonic() + HOLD
            try:
                while time.monotonic() < end:
                    if await sidecar.code("/livez") != 200:
                        failures += 1
                    await asyncio.sleep(0.25)  # the polling interval, not a wait for a state
            finally:
                stop.set()
                await asyncio.gather(*users, return_exceptions=True)
        status = await sidecar.json("/status")
        assert failures == 0
        assert [h for h in status["verdict"]["hangs"] if h["kind"] == "api_server"] == []


async def test_a_canary_never_stays_on_a_connection_that_outlived_its_deadline() -> None:
    """The pooled connection held by a wedged process is dropped at the deadline.

    One connection at most, so a kept connection would leave the next canary
    nowhere to go: it passes only because the stuck one was closed and a new
    one was accepted by the peer.
    """
    text = load_catalog().get("text")
    async with SimProcess(api_server_count=2) as sim:
        client = await _client_on("1", sim.base_url, sim.model)
        try:
            runner = CanaryRunner(client, sim.base_url)
            sim.control.set_fault("api_wedge", server=1, duration=60)
            stuck = await runner.run(text, model=sim.model, deadline=2.0)
            assert stuck.reason is Reason.TIMEOUT
            after = await runner.run(text, model=sim.model, deadline=5.0)
            assert after.ok, after
        finally:
            await client.aclose()
