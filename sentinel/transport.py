"""The one classification of transport failures, for canaries and evidence alike.

Every HTTP exchange sentinel makes with the inference server (canaries, the
``/metrics`` scrape, the ``/health`` poll, model resolution) can fail below
HTTP, and what the failure *was* decides what it means: only a refusal (or an
unreachable address) says nothing listens, which is what starts the
*listener down* timer; a connection reset or closed before any response is a
broken server that still listens, never a restart; a timeout is a server that
is alive but slow or stuck. Two callers classifying the same socket error
differently is how a reset once started a new server epoch, so httpx, httpcore
and ``OSError`` exceptions are mapped here and nowhere else, into the closed
:class:`TransportFailure` enum. Callers translate that enum into their own
vocabulary (the canary :class:`~sentinel.canary.result.Reason`, the evidence
:class:`~sentinel.evidence.failure.EvidenceFailure`), never the exceptions.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import ssl
import zlib
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum

import httpx

__all__ = [
    "BodyDecodingError",
    "BodyTooLarge",
    "SmallAnswer",
    "TransportFailure",
    "classify_transport",
    "iter_capped",
    "read_capped",
    "small_exchange",
]


class TransportFailure(StrEnum):
    """Why an exchange produced no (complete) HTTP response."""

    REFUSED = "refused"  # the connection was refused: nothing listens on the port
    UNREACHABLE = "unreachable"  # name resolution or routing failed before any connection
    TIMEOUT = "timeout"  # connected (or tried to) but nothing arrived in time
    RESET = "reset"  # accepted, then reset or closed before a response
    TLS = "tls"  # the TLS handshake or certificate check failed
    PROTOCOL = "protocol"  # malformed HTTP, a body cut short, any other transport error
    OVERSIZED = "oversized"  # the body ran past its byte cap and was abandoned
    DECODING = "decoding"  # the body does not decode as its Content-Encoding says


class BodyTooLarge(Exception):
    """A body that ran past its byte cap; the rest was never read."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"body larger than {limit} bytes, abandoned")
        self.limit = limit


class BodyDecodingError(Exception):
    """A body whose Content-Encoding is unknown or whose bytes do not decode as it says."""


# errno values that mean "no route to anything", as distinct from a refusal by
# a host that is there.
_UNREACHABLE_ERRNOS = frozenset(
    {errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN, errno.EHOSTDOWN, errno.EADDRNOTAVAIL}
)
_RESET_ERRNOS = frozenset({errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED, errno.ESHUTDOWN})


def classify_transport(exc: BaseException) -> TransportFailure | None:
    """The transport failure ``exc`` stands for, or None when it is not one.

    httpx wraps httpcore's errors, which wrap the ``OSError`` or ``ssl`` error
    the socket raised, so the whole cause chain is read: an
    ``httpx.ConnectError`` may carry a refusal, an unreachable address, a TLS
    failure or a reset during the handshake, and only the innermost error
    says which. A ``RemoteProtocolError`` that h11 did not raise is httpcore
    noticing the peer closed before sending a response: a reset, not a
    malformed answer.
    """
    chain = list(_causes(exc))
    if any(isinstance(e, BodyTooLarge) for e in chain):
        return TransportFailure.OVERSIZED
    if any(isinstance(e, BodyDecodingError | httpx.DecodingError) for e in chain):
        return TransportFailure.DECODING
    # Timeouts first: TimeoutError is an OSError, and an httpx ConnectTimeout is
    # a slow accept queue, not a refusal.
    if any(isinstance(e, TimeoutError | httpx.TimeoutException) for e in chain):
        return TransportFailure.TIMEOUT
    if any(isinstance(e, ssl.SSLError | ssl.CertificateError) for e in chain):
        return TransportFailure.TLS
    for error in reversed(chain):  # innermost first: the socket's own word
        named = _from_os_error(error)
        if named is not None:
            return named
    if isinstance(exc, httpx.RemoteProtocolError):
        if any(type(e).__module__.split(".")[0] in {"h11", "h2"} for e in chain[1:]):
            return TransportFailure.PROTOCOL  # the parser rejected the bytes
        return TransportFailure.RESET  # closed without sending a response
    if isinstance(exc, httpx.ConnectError):
        return TransportFailure.UNREACHABLE  # could not connect, for a reason not named
    if isinstance(exc, httpx.NetworkError):
        return TransportFailure.RESET  # read, write or close failed on a live connection
    if isinstance(exc, httpx.TransportError | OSError):
        return TransportFailure.PROTOCOL
    return None


def _from_os_error(error: BaseException) -> TransportFailure | None:
    if isinstance(error, ConnectionRefusedError):
        return TransportFailure.REFUSED
    if isinstance(error, ConnectionResetError | BrokenPipeError | ConnectionAbortedError):
        return TransportFailure.RESET
    if isinstance(error, socket.gaierror):
        return TransportFailure.UNREACHABLE
    if isinstance(error, OSError) and error.errno is not None:
        if error.errno == errno.ECONNREFUSED:
            return TransportFailure.REFUSED
        if error.errno in _UNREACHABLE_ERRNOS:
            return TransportFailure.UNREACHABLE
        if error.errno in _RESET_ERRNOS:
            return TransportFailure.RESET
    return None


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it was raised from or during, outermost first, each once.

    The context is read even when suppressed: httpx and httpcore re-raise
    ``from None``, which hides the socket's own error from tracebacks but not
    from ``__context__``, and that error is the only one that names the failure.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


# Read size per socket read, and the most one decompression step may produce:
# a gzip bomb is inflated a slice at a time, so the cap is hit before memory is.
_CHUNK = 64 * 1024


async def iter_capped(response: httpx.Response, limit: int) -> AsyncIterator[bytes]:
    """The decoded body of ``response``, raising :class:`BodyTooLarge` past ``limit`` bytes.

    httpx's own decoders inflate each raw chunk whole, so a small compressed
    chunk can become tens of megabytes at once; here the raw bytes are read
    and inflated at most one slice at a time, and the cap counts decoded
    bytes. Encodings other than identity, gzip and deflate are refused
    (:class:`BodyDecodingError`): sentinel never asks for them.
    """
    if response.is_stream_consumed:
        # Built in memory (a mock, a test) and already decoded by httpx:
        # there is nothing left to bound but the size.
        if len(response.content) > limit:
            raise BodyTooLarge(limit)
        if response.content:
            yield response.content
        return
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    inflater: zlib._Decompress | None
    if encoding in ("", "identity"):
        inflater = None
    elif encoding in ("gzip", "x-gzip", "deflate"):
        # 32 + MAX_WBITS: a gzip or zlib header, detected from the bytes.
        inflater = zlib.decompressobj(32 + zlib.MAX_WBITS)
    else:
        raise BodyDecodingError(f"unsupported Content-Encoding {encoding!r}")
    size = 0
    async for raw in response.aiter_raw():  # as the bytes arrive: never wait to fill a chunk
        if inflater is None:
            pieces: Iterator[bytes] = iter((raw,))
        else:
            pieces = _inflate(inflater, raw, encoding)
        for piece in pieces:
            size += len(piece)
            if size > limit:
                raise BodyTooLarge(limit)
            if piece:
                yield piece
    if inflater is not None and not inflater.eof:
        raise BodyDecodingError(f"{encoding} body ends mid-stream")


def _inflate(inflater: zlib._Decompress, raw: bytes, encoding: str) -> Iterator[bytes]:
    data = raw
    while data:
        try:
            piece = inflater.decompress(data, _CHUNK)
        except zlib.error as exc:
            raise BodyDecodingError(f"body labelled {encoding} does not decode: {exc}") from None
        yield piece
        data = inflater.unconsumed_tail
        if inflater.eof:
            return


async def read_capped(response: httpx.Response, limit: int) -> bytes:
    """The whole decoded body of ``response``; :class:`BodyTooLarge` past ``limit`` bytes."""
    return b"".join([chunk async for chunk in iter_capped(response, limit)])


@dataclass(frozen=True, slots=True)
class SmallAnswer:
    """One small exchange with the server: its status and body, or what went wrong."""

    status: int | None = None
    body: bytes = b""
    problem: str = ""  # "" when an answer came whole; else "GET /path: what happened"


async def small_exchange(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    what: str,
    limit: int,
    deadline: float,
    headers: Mapping[str, str] | None = None,
    body_only_on_ok: bool = False,
) -> SmallAnswer:
    """A lifecycle or status endpoint asked once, under a total deadline and a byte cap.

    Never raises for a failed exchange: a timeout, a transport error, a body
    past ``limit`` or one that does not decode becomes :attr:`SmallAnswer.problem`,
    prefixed with ``what`` (``"GET /is_paused"``); ``deadline`` bounds it all.
    ``body_only_on_ok``: a non-200 answer's body is not read (its status is all
    the caller uses).
    """
    try:
        async with asyncio.timeout(deadline):
            async with client.stream(
                method, url, headers=headers, timeout=deadline, follow_redirects=False
            ) as response:
                status = response.status_code
                if body_only_on_ok and status != 200:
                    return SmallAnswer(status)
                return SmallAnswer(status, await read_capped(response, limit))
    except (TimeoutError, httpx.TimeoutException):
        return SmallAnswer(problem=f"{what}: no answer within {deadline:g} s")
    except (httpx.HTTPError, BodyTooLarge, BodyDecodingError) as exc:
        return SmallAnswer(problem=f"{what}: {type(exc).__name__}")
