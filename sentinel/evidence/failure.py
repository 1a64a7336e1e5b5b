"""How a failed evidence request is classified.

The scraper and the ``/health`` poller both talk HTTP to the inference server
and both must tell the verdict *why* a request failed: a refused connection
means the server is gone or restarting, a timeout means it is alive but slow or
stuck, a bad status means it answered. Foreign exceptions are mapped here, in
one place, into the closed :class:`EvidenceFailure` enum.
"""

from __future__ import annotations

from enum import StrEnum

import httpx


class EvidenceFailure(StrEnum):
    """Why an evidence request produced no evidence."""

    CONNECT = "connect"  # refused or unreachable: nothing is listening
    TIMEOUT = "timeout"  # connected (or tried to) but no answer within the deadline
    HTTP_STATUS = "http_status"  # the server answered with a non-2xx status
    BAD_BODY = "bad_body"  # the answer could not be parsed
    PROTOCOL = "protocol"  # any other transport error


def classify_transport_error(exc: httpx.TransportError) -> EvidenceFailure:
    """Map an httpx transport error onto :class:`EvidenceFailure`.

    ``ConnectTimeout`` is a timeout, not a refusal: a server that is up but
    whose accept queue is full looks like this, and it must not be mistaken
    for a restart. A connection dropped after it was accepted is a protocol
    error for the same reason: only a refusal says the server is gone.
    """
    if isinstance(exc, httpx.TimeoutException):
        return EvidenceFailure.TIMEOUT
    if isinstance(exc, httpx.ConnectError):
        return EvidenceFailure.CONNECT
    return EvidenceFailure.PROTOCOL
