"""The transport classification, table-driven over exception chains as httpx raises them.

httpx raises its own exception ``from`` httpcore's, which is raised ``from`` the
socket's ``OSError`` or ``ssl`` error; the chains here are built the same way,
so the table checks that the innermost error decides. Real sockets produce the
same chains in tests/loopback/test_transport.py.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import ssl

import h11
import httpcore
import httpx
import pytest

from sentinel.boot import settle_async_library_detection
from sentinel.canary.replies import classify
from sentinel.canary.result import Reason
from sentinel.evidence.failure import EvidenceFailure, classify_transport_error
from sentinel.transport import TransportFailure, classify_transport

F = TransportFailure


def chained(outer: BaseException, *inner: BaseException) -> BaseException:
    """``outer`` raised from ``inner[0]``, raised from ``inner[1]``, and so on."""
    current = outer
    for cause in inner:
        current.__cause__ = cause
        current = cause
    return outer


CASES: list[tuple[str, BaseException, TransportFailure | None]] = [
    (
        "refused",
        chained(
            httpx.ConnectError("All connection attempts failed"),
            httpcore.ConnectError("All connection attempts failed"),
            ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
        ),
        F.REFUSED,
    ),
    (
        "refused by errno only",
        chained(httpx.ConnectError("x"), OSError(errno.ECONNREFUSED, "Connection refused")),
        F.REFUSED,
    ),
    (
        "dns failure",
        chained(httpx.ConnectError("x"), socket.gaierror(socket.EAI_NONAME, "Name unknown")),
        F.UNREACHABLE,
    ),
    (
        "no route",
        chained(httpx.ConnectError("x"), OSError(errno.EHOSTUNREACH, "No route to host")),
        F.UNREACHABLE,
    ),
    ("connect error without a cause", httpx.ConnectError("cannot connect"), F.UNREACHABLE),
    (
        "reset during the handshake",
        chained(httpx.ConnectError("x"), ConnectionResetError(errno.ECONNRESET, "reset")),
        F.RESET,
    ),
    (
        "tls certificate",
        chained(
            httpx.ConnectError("x"),
            httpcore.ConnectError("x"),
            ssl.SSLCertVerificationError(1, "certificate verify failed"),
        ),
        F.TLS,
    ),
    ("tls wrong version", chained(httpx.ConnectError("x"), ssl.SSLError(1, "WRONG")), F.TLS),
    ("connect timeout", httpx.ConnectTimeout("slow accept"), F.TIMEOUT),
    ("read timeout", httpx.ReadTimeout("no answer"), F.TIMEOUT),
    ("pool timeout", httpx.PoolTimeout("no connection free"), F.TIMEOUT),
    ("deadline", TimeoutError(), F.TIMEOUT),
    (
        "reset while reading",
        chained(httpx.ReadError("x"), httpcore.ReadError("x"), ConnectionResetError()),
        F.RESET,
    ),
    ("broken pipe while writing", chained(httpx.WriteError("x"), BrokenPipeError()), F.RESET),
    ("read error without a cause", httpx.ReadError("x"), F.RESET),
    (
        "closed without a response",
        chained(
            httpx.RemoteProtocolError("Server disconnected without sending a response."),
            httpcore.RemoteProtocolError("Server disconnected without sending a response."),
        ),
        F.RESET,
    ),
    (
        "malformed status line",
        chained(
            httpx.RemoteProtocolError("illegal status line"),
            httpcore.RemoteProtocolError("illegal status line"),
            h11.RemoteProtocolError("illegal status line"),
        ),
        F.PROTOCOL,
    ),
    ("unsupported scheme", httpx.UnsupportedProtocol("ftp"), F.PROTOCOL),
    ("bare reset", ConnectionResetError(), F.RESET),
    ("bare refusal", ConnectionRefusedError(), F.REFUSED),
    ("other socket error", OSError(errno.EMFILE, "Too many open files"), F.PROTOCOL),
    ("not a transport error", ValueError("bad json"), None),
    ("an http status is not a transport failure", KeyError("x"), None),
]


@pytest.mark.parametrize(("exc", "expected"), [pytest.param(e, f, id=i) for i, e, f in CASES])
def test_classify_transport(exc: BaseException, expected: TransportFailure | None) -> None:
    assert classify_transport(exc) is expected


def _connect_error_from_none() -> None:
    try:
        raise ConnectionRefusedError()
    except ConnectionRefusedError:
        raise httpx.ConnectError("x") from None


def test_a_suppressed_context_still_names_the_failure() -> None:
    """httpx re-raises ``from None``; the socket's error is still what decides."""
    with pytest.raises(httpx.ConnectError) as caught:
        _connect_error_from_none()
    assert classify_transport(caught.value) is F.REFUSED


RESET_BEFORE_RESPONSE = chained(httpx.ReadError("x"), ConnectionResetError())
REFUSED = chained(httpx.ConnectError("x"), ConnectionRefusedError())


@pytest.mark.parametrize(
    ("exc", "responded", "canary", "evidence"),
    [
        pytest.param(REFUSED, False, Reason.CONNECT, EvidenceFailure.CONNECT, id="refused"),
        # A reset before the headers is a server that listens and broke its
        # answer: never CONNECT, which the scheduler reads as "nothing listens".
        pytest.param(
            RESET_BEFORE_RESPONSE, False, Reason.PROTOCOL, EvidenceFailure.PROTOCOL, id="reset"
        ),
        pytest.param(
            RESET_BEFORE_RESPONSE,
            True,
            Reason.PROTOCOL,
            EvidenceFailure.PROTOCOL,
            id="reset after headers",
        ),
        pytest.param(
            httpx.ReadTimeout("x"), False, Reason.TIMEOUT, EvidenceFailure.TIMEOUT, id="timeout"
        ),
        pytest.param(
            chained(httpx.ConnectError("x"), ssl.SSLError()),
            False,
            Reason.PROTOCOL,
            EvidenceFailure.PROTOCOL,
            id="tls",
        ),
    ],
)
def test_canaries_and_evidence_agree(
    exc: BaseException, responded: bool, canary: Reason, evidence: EvidenceFailure
) -> None:
    reason, detail = classify(exc, responded=responded)
    assert reason is canary
    assert detail.startswith(str(classify_transport(exc)))
    assert classify_transport_error(exc) is evidence


def test_httpcore_learns_its_async_library_without_searching_the_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Several times per request httpcore imports sniffio; that must never walk sys.path.

    Installed, sniffio is imported once and remembered; absent, sentinel records
    it as absent, so the import fails at once and httpcore takes asyncio.
    """
    from importlib.machinery import PathFinder

    from httpcore._synchronization import current_async_library

    searched: list[str] = []
    find_spec = PathFinder.find_spec

    def counting(name: str, path: object = None, target: object = None) -> object:
        searched.append(name)
        return find_spec(name, path, target)  # type: ignore[arg-type]

    settle_async_library_detection()  # what boot() does first thing in every entry point
    monkeypatch.setattr(PathFinder, "find_spec", counting)

    async def ask() -> list[str]:
        return [current_async_library() for _ in range(3)]

    assert asyncio.run(ask()) == ["asyncio"] * 3
    assert "sniffio" not in searched
    assert settle_async_library_detection() is False  # already settled: nothing to do twice
