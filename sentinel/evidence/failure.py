"""How a failed evidence request is classified.

The scraper and the ``/health`` poller both talk HTTP to the inference server
and both must tell the verdict *why* a request failed: a refused connection
means the server is gone or restarting, a timeout means it is alive but slow or
stuck, a bad status means it answered. Transport failures are named once, by
:mod:`sentinel.transport` (the canaries use the same classification); this
module only translates them into the closed :class:`EvidenceFailure` enum.
"""

from __future__ import annotations

from enum import StrEnum

from sentinel.transport import TransportFailure, classify_transport


class EvidenceFailure(StrEnum):
    """Why an evidence request produced no evidence."""

    CONNECT = "connect"  # refused or unreachable: nothing is listening
    TIMEOUT = "timeout"  # connected (or tried to) but no answer within the deadline
    HTTP_STATUS = "http_status"  # the server answered with a non-2xx status
    BAD_BODY = "bad_body"  # the answer could not be parsed
    PROTOCOL = "protocol"  # reset, TLS or any other transport error: something listens
    TOO_LARGE = "too_large"  # the answer ran past a byte, line or series cap and was abandoned


# Only a refusal says the server is gone. A reset or a dropped connection is a
# listening server that broke its answer, and must not be mistaken for a restart.
_EVIDENCE_FAILURES = {
    TransportFailure.REFUSED: EvidenceFailure.CONNECT,
    TransportFailure.UNREACHABLE: EvidenceFailure.CONNECT,
    TransportFailure.TIMEOUT: EvidenceFailure.TIMEOUT,
    TransportFailure.RESET: EvidenceFailure.PROTOCOL,
    TransportFailure.TLS: EvidenceFailure.PROTOCOL,
    TransportFailure.PROTOCOL: EvidenceFailure.PROTOCOL,
    TransportFailure.OVERSIZED: EvidenceFailure.TOO_LARGE,
    TransportFailure.DECODING: EvidenceFailure.BAD_BODY,
}


def classify_transport_error(exc: BaseException) -> EvidenceFailure:
    """Map a failed request's exception onto :class:`EvidenceFailure`."""
    return _EVIDENCE_FAILURES[classify_transport(exc) or TransportFailure.PROTOCOL]
