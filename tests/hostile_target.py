"""A hostile (or merely huge) inference target: what sentinel must survive.

Not the simulator: a small aiohttp server whose ``/metrics`` and ``/health``
misbehave in one chosen way each, while ``/v1/models``,
``/v1/chat/completions`` and ``/v1/completions`` answer small valid canary
replies, so canaries pass and any red sentinel shows is the evidence's fault.
``POST /hostile/hang`` makes every canary from then on wait forever (an engine
hang behind a live HTTP front), which is how a bundle capture is provoked.

Run as a process so its own work (20 MB/s of output) does not share sentinel's
event loop: ``python -m tests.hostile_target --metrics endless --health ok``
prints ``PORT <n>`` once listening. :class:`HostileProcess` does that and
stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from aiohttp import web

MODEL = "hostile-model"
MIB = 1024 * 1024
HANG_PATH = "/hostile/hang"  # POST: canaries hang from then on
HANG_KEY = web.AppKey("hang", asyncio.Event)

# What /metrics can be made to do; each is one case of the hostile suite.
METRICS_MODES = (
    "ok",
    "endless",  # 20 MB/s, never ends
    "huge",  # a 500 MB exposition, as fast as the socket takes it
    "series",  # 2 million vLLM series (about 110 MB)
    "longline",  # one 50 MB line
    "trickle",  # 1 byte per second
    "badgzip",  # Content-Encoding: gzip on a plain body
    "badutf8",  # invalid UTF-8 inside a vLLM sample line
    "large",  # a valid 60 MB exposition: vLLM's series, then other series
)
HEALTH_MODES = ("ok", "endless", "huge", "trickle", "404", "302", "401")

_OK_METRICS = (
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{engine="0",model_name="hostile-model"} 0.0\n'
    "# TYPE vllm:generation_tokens_total counter\n"
    'vllm:generation_tokens_total{engine="0",model_name="hostile-model"} 10.0\n'
)
_FILLER = b'python_gc_objects_collected_total{generation="0"} 12345.0\n' * 1024


async def _send_forever(response: web.StreamResponse, rate: float, total: float) -> None:
    """Filler lines at ``rate`` bytes/s (0: as fast as possible) until ``total`` bytes."""
    sent = 0
    started = time.monotonic()
    while sent < total:
        await response.write(_FILLER)
        sent += len(_FILLER)
        if rate:
            ahead = started + sent / rate - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)


async def _series(response: web.StreamResponse, count: int) -> None:
    batch = 10_000
    for first in range(0, count, batch):
        lines = "".join(
            f'vllm:generation_tokens_total{{engine="0",model_name="m",req="{i}"}} 1.0\n'
            for i in range(first, min(first + batch, count))
        )
        await response.write(lines.encode())


async def _long_line(response: web.StreamResponse, size: int) -> None:
    piece = b"x" * MIB
    await response.write(b'vllm:generation_tokens_total{engine="0",model_name="')
    for _ in range(size // MIB):
        await response.write(piece)
    await response.write(b'"} 1.0\n')


async def _trickle(response: web.StreamResponse, data: bytes) -> None:
    for byte in data:
        await response.write(bytes([byte]))
        await asyncio.sleep(1.0)


async def metrics(request: web.Request) -> web.StreamResponse:
    mode: str = request.app["metrics"]
    if mode == "ok":
        return web.Response(text=_OK_METRICS, content_type="text/plain")
    if mode == "badgzip":
        return web.Response(
            body=_OK_METRICS.encode(),
            headers={"Content-Type": "text/plain", "Content-Encoding": "gzip"},
        )
    if mode == "badutf8":
        body = _OK_METRICS.encode() + b'vllm:num_requests_waiting{model_name="\xff\xfe"} 1.0\n'
        return web.Response(body=body, content_type="text/plain")
    response = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await response.prepare(request)
    with contextlib.suppress(ConnectionError):  # sentinel gave up on the answer, as it should
        await _misbehave(response, mode)
    return response


async def _misbehave(response: web.StreamResponse, mode: str) -> None:
    if mode == "endless":
        await _send_forever(response, 20 * MIB, float("inf"))
    elif mode == "huge":
        await _send_forever(response, 0, 500 * MIB)
    elif mode == "series":
        await _series(response, 2_000_000)
    elif mode == "longline":
        await _long_line(response, 50 * MIB)
    elif mode == "trickle":
        await _trickle(response, _OK_METRICS.encode())
    elif mode == "large":
        await response.write(_OK_METRICS.encode())
        await _send_forever(response, 0, 60 * MIB)
    await response.write_eof()


async def health(request: web.Request) -> web.StreamResponse:
    mode: str = request.app["health"]
    if mode == "ok":
        return web.Response(status=200)
    if mode in ("404", "401"):
        return web.Response(status=int(mode), text="no such thing")
    if mode == "302":
        raise web.HTTPFound("/elsewhere")
    if mode == "trickle":
        # The status line itself, a byte a second, straight onto the socket.
        transport = request.transport
        assert transport is not None
        for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n":
            if transport.is_closing():
                break
            transport.write(bytes([byte]))
            await asyncio.sleep(1.0)
        transport.close()
        return web.Response()  # never sent: the connection is closed
    response = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await response.prepare(request)
    with contextlib.suppress(ConnectionError):  # sentinel gave up on the answer, as it should
        await _misbehave(response, mode)
    return response


async def models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})


async def hang(request: web.Request) -> web.Response:
    """From now on every canary waits forever: the engine hung, the HTTP front did not."""
    request.app[HANG_KEY].set()
    return web.Response(text="hung\n")


async def completions(request: web.Request) -> web.StreamResponse:
    if request.app[HANG_KEY].is_set():
        await asyncio.Event().wait()  # until the client gives up and the server cancels us
    body: dict[str, Any] = await request.json()
    chat = request.path.endswith("/chat/completions")
    usage = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
    if not body.get("stream"):
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
        if chat:
            choice["message"] = {"role": "assistant", "content": "ok"}
        else:
            choice["text"] = "ok"
        return web.json_response(
            {"id": "x", "object": "completion", "model": MODEL, "choices": [choice], "usage": usage}
        )
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    delta: dict[str, Any] = {"index": 0, "finish_reason": "length"}
    if chat:
        delta["delta"] = {"content": "ok"}
    else:
        delta["text"] = "ok"
    for chunk in ({"choices": [delta]}, {"choices": [], "usage": usage}):
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


def build_app(metrics_mode: str, health_mode: str) -> web.Application:
    app = web.Application()
    app["metrics"] = metrics_mode
    app["health"] = health_mode
    app[HANG_KEY] = asyncio.Event()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post(HANG_PATH, hang)
    return app


async def _serve(metrics_mode: str, health_mode: str, port: int) -> None:
    runner = web.AppRunner(build_app(metrics_mode, health_mode), handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    server = site._server
    assert server is not None
    bound = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
    print(f"PORT {bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


class HostileProcess:
    """The hostile target as a subprocess on a free port; stopped on exit."""

    def __init__(self, metrics: str = "ok", health: str = "ok") -> None:
        self.metrics = metrics
        self.health = health
        self.process: subprocess.Popen[str] | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> HostileProcess:
        root = Path(__file__).resolve().parent.parent
        self.process = subprocess.Popen(
            [
                *(sys.executable, "-m", "tests.hostile_target"),
                *("--metrics", self.metrics, "--health", self.health),
            ],
            cwd=root,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        match = re.match(r"PORT (\d+)", line)
        if match is None:
            self.__exit__(None, None, None)
            raise RuntimeError(f"hostile target did not start: {line!r}")
        self.port = int(match.group(1))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--metrics", choices=METRICS_MODES, default="ok")
    parser.add_argument("--health", choices=HEALTH_MODES, default="ok")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    asyncio.run(_serve(args.metrics, args.health, args.port))


if __name__ == "__main__":
    main()
