"""The transport classification against real sockets on 127.0.0.1.

Each row is a small asyncio server that misbehaves in one way below HTTP; the
exception httpx raises talking to it must land in the right
:class:`TransportFailure`, and the canary runner must say the same. The table
in tests/unit/test_transport.py covers what a loopback socket cannot produce
(DNS, no route).
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx
import pytest

from chaos.ports import free_port
from sentinel.canary.catalog import load_catalog
from sentinel.canary.result import Reason
from sentinel.canary.runner import CanaryRunner
from sentinel.transport import TransportFailure, classify_transport

Behaviour = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> None:
    await reader.readuntil(b"\r\n\r\n")


async def close_without_response(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    await _read_request(reader)
    writer.close()


async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await _read_request(reader)
    # SO_LINGER with a zero timeout makes close() send RST instead of FIN.
    sock: socket.socket = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await _read_request(reader)
    writer.write(b"this is not HTTP\r\n\r\n")
    await writer.drain()
    writer.close()


async def cut_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await _read_request(reader)
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
    await writer.drain()
    writer.close()


async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read()  # holds the connection open until the client gives up


async def plain_http_to_tls(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read(1)  # the ClientHello; answer it as a plain HTTP server would
    writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
    await writer.drain()
    writer.close()


@asynccontextmanager
async def serving(behaviour: Behaviour) -> AsyncIterator[int]:
    handlers: set[asyncio.Task[None]] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            await behaviour(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await server.wait_closed()


async def failure_of(url: str) -> BaseException:
    async with httpx.AsyncClient(timeout=httpx.Timeout(0.5), verify=True) as client:
        with pytest.raises(httpx.TransportError) as caught:
            await client.get(url)  # reads the whole body, so a cut body raises here
    return caught.value


@pytest.mark.parametrize(
    ("behaviour", "scheme", "expected"),
    [
        pytest.param(close_without_response, "http", TransportFailure.RESET, id="closed"),
        pytest.param(reset, "http", TransportFailure.RESET, id="reset"),
        pytest.param(garbage, "http", TransportFailure.PROTOCOL, id="garbage"),
        pytest.param(cut_body, "http", TransportFailure.PROTOCOL, id="cut-body"),
        pytest.param(silent, "http", TransportFailure.TIMEOUT, id="silent"),
        pytest.param(plain_http_to_tls, "https", TransportFailure.TLS, id="tls"),
    ],
)
async def test_misbehaving_server(
    behaviour: Behaviour, scheme: str, expected: TransportFailure
) -> None:
    async with serving(behaviour) as port:
        exc = await failure_of(f"{scheme}://127.0.0.1:{port}/")
    assert classify_transport(exc) is expected, repr(exc)


async def test_refused_port() -> None:
    exc = await failure_of(f"http://127.0.0.1:{free_port()}/")
    assert classify_transport(exc) is TransportFailure.REFUSED, repr(exc)


@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [
        pytest.param(close_without_response, Reason.PROTOCOL, id="closed"),
        pytest.param(reset, Reason.PROTOCOL, id="reset"),
    ],
)
async def test_canary_on_a_broken_listener_is_not_connect(
    behaviour: Behaviour, reason: Reason
) -> None:
    """A listener that drops the request is a failed canary, not a vanished server."""
    async with serving(behaviour) as port, httpx.AsyncClient() as client:
        runner = CanaryRunner(client, f"http://127.0.0.1:{port}")
        result = await runner.run(load_catalog().get("text"), model="m", deadline=5)
    assert result.reason is reason, result.detail
    assert result.detail.startswith("reset before a response"), result.detail
