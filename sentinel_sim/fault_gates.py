"""The API-side faults that act on connections rather than on generation.

Owns the aiohttp middleware of the OpenAI port for ``blackhole`` (accepted,
never read), ``reset_all`` (each generation request's connection torn down
before any response, with a TCP reset), ``metrics_lapse`` (``/metrics``
never answers while everything else is served) and ``metrics_401``
(``/metrics`` answers 401 with ``WWW-Authenticate``, as an authenticating
proxy in front of it would), ``cache_front`` (a caching proxy that answers a
body it has seen before from its store), and the ``listener_closed``
action: the listening socket and every open connection close for good, while
the process, its engine and the control port live on, so clients get
"connection refused" as from a server whose accept loop died.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import struct
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from sentinel_sim.faults import Fault
from sentinel_sim.server import SimServer

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_GENERATION_PREFIX = "/v1/"
_LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST


def _reset(request: web.Request) -> None:
    """Tear the connection down at once: RST, no status line, no headers."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    transport.abort()


def fault_middleware(server: SimServer) -> Middleware:
    @web.middleware
    async def gates(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not server.open_gate.is_set():
            # blackhole: the connection was accepted; nothing is read or answered.
            transport = request.transport
            if transport is not None:
                transport.pause_reading()
            try:
                await server.open_gate.wait()
            finally:
                if transport is not None and not transport.is_closing():
                    transport.resume_reading()
        generation = request.method == "POST" and request.path.startswith(_GENERATION_PREFIX)
        if generation and server.faults.get(Fault.RESET_ALL) is not None:
            _reset(request)
            return web.Response(status=500)  # never written: the transport is gone
        if generation and server.faults.get(Fault.CACHE_FRONT) is not None:
            return await _cached(request, handler)
        if request.path == "/metrics":
            if server.faults.get(Fault.METRICS_401) is not None:
                return web.Response(
                    status=401,
                    text="401: Unauthorized",
                    headers={"WWW-Authenticate": 'Basic realm="metrics"'},
                )
            await server.metrics_gate.wait()  # metrics_lapse: the scrape hangs
        return await handler(request)

    return gates


_CACHE: dict[str, tuple[int, bytes, str]] = {}
_CACHE_MAX = 256


async def _cached(request: web.Request, handler: Handler) -> web.StreamResponse:
    """``cache_front``: a caching proxy keyed on the request body answers repeats itself.

    A body seen before gets the stored reply, whatever the engine is doing;
    a new body goes through and, when it answers 200, is stored. Like a
    buffering proxy it asks the server for one JSON body even when the client
    asked for a stream (and answers the client so).
    """
    body = await request.read()
    key = hashlib.sha256(request.path.encode() + b"\0" + body).hexdigest()
    with contextlib.suppress(ValueError, AttributeError):
        parsed = json.loads(body)
        if isinstance(parsed, dict) and parsed.get("stream"):
            parsed["stream"] = False
            parsed.pop("stream_options", None)
            request._read_bytes = json.dumps(parsed).encode()  # what the handler reads
    hit = _CACHE.get(key)
    if hit is not None:
        status, payload, content_type = hit
        return web.Response(status=status, body=payload, content_type=content_type)
    response = await handler(request)
    if isinstance(response, web.Response) and response.status == 200 and response.body:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.pop(next(iter(_CACHE)))
        payload = bytes(response.body) if isinstance(response.body, bytes | bytearray) else b""
        _CACHE[key] = (200, payload, response.content_type)
    return response


async def close_listener(runner: web.AppRunner) -> None:
    """Stop accepting on every site of ``runner`` and drop its open connections."""
    for site in list(runner.sites):
        await site.stop()
    handler = runner.server
    if handler is not None:
        await handler.shutdown(timeout=0.5)
