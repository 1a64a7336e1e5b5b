"""Hangs a passing canary cannot see, on a real vLLM 0.32 with two API-server processes.

vLLM's own ``vllm serve`` path (``chaos/vllm_engine/serve_cli.py``: the CPU
build's ``vllm`` command cannot start) with ``--api-server-count 2``: one
listening socket, ``VLLM::APIServer_0`` and ``_1`` sharing it, vLLM's
least-loaded accept. The tiny text model, one server for the class.

- One API-server process stopped (SIGSTOP): its peer answers ``/health``,
  every fresh connection and the shared metrics; sentinel names the stopped
  process (kind ``api_server``).
- One API-server process wedged (the chaos plugin's ``api_wedge``: its event
  loop blocks in a signal handler) while a router's pooled connections to it
  wait: sentinel names the process holding the unread connections.
- Real traffic starved behind passing priority canaries (the plugin's
  ``starve``: the scheduler admits only negative priorities): ``starved``.

A server start takes 70-90 s on two cores, so this is ``slow`` as well as
``engine``: ``make engine`` runs it, ``make test`` does not. Each test prints
its detection time (run with ``-s``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from chaos.vllm_engine import env as engine_env
from chaos.vllm_engine.server import API_TITLE, VllmServer, engine_cpus
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(900)]

API_WINDOW = 20.0
TIMINGS: dict[str, Any] = {
    "hang_window": 10.0,
    "no_evidence_window": 15.0,
    "dead_grace": 2.0,
    "api_window": API_WINDOW,
    "canaries": {
        "text": {"interval": 2.0, "deadline": 8.0, "jitter": 0.0},
        "structured": {"interval": 5.0, "deadline": 10.0},
        "multimodal": {"enabled": False},  # the tiny text model takes no images
    },
}
NAMED_WITHIN = 90.0  # the bar for a wedged API server
STARVED_WITHIN = 60.0
GREEN = 120.0
MODEL = "tiny-text"


@pytest.fixture(scope="class")
def two_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    env = engine_env.ensure_env()
    model = engine_env.ensure_model(env, "text")
    cpus = ",".join(str(c) for c in sorted(engine_cpus() or os.sched_getaffinity(0)))
    tmp = tmp_path_factory.mktemp("vllm-api2")
    with VllmServer(
        env.python,
        model,
        served_model_name=MODEL,
        fault_dir=tmp / "faults",
        log_path=tmp / "vllm.log",
        api_server_count=2,
        environment={"VLLM_CPU_OMP_THREADS_BIND": cpus},
    ) as server:
        print(f"\ntwo API servers: first answer after {server.wait_ready(300):.1f} s")
        yield server


def _api_process(server: VllmServer, index: int) -> psutil.Process:
    (process,) = server.processes(f"{API_TITLE}_{index}")
    return process


async def _hang(sidecar: Sidecar, kind: str, within: float, what: str) -> tuple[float, str]:
    async def reported() -> bool:
        status = await sidecar.json("/status")
        return any(h["kind"] == kind for h in status["verdict"]["hangs"])

    seconds = await eventually(reported, within, f"a {kind} hang after {what}", 0.25)
    status = await sidecar.json("/status")
    reason = next(str(h["reason"]) for h in status["verdict"]["hangs"] if h["kind"] == kind)
    print(f"\n{what}: {kind} reported after {seconds:.1f} s: {reason}")
    return seconds, reason


def _local_port(response: httpx.Response) -> int:
    stream = response.extensions["network_stream"]
    sock = stream.get_extra_info("socket")
    return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def _pooled_on(
    server: VllmServer, holder: psutil.Process, count: int
) -> AsyncIterator[list[httpx.AsyncClient]]:
    """``count`` one-connection clients whose pooled connection ``holder`` accepted."""
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 2}
    clients: list[httpx.AsyncClient] = []
    try:
        for _ in range(60):
            if len(clients) == count:
                break
            client = httpx.AsyncClient(
                base_url=server.base_url, limits=httpx.Limits(max_connections=1), timeout=30
            )
            port = _local_port(await client.post("/v1/completions", json=body))
            peers = {c.raddr.port for c in holder.net_connections("tcp") if c.raddr}
            if port in peers:
                clients.append(client)
            else:
                await client.aclose()
        assert len(clients) == count, f"only {len(clients)} connections landed on {holder.pid}"
        yield clients
    finally:
        for client in clients:
            await client.aclose()


class TestTwoApiServers:
    async def test_a_stopped_api_server_is_named(self, two_api: VllmServer) -> None:
        stopped = _api_process(two_api, 1)
        async with running_sidecar(two_api.base_url, **TIMINGS) as sidecar:
            await eventually(sidecar.green, GREEN, "startup, readiness and liveness 200")
            os.kill(stopped.pid, signal.SIGSTOP)
            try:
                seconds, reason = await _hang(sidecar, "api_server", NAMED_WITHIN, "SIGSTOP")
                assert f"(pid {stopped.pid}) stopped" in reason
                assert f"{API_TITLE}_1" in reason
                async with httpx.AsyncClient(timeout=5) as fresh:  # its peer answers
                    assert (await fresh.get(two_api.base_url + "/health")).status_code == 200
            finally:
                os.kill(stopped.pid, signal.SIGCONT)
            assert seconds >= API_WINDOW * 0.9
            await eventually(sidecar.green, GREEN, "green again after SIGCONT")

    async def test_a_wedged_api_server_holding_pooled_connections_is_named(
        self, two_api: VllmServer
    ) -> None:
        wedged = _api_process(two_api, 1)
        body = {"model": MODEL, "prompt": "hello", "max_tokens": 4}
        async with (
            running_sidecar(two_api.base_url, **TIMINGS) as sidecar,
            _pooled_on(two_api, wedged, 3) as pooled,
        ):
            await eventually(sidecar.green, GREEN, "startup, readiness and liveness 200")
            two_api.faults.set("api_wedge", server=1)
            started = time.monotonic()
            probe, *held = pooled

            async def wedged_now() -> bool:  # the plugin polls its fault files
                try:
                    await probe.post("/v1/completions", json=body, timeout=1.0)
                except httpx.TimeoutException:
                    return True
                return False

            await eventually(wedged_now, 15.0, "the wedge in effect")
            waiting = [
                asyncio.create_task(c.post("/v1/completions", json=body, timeout=None))
                for c in held
            ]
            try:
                _, reason = await _hang(sidecar, "api_server", NAMED_WITHIN, "api_wedge")
                assert f"API-server process {wedged.pid}" in reason
                assert not any(task.done() for task in waiting)
                assert wedged.status() != psutil.STATUS_STOPPED  # alive and sleeping
                assert time.monotonic() - started >= API_WINDOW * 0.9
            finally:
                two_api.faults.clear("api_wedge")
                for task in waiting:
                    task.cancel()
                await asyncio.gather(*waiting, return_exceptions=True)
            await eventually(sidecar.green, GREEN, "green again after the wedge ends")

    async def test_real_traffic_starved_behind_passing_priority_canaries(
        self, two_api: VllmServer
    ) -> None:
        body = {"model": MODEL, "prompt": "tell me a story", "max_tokens": 32}
        stop = asyncio.Event()

        async def user(client: httpx.AsyncClient) -> None:
            while not stop.is_set():
                with contextlib.suppress(httpx.HTTPError):
                    await client.post("/v1/completions", json=body, timeout=None)

        async with (
            running_sidecar(two_api.base_url, **TIMINGS) as sidecar,
            httpx.AsyncClient(base_url=two_api.base_url) as client,
        ):
            await eventually(sidecar.green, GREEN, "startup, readiness and liveness 200")
            users = [asyncio.create_task(user(client)) for _ in range(6)]
            try:
                two_api.faults.set("starve", below=0)
                _, reason = await _hang(sidecar, "starved", STARVED_WITHIN, "starve")
                assert "wait" in reason
            finally:
                two_api.faults.clear("starve")
                stop.set()
                for task in users:
                    task.cancel()
                await asyncio.gather(*users, return_exceptions=True)
            await eventually(sidecar.green, GREEN, "green again after the starvation ends")

    async def test_a_working_pair_under_load_with_pooled_and_dropped_connections_stays_green(
        self, two_api: VllmServer
    ) -> None:
        """The same clothes, working: both processes busy, pooled keep-alive connections on
        each, and clients that give up mid-stream (the server sees a FIN it must read)."""
        body = {"model": MODEL, "prompt": "tell me a story", "max_tokens": 48, "stream": True}
        stop = asyncio.Event()

        async def pooled_user(client: httpx.AsyncClient) -> None:
            while not stop.is_set():
                with contextlib.suppress(httpx.HTTPError):
                    await client.post("/v1/completions", json={**body, "stream": False})

        async def impatient_user() -> None:
            while not stop.is_set():
                async with httpx.AsyncClient(base_url=two_api.base_url, timeout=30) as client:
                    with contextlib.suppress(httpx.HTTPError):
                        async with client.stream("POST", "/v1/completions", json=body) as reply:
                            async for _ in reply.aiter_bytes():
                                break  # the first chunk, then hang up mid-stream

        async with (
            running_sidecar(two_api.base_url, **TIMINGS) as sidecar,
            _pooled_on(two_api, _api_process(two_api, 0), 2) as on_0,
            _pooled_on(two_api, _api_process(two_api, 1), 2) as on_1,
        ):
            await eventually(sidecar.green, GREEN, "startup, readiness and liveness 200")
            users = [asyncio.create_task(pooled_user(c)) for c in (*on_0, *on_1)]
            users += [asyncio.create_task(impatient_user()) for _ in range(2)]
            failures, samples, end = 0, 0, time.monotonic() + API_WINDOW * 3
            try:
                while time.monotonic() < end:
                    samples += 1
                    if await sidecar.code("/livez") != 200:
                        failures += 1
                    await asyncio.sleep(0.5)  # the polling interval, not a wait for a state
            finally:
                stop.set()
                await asyncio.gather(*users, return_exceptions=True)
            status = await sidecar.json("/status")
            print(f"\nworking pair under load: {failures} liveness failures in {samples} samples")
            assert failures == 0
            assert [h for h in status["verdict"]["hangs"] if h["kind"] == "api_server"] == []

    async def test_a_client_pipelining_behind_a_long_stream_is_no_wedge(
        self, two_api: VllmServer
    ) -> None:
        """uvicorn stops reading a connection whose client pipelines requests behind one still
        streaming, so its bytes sit unread on a working process as on a wedged one."""
        body = json.dumps(
            {"model": MODEL, "prompt": "hi", "max_tokens": 200, "min_tokens": 200, "stream": True}
        ).encode()
        request = (
            b"POST /v1/completions HTTP/1.1\r\nHost: vllm\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        async with running_sidecar(two_api.base_url, **TIMINGS) as sidecar:
            await eventually(sidecar.green, GREEN, "startup, readiness and liveness 200")
            two_api.faults.set("slow_decode", step_seconds=0.25)  # a 50 s stream
            reader, writer = await asyncio.open_connection("127.0.0.1", two_api.port)
            try:
                for _ in range(3):  # the third arrives after reading paused: unread
                    writer.write(request)
                    await writer.drain()
                    await asyncio.sleep(1.0)  # requests apart, as a pipelining client sends them
                failures, kinds, end = 0, set(), time.monotonic() + API_WINDOW * 2
                while time.monotonic() < end:
                    if await sidecar.code("/livez") != 200:
                        failures += 1
                    status = await sidecar.json("/status")
                    kinds |= {h["kind"] for h in status["verdict"]["hangs"]}
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(0.5):  # keep reading the stream
                            await reader.read(65536)
                print(f"\npipelining client: {failures} liveness failures, hang kinds {kinds}")
                assert "api_server" not in kinds
                assert failures == 0
            finally:
                two_api.faults.clear("slow_decode")
                writer.close()


def test_the_launcher_is_vllm_serve(tmp_path: Path) -> None:
    """The launcher runs vLLM's own parser: a bad flag is vLLM's usage error."""
    import subprocess

    env = engine_env.ensure_env()
    script = Path(__file__).resolve().parents[2] / "chaos" / "vllm_engine" / "serve_cli.py"
    done = subprocess.run(
        [str(env.python), str(script), "--no-such-flag"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "vllm serve" in done.stderr
