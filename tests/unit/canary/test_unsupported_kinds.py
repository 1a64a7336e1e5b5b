"""A kind the server cannot do, read from its own words: skipped; any other 4xx: a failure.

Both directions for each kind: the refusals of servers that are not vLLM
(llama.cpp, Ollama, a gateway) read as UNSUPPORTED, and the errors that only
look alike (a broken image, a missing model, a rate limit, a 5xx) stay
failures. The text canary is never UNSUPPORTED, so never skipped.
"""

from __future__ import annotations

import json

import pytest

from sentinel.canary.correctness import CORRECTNESS
from sentinel.canary.kinds import KINDS
from sentinel.canary.outcome import outcome
from sentinel.canary.replies import status_failure
from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import MULTIMODAL, STRUCTURED, TEXT, CanaryKind
from sentinel.exporter.exposition import kind_success

LLAMA_CPP = (
    "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj"
)


def body(message: str, code: int) -> bytes:
    return json.dumps({"error": {"message": message, "type": "x", "code": code}}).encode()


def reason(kind: CanaryKind, status: int, message: str, *, raw: bytes | None = None) -> Reason:
    failure = status_failure(status, raw if raw is not None else body(message, status), KINDS[kind])
    return failure.reason


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (400, LLAMA_CPP),  # llama.cpp's words with the status most servers use
        (500, LLAMA_CPP),  # llama-server's own status for them: its words, exactly
        (400, "tiny is not a multimodal model"),  # vLLM
        (400, "this model does not support images"),
        (422, "Vision input is unsupported by this deployment"),
        (400, "Multimodal inputs are not enabled for model tiny"),
        (404, "Not Found"),  # no chat endpoint at all
        (405, "Method Not Allowed"),
    ],
)
def test_images_refused_in_anyones_words_are_unsupported(status: int, message: str) -> None:
    assert reason(MULTIMODAL, status, message) is Reason.UNSUPPORTED


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (400, "Failed to load image: invalid PNG header"),  # our bytes, not their capability
        (400, "unsupported image format"),
        (400, "image too large, not supported"),
        (400, "bad request"),  # says nothing of the sort
        (429, "image input is not supported right now: rate limited"),  # who or when
        (401, "vision not allowed for this key"),
        (500, "image preprocessing crashed"),  # a server failing
        (502, LLAMA_CPP),  # only llama-server's own 500 carries its words
        (404, "The model `tiny` does not exist."),  # the model asked for is missing
        (404, "model 'tiny' not found, try pulling it first"),
    ],
)
def test_errors_that_only_look_alike_stay_failures(status: int, message: str) -> None:
    assert reason(MULTIMODAL, status, message) is not Reason.UNSUPPORTED


def test_structured_outputs_refused_by_name_are_unsupported_a_schema_refused_is_not() -> None:
    said = "response_format of type json_schema is not supported"
    assert reason(STRUCTURED, 400, said) is Reason.UNSUPPORTED
    assert reason(STRUCTURED, 404, "", raw=b"404: Not Found") is Reason.UNSUPPORTED
    # vLLM with structured outputs, refusing the schema: a failure to see.
    xgrammar = "The provided JSON schema contains features not supported by xgrammar."
    assert reason(STRUCTURED, 400, xgrammar) is Reason.HTTP_STATUS
    assert reason(STRUCTURED, 500, said) is Reason.HTTP_STATUS


def test_text_is_never_unsupported_a_missing_endpoint_is_named() -> None:
    failure = status_failure(404, b"404: Not Found", KINDS[TEXT])
    assert failure.reason is Reason.HTTP_STATUS
    assert "no such endpoint" in failure.detail
    assert reason(TEXT, 400, LLAMA_CPP) is Reason.HTTP_STATUS
    model = status_failure(404, body("The model `x` does not exist.", 404), KINDS[TEXT])
    assert "no such endpoint" not in model.detail


def test_correctness_without_completions_is_unsupported() -> None:
    assert reason(CORRECTNESS, 404, "", raw=b"404: Not Found") is Reason.UNSUPPORTED


def result(kind: CanaryKind, why: Reason) -> CanaryResult:
    return CanaryResult(name=kind.value, kind=kind, reason=why, started=0.0, duration=0.1)


@pytest.mark.parametrize("kind", [MULTIMODAL, STRUCTURED, CORRECTNESS])
def test_an_unsupported_kind_is_skipped_and_strict_fails_it(kind: CanaryKind) -> None:
    skipped = result(kind, Reason.UNSUPPORTED)
    assert outcome(skipped) == "skipped"
    assert outcome(skipped, strict=True) == "fail"
    assert kind_success([skipped]) is None
    assert kind_success([skipped], strict=True) == 0.0


def test_the_text_canary_is_never_skipped() -> None:
    assert outcome(result(TEXT, Reason.UNSUPPORTED)) == "fail"
