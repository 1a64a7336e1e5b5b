"""A refusal at vLLM's admission cap: its own reason, neither good nor bad for readiness.

vLLM 0.32's QueueOverflowError and MaxQueuedTokensError (vllm/exceptions.py)
answer HTTP 503 with these words before the engine; any other 503 stays an
HTTP failure. The engine rule still counts the refusal unanswered: a hung
engine fills its queue to the cap and refuses every arrival.
"""

from __future__ import annotations

import json

import pytest

from sentinel.canary.refusal import Refusal, known_refusal
from sentinel.canary.replies import status_failure
from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.verdict import Evidence, KindEvidence, Policy, VerdictState, evaluate
from sentinel.verdict.answers import fast_failure, unanswered

QUEUE_FULL = (
    "The engine is currently busy and cannot accept new requests. "
    "Please try again later or on a different instance."
)
BACKLOG = (
    "The engine has reached its prefill token backlog limit. "
    "Please try again later or on a different instance."
)


def body(message: str) -> bytes:
    error = {"message": message, "type": "Service Unavailable", "param": None, "code": 503}
    return json.dumps({"error": error}).encode()


@pytest.mark.parametrize("message", [QUEUE_FULL, BACKLOG])
def test_vllms_admission_refusals_are_their_own_reason(message: str) -> None:
    failure = status_failure(503, body(message), None)
    assert failure.reason is Reason.ADMISSION
    result = CanaryResult("text-canary", CanaryKind.TEXT, failure.reason, 1.0, 0.01)
    assert unanswered(result)
    assert fast_failure(result)


def test_another_refusal_is_refused_with_its_state() -> None:
    failure = status_failure(503, body("The model is currently scaling."), None)
    assert failure.reason is Reason.REFUSED
    assert failure.refusal is Refusal.SCALING


def test_a_5xx_that_is_no_refusal_is_an_http_failure() -> None:
    failure = status_failure(500, body("Internal server error"), None)
    assert failure.reason is Reason.HTTP_STATUS
    assert failure.refusal is None


def test_refusals_at_the_cap_keep_a_started_server_ready() -> None:
    text = CanaryKind.TEXT
    refused = tuple(
        CanaryResult("text-canary", text, Reason.ADMISSION, 10.0 + i, 0.01) for i in range(5)
    )
    ok = CanaryResult("text-canary", text, Reason.OK, 5.0, 0.2)
    ev = Evidence(
        kinds={text: KindEvidence(text, results=(ok, *refused))},
        progress_available=True,
        last_progress_at=15.0,
        last_evidence_at=15.0,
        sampled_at=15.0,
    )
    state, verdict = evaluate(VerdictState(), ev, Policy(), 15.5)
    assert verdict.readiness.ok, verdict.readiness.reason
    assert verdict.liveness.ok
    assert not state.degraded


def test_the_refusal_is_told_in_a_stream_error_event_too() -> None:
    """A streamed canary gets vLLM's words as an error event after its 200."""
    assert known_refusal(QUEUE_FULL) is Refusal.ADMISSION
    assert known_refusal(BACKLOG) is Refusal.ADMISSION
    assert known_refusal("Internal server error") is not Refusal.ADMISSION
