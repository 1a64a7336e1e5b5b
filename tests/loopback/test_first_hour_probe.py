"""``sentinel probe`` as a first-time user runs it (issue 31, done-when 1, item 2).

A healthy OpenAI-compatible server that gives no log-probabilities is the
common case (a proxy, another engine): the correctness kind cannot run there,
which is a skip with its reason, not a failure, unless ``--strict``. The
server is the simulator behind a small proxy that drops the log-probability
fields of each request, as such servers ignore them; a hung simulator still
fails the probe.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import httpx
import pytest
from aiohttp import web

from sentinel_sim.launch import SimProcess

LOGPROB_FIELDS = ("logprobs", "top_logprobs", "prompt_logprobs")
HOP_HEADERS = frozenset({"content-length", "transfer-encoding", "connection", "content-encoding"})


def sentinel(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sentinel", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={k: v for k, v in os.environ.items() if not k.startswith("SENTINEL_")},
        check=False,
    )


class NoLogprobsProxy:
    """An aiohttp server on ``127.0.0.1:0``, in a thread of its own, in front of ``upstream``."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._main(),))

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._client is not None
        body = await request.read()
        if body and request.method == "POST":
            data = json.loads(body)
            for field in LOGPROB_FIELDS:
                data.pop(field, None)
            body = json.dumps(data).encode()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host",)}
        headers.pop("Content-Length", None)
        upstream = self._client.build_request(
            request.method, self.upstream + request.path_qs, content=body, headers=headers
        )
        reply = await self._client.send(upstream, stream=True)
        try:
            response = web.StreamResponse(
                status=reply.status_code,
                headers={k: v for k, v in reply.headers.items() if k.lower() not in HOP_HEADERS},
            )
            await response.prepare(request)
            async for chunk in reply.aiter_raw():
                await response.write(chunk)
            await response.write_eof()
            return response
        finally:
            await reply.aclose()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        self._client: httpx.AsyncClient | None = httpx.AsyncClient(timeout=None)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        runner = web.AppRunner(app, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]
        self._started.set()
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()
            await self._client.aclose()

    def __enter__(self) -> NoLogprobsProxy:
        self._thread.start()
        assert self._started.wait(timeout=10), "proxy did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        stop = self._stop
        assert stop is not None
        self._loop.call_soon_threadsafe(stop.set)
        self._thread.join(timeout=10)
        self._loop.close()


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess(scheduling_policy="priority") as process:
        yield process


@pytest.fixture(scope="module")
def no_logprobs(sim: SimProcess) -> Iterator[NoLogprobsProxy]:
    with NoLogprobsProxy(sim.base_url) as proxy:
        yield proxy


def test_healthy_server_without_logprobs_passes_with_correctness_skipped(
    no_logprobs: NoLogprobsProxy,
) -> None:
    done = sentinel("probe", "--output", "json", f"127.0.0.1:{no_logprobs.port}")
    assert done.returncode == 0, done.stdout + done.stderr
    (target,) = json.loads(done.stdout)["targets"]
    assert target["url"] == f"http://127.0.0.1:{no_logprobs.port}"
    outcomes = {r["kind"]: (r["outcome"], r["reason"]) for r in target["results"]}
    assert outcomes == {
        "text": ("ok", "ok"),
        "structured": ("ok", "ok"),
        "multimodal": ("ok", "ok"),
        "correctness": ("skipped", "unsupported"),
    }
    (correctness,) = (r for r in target["results"] if r["kind"] == "correctness")
    assert "log-probabilities" in correctness["detail"]
    assert "correctness: skipped unsupported" in done.stderr  # the progress line


def test_strict_fails_a_kind_the_server_cannot_do(no_logprobs: NoLogprobsProxy) -> None:
    done = sentinel("probe", "--strict", f"http://127.0.0.1:{no_logprobs.port}/v1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "unsupported" in done.stdout


def test_json_flag_is_still_an_alias(no_logprobs: NoLogprobsProxy) -> None:
    done = sentinel("probe", "--json", "--kind", "text", f"127.0.0.1:{no_logprobs.port}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["healthy"] is True
    assert "--json is deprecated; use --output json" in done.stderr


def test_hung_server_exits_1(sim: SimProcess) -> None:
    sim.control.set_fault("engine_hang")
    try:
        done = sentinel("probe", "--timeout", "2", "--output", "json", sim.base_url)
    finally:
        sim.control.clear_all()
    assert done.returncode == 1, done.stdout + done.stderr
    document = json.loads(done.stdout)
    assert document["healthy"] is False
    reasons = {r["kind"]: r["reason"] for r in document["targets"][0]["results"]}
    assert reasons["text"] == "timeout"


def test_help_lists_the_exit_codes() -> None:
    done = sentinel("probe", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "exit codes:" in text
    for code in ("0 every target healthy", "1 a target unhealthy", "2 bad arguments"):
        assert code in text
