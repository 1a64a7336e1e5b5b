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

import errno
import socket
import ssl
from collections.abc import Iterator
from enum import StrEnum

import httpx

__all__ = ["TransportFailure", "classify_transport"]


class TransportFailure(StrEnum):
    """Why an exchange produced no (complete) HTTP response."""

    REFUSED = "refused"  # the connection was refused: nothing listens on the port
    UNREACHABLE = "unreachable"  # name resolution or routing failed before any connection
    TIMEOUT = "timeout"  # connected (or tried to) but nothing arrived in time
    RESET = "reset"  # accepted, then reset or closed before a response
    TLS = "tls"  # the TLS handshake or certificate check failed
    PROTOCOL = "protocol"  # malformed HTTP, a body cut short, any other transport error


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
