"""The HTTP listener on its own thread: probes answer while the daemon's loop is busy."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator
from dataclasses import replace

import httpx
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from sentinel.evaluation.health import HealthState, ProbeAnswer, initial_snapshot
from sentinel.serve import probe_thread
from sentinel.serve.probe_thread import THREAD_NAME, ThreadedHttpServer

pytestmark = pytest.mark.asyncio

BLOCK_S = 1.0


async def _where(_request: web.Request) -> web.Response:
    return web.json_response({"thread": threading.current_thread().name})


@pytest.fixture
async def server() -> AsyncIterator[ThreadedHttpServer]:
    state = HealthState()
    http = ThreadedHttpServer(
        state, CollectorRegistry(), "127.0.0.1", 0, extra_routes=[web.get("/where", _where)]
    )
    await http.start()
    try:
        yield http
    finally:
        await http.stop()


def _get_while_blocked(url: str, paths: list[str]) -> dict[str, tuple[int, float]]:
    """GET each path from a client thread while the calling (daemon) loop is blocked."""
    results: dict[str, tuple[int, float]] = {}
    started = threading.Event()

    def client() -> None:
        with httpx.Client(base_url=url, timeout=5.0) as c:
            c.get("/livez")  # connected and warm before the loop blocks
            started.set()
            for path in paths:
                sent = time.monotonic()
                status = c.get(path).status_code
                results[path] = (status, time.monotonic() - sent)

    thread = threading.Thread(target=client)
    thread.start()
    assert started.wait(5.0)
    deadline = time.monotonic() + BLOCK_S
    while time.monotonic() < deadline:  # the daemon's loop does CPU work and yields nothing
        sum(range(10_000))
    thread.join(10.0)
    assert not thread.is_alive()
    return results


async def test_probes_answer_while_the_daemon_loop_is_blocked(server: ThreadedHttpServer) -> None:
    results = _get_while_blocked(server.url, ["/livez", "/readyz", "/startupz", "/healthz"])
    for path, (status, seconds) in results.items():
        assert status in (200, 503), path
        # The loop stays blocked for BLOCK_S; the probe did not wait for it.
        assert seconds < BLOCK_S / 4, (path, seconds)
    assert results["/livez"][0] == 200
    assert results["/readyz"][0] == 503  # startup has not passed: the snapshot's answer


async def test_other_routes_run_on_the_daemon_loop(server: ThreadedHttpServer) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=5.0) as client:
        where = (await client.get("/where")).json()
        status = await client.get("/status")
        metrics = await client.get("/metrics")
    assert where["thread"] == threading.current_thread().name != THREAD_NAME
    assert status.status_code == 200
    assert status.json()["liveness"]["status"] == "ok"
    assert metrics.status_code == 200


async def test_a_wedged_daemon_loop_gives_503_on_other_routes_not_a_hang(
    server: ThreadedHttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(probe_thread, "MAIN_LOOP_TIMEOUT_S", 0.2)
    results = _get_while_blocked(server.url, ["/status", "/livez"])
    assert results["/status"][0] == 503
    assert results["/status"][1] < BLOCK_S
    assert results["/livez"][0] == 200


async def test_a_published_snapshot_is_what_the_probe_thread_serves() -> None:
    state = HealthState()
    http = ThreadedHttpServer(state, CollectorRegistry(), "127.0.0.1", 0)
    await http.start()
    try:
        async with httpx.AsyncClient(base_url=http.url, timeout=5.0) as client:
            assert (await client.get("/livez")).status_code == 200
            await state.publish(replace(initial_snapshot(), liveness=ProbeAnswer(False, "hung")))
            reply = await client.get("/livez")
        assert reply.status_code == 503
        assert reply.json()["reason"] == "hung"
    finally:
        await http.stop()


async def test_stop_ends_the_thread_and_frees_the_port() -> None:
    http = ThreadedHttpServer(HealthState(), CollectorRegistry(), "127.0.0.1", 0)
    await http.start()
    port = http.port
    assert any(t.name == THREAD_NAME for t in threading.enumerate())
    await http.stop()
    assert not any(t.name == THREAD_NAME for t in threading.enumerate())
    again = ThreadedHttpServer(HealthState(), CollectorRegistry(), "127.0.0.1", port)
    await again.start()
    await again.stop()


async def test_a_port_in_use_is_raised_by_start() -> None:
    first = ThreadedHttpServer(HealthState(), CollectorRegistry(), "127.0.0.1", 0)
    await first.start()
    try:
        second = ThreadedHttpServer(HealthState(), CollectorRegistry(), "127.0.0.1", first.port)
        with pytest.raises(OSError, match="in use"):
            await second.start()
        assert sum(t.name == THREAD_NAME for t in threading.enumerate()) == 1
    finally:
        await first.stop()
