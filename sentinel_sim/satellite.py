"""``python -m sentinel_sim.satellite``: one more API-server process on the shared socket.

vLLM's ``--api-server-count N`` binds one listening socket and hands it to N
API-server processes (``VLLM::APIServer_<i>``), so they share one accept queue:
whichever process calls ``accept`` first takes a new connection, and a process
whose event loop is stuck takes none, while every connection it already holds
(a router's pooled keep-alive connections) and every request it had read hang.

The simulator's API process is server 0 and owns the engine link; each
satellite is server ``i`` (1..N-1): it serves the inherited socket with its own
aiohttp loop and relays every request to server 0's private loopback port,
streaming the answer back (``/metrics`` too, so every process shows the
whole server's metrics, as vLLM's multiprocess Prometheus mode does). Each
answer carries ``x-sim-api-server: <i>`` so a test can tell which process
holds a connection.

The wedge (the ``api_wedge`` fault) arrives as one JSON line on stdin,
``{"wedge": seconds, "spin": bool}``: the loop then blocks in a synchronous
call (``time.sleep``, or a busy loop with ``spin``) for that long, reading and
answering nothing. A wedge cannot be cleared early: nothing reaches a stuck
loop. SIGTERM keeps its default action, so a wedged satellite still stops.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import signal
import socket
import sys
import time
from collections.abc import Sequence

import aiohttp
import setproctitle
from aiohttp import web

SERVER_HEADER = "x-sim-api-server"
TITLE = "VLLM::APIServer"
# Headers a relay must not copy: hop-by-hop, or recomputed by aiohttp.
_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade"}
)
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """SIGKILL this process when server 0 dies, so no satellite outlives its server."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def wedge(seconds: float, spin: bool) -> None:
    """Block the calling (event-loop) thread for ``seconds``, idle or burning CPU."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        if not spin:
            time.sleep(min(left, 1.0))


def build_app(index: int, upstream: str) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    session: dict[str, aiohttp.ClientSession] = {}

    async def start(_: web.Application) -> None:
        session["s"] = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None), auto_decompress=False
        )

    async def stop(_: web.Application) -> None:
        await session["s"].close()

    async def relay(request: web.Request) -> web.StreamResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        body = await request.read()
        async with session["s"].request(
            request.method, upstream + request.path_qs, headers=headers, data=body
        ) as answer:
            response = web.StreamResponse(status=answer.status, reason=answer.reason)
            for key, value in answer.headers.items():
                if key.lower() not in _HOP and key.lower() != SERVER_HEADER:
                    response.headers.add(key, value)
            response.headers[SERVER_HEADER] = str(index)
            await response.prepare(request)
            async for chunk in answer.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_route("*", "/{tail:.*}", relay)
    return app


async def _commands(stdin: asyncio.StreamReader) -> None:
    """Obey wedge commands from server 0 until it closes the pipe."""
    while line := await stdin.readline():
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            command = json.loads(line)
            wedge(float(command["wedge"]), bool(command.get("spin", False)))


async def serve(fd: int, index: int, upstream: str) -> None:
    sock = socket.socket(fileno=fd)
    runner = web.AppRunner(build_app(index, upstream), access_log=None, handler_cancellation=True)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    print(json.dumps({"event": "ready", "index": index}), flush=True)
    try:
        await _commands(stdin)  # server 0 closing the pipe is the signal to stop
    finally:
        await runner.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sentinel_sim.satellite")
    parser.add_argument("--fd", type=int, required=True, help="the inherited listening socket")
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="server 0's private base URL")
    args = parser.parse_args(argv)
    _die_with_parent()
    setproctitle.setproctitle(f"{TITLE}_{args.index}")
    asyncio.run(serve(args.fd, args.index, args.upstream))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
