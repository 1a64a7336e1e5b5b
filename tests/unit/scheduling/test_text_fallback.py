"""The text canary's fallback to a plain completion, for a base model without a chat template.

Pure tables for the decision and the request it sends, then the scheduler on
the virtual clock of ``test_scheduler`` against a mock server that refuses
chat as vLLM does for a tokenizer without a chat template.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import pytest

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CHAT_ENDPOINT, COMPLETIONS_ENDPOINT, CanaryKind
from sentinel.record.set_aside import (
    FALLBACK_AFTER,
    SET_ASIDE_AFTER,
    ChatFallback,
    fallback_reason,
)
from sentinel.scheduling.text_fallback import TextRoute, as_completion
from sentinel.verdict import KindEvidence
from tests.unit.scheduling.test_scheduler import T0, VirtualClock, _kind_of, _specs, scheduling
from tests.unit.verdict.test_verdict import evidence, once

TEXT = CanaryKind("text")
STRUCTURED = CanaryKind("structured")
# vLLM 0.32 (vllm/renderers/hf.py, safe_apply_chat_template), answered as a 400.
NO_TEMPLATE_MESSAGE = (
    "As of transformers v4.44, default chat template is no longer allowed, so you must "
    "provide a chat template if the tokenizer does not define one."
)


def result(reason: Reason, status: int | None = None, detail: str = "") -> CanaryResult:
    return CanaryResult("text", TEXT, reason, 1.0, 0.1, detail=detail, http_status=status)


REFUSED = result(Reason.HTTP_STATUS, 400, f"HTTP 400: {NO_TEMPLATE_MESSAGE}")
PASSED = result(Reason.OK)


def test_three_capability_refusals_on_chat_move_the_text_canary() -> None:
    assert FALLBACK_AFTER <= SET_ASIDE_AFTER  # text must not wait longer than a path kind
    assert fallback_reason([REFUSED] * (FALLBACK_AFTER - 1)) is None
    why = fallback_reason([REFUSED] * FALLBACK_AFTER)
    assert why is not None
    assert why.startswith(f"on {COMPLETIONS_ENDPOINT} for this server: ")
    assert f"{FALLBACK_AFTER} canaries in a row on {CHAT_ENDPOINT} refused with HTTP 400" in why
    assert "HTTP 400: HTTP 400" not in why
    assert "default chat template is no longer allowed" in why


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(result(Reason.HTTP_STATUS, 401), id="401-credentials"),
        pytest.param(result(Reason.HTTP_STATUS, 403), id="403-forbidden"),
        pytest.param(result(Reason.HTTP_STATUS, 429), id="429-rate-limited"),
        pytest.param(result(Reason.HTTP_STATUS, 500), id="500-server"),
        pytest.param(result(Reason.HTTP_STATUS, 503), id="503-server"),
        pytest.param(result(Reason.TIMEOUT), id="timeout"),
        pytest.param(result(Reason.CONNECT), id="connect"),
        pytest.param(result(Reason.EMPTY), id="empty"),
    ],
)
def test_a_refusal_that_is_not_a_capability_never_moves_it(other: CanaryResult) -> None:
    assert fallback_reason([other] * 10) is None
    # Nor does one in the last run: the run must be refusals throughout.
    assert fallback_reason([*[REFUSED] * FALLBACK_AFTER, other]) is None


def test_a_pass_on_chat_in_the_history_keeps_it_on_chat() -> None:
    assert fallback_reason([PASSED, *[REFUSED] * 10]) is None


def test_the_plain_completion_keeps_the_prompt_and_drops_what_chat_alone_takes() -> None:
    shipped = _specs(text={})[0]
    assert shipped.endpoint == CHAT_ENDPOINT
    spec = replace(
        shipped,
        request={
            **shipped.request,
            "chat_template_kwargs": {"enable_thinking": False},
            "max_completion_tokens": 3,
            "logprobs": True,
        },
    )
    plain = as_completion(spec)
    assert plain.endpoint == COMPLETIONS_ENDPOINT
    assert plain.request["prompt"] == "Say ok."
    assert "messages" not in plain.request
    assert {"chat_template_kwargs", "max_completion_tokens", "logprobs"}.isdisjoint(plain.request)
    assert plain.request["max_tokens"] == 2  # the spec's own max_tokens wins
    assert plain.request["min_tokens"] == 2
    assert (plain.name, plain.kind, plain.stream, plain.deadline) == (
        spec.name,
        spec.kind,
        spec.stream,
        spec.deadline,
    )
    assert as_completion(plain) is plain  # already a completion


def test_content_parts_become_the_prompt() -> None:
    spec = replace(
        _specs(text={})[0],
        request={
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Say"}, {"text": "ok."}]},
            ],
            "max_tokens": 2,
        },
    )
    assert as_completion(spec).request["prompt"] == "Be brief.\nSay ok."


def test_startup_names_the_fallback_while_waiting_and_once_passed() -> None:
    note = "on /v1/completions for this server: 3 canaries in a row on chat refused"
    refused = CanaryResult("text", TEXT, Reason.HTTP_STATUS, 1.0, 0.1, "HTTP 400: x", None, 400)
    waiting = once(evidence(KindEvidence(TEXT, fallback=note, results=(refused,))), now=2.0)
    assert not waiting.startup.ok
    assert f"text ({note}; last: http_status" in waiting.startup.reason
    passed = CanaryResult("text", TEXT, Reason.OK, 3.0, 0.1)
    aside = KindEvidence(STRUCTURED, enabled=False, disabled_reason="set aside for this server")
    ready = once(evidence(KindEvidence(TEXT, fallback=note, results=(passed,)), aside), now=4.0)
    assert ready.startup.ok
    assert ready.startup.reason == (
        f"every canary kind succeeded; fell back: text ({note}); "
        "set aside: structured (set aside for this server)"
    )
    assert ready.liveness.ok


@dataclass
class _Record:
    results: list[CanaryResult] = field(default_factory=list)
    fallback: str = ""


def test_once_passed_on_chat_in_an_epoch_it_stays_even_after_the_pass_leaves_history() -> None:
    route = ChatFallback(_specs(text={}))
    record = _Record([PASSED])
    assert route.review(record, epoch=0) is None
    record.results = [REFUSED] * 20  # the pass fell off the bounded history
    assert route.review(record, epoch=0) is None
    # The next server epoch is judged afresh.
    assert route.review(record, epoch=1) is not None


def test_the_route_sends_text_as_configured_until_its_record_says_otherwise() -> None:
    specs = _specs(text={}, structured={})
    text, structured = specs
    route = TextRoute(specs)
    assert route.spec(text, _Record().fallback) is text
    record = _Record(fallback="on /v1/completions for this server: ...")
    moved = route.spec(replace(text, priority=-7), record.fallback)
    assert (moved.endpoint, moved.priority) == (COMPLETIONS_ENDPOINT, -7)
    assert route.spec(structured, record.fallback) is structured  # only the control moves


@dataclass
class NoTemplateVllm:
    """A base model without a chat template: chat refused with vLLM's 400, completions answer."""

    clock: VirtualClock
    chat_status: int = 400
    chat_answers: int = 0  # the first N chat requests succeed
    paths: list[tuple[str, str]] = field(default_factory=list)  # (kind, path) per request

    async def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        path = request.url.path
        self.paths.append((_kind_of(body), path))
        usage = {"prompt_tokens": 5, "completion_tokens": 2}
        if path == COMPLETIONS_ENDPOINT:
            assert "prompt" in body, body
            assert "messages" not in body, body
            return _stream({"choices": [{"text": "ok", "finish_reason": "stop"}]}, usage)
        if self.chat_answers:
            self.chat_answers -= 1
            chunk = {"choices": [{"delta": {"content": "ok"}, "finish_reason": "stop"}]}
            return _stream(chunk, usage)
        message = NO_TEMPLATE_MESSAGE if self.chat_status == 400 else "no"
        error = {"message": message, "type": "BadRequestError", "param": None}
        return httpx.Response(self.chat_status, json={"error": {**error, "code": self.chat_status}})

    def sent(self, path: str, kind: str = "text") -> int:
        return sum(1 for k, p in self.paths if p == path and k == kind)


def _stream(chunk: dict[str, Any], usage: dict[str, int]) -> httpx.Response:
    chunks = [chunk, {"choices": [], "usage": usage}]
    events = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return httpx.Response(200, text=events, headers={"Content-Type": "text/event-stream"})


EVERY_SECOND = {"interval": 1.0, "jitter": 0.0}


async def test_no_chat_template_text_falls_back_and_its_controls_follow() -> None:
    fake: list[NoTemplateVllm] = []

    def server(clock: VirtualClock) -> NoTemplateVllm:
        fake.append(NoTemplateVllm(clock))
        return fake[0]

    specs = _specs(text=EVERY_SECOND, structured={"interval": 1.0, "jitter": 0.0})
    async with scheduling(specs, server=server) as h:  # type: ignore[arg-type]
        await h.clock.run_until(T0 + 20)
    vllm = fake[0]
    text = h.ledger.records[TEXT]
    assert text.enabled
    assert text.fallback.startswith(f"on {COMPLETIONS_ENDPOINT} for this server")
    # Each step sends a text canary and a structured one with its control, so
    # the third refusal arrives within the second step; nothing more goes to chat.
    assert vllm.sent(CHAT_ENDPOINT) <= FALLBACK_AFTER + 1
    assert vllm.sent(COMPLETIONS_ENDPOINT) >= 20
    assert text.results[-1].ok
    # The structured kind needs chat: set aside, while its controls passed on completions.
    structured = h.ledger.records[STRUCTURED]
    assert not structured.enabled
    assert f"{SET_ASIDE_AFTER} canaries in a row refused with HTTP 400" in (
        structured.disabled_reason
    )
    assert any(c is not None and c.ok for c in structured.controls)
    assert vllm.sent(COMPLETIONS_ENDPOINT, "structured") == 0


@pytest.mark.parametrize("status", [401, 403, 429, 500, 503])
async def test_a_refusal_that_is_not_a_capability_keeps_text_on_chat(status: int) -> None:
    fake: list[NoTemplateVllm] = []

    def server(clock: VirtualClock) -> NoTemplateVllm:
        fake.append(NoTemplateVllm(clock, chat_status=status))
        return fake[0]

    async with scheduling(_specs(text=EVERY_SECOND), server=server) as h:  # type: ignore[arg-type]
        await h.clock.run_until(T0 + 20)
    assert h.ledger.records[TEXT].fallback == ""
    assert fake[0].sent(COMPLETIONS_ENDPOINT) == 0
    assert fake[0].sent(CHAT_ENDPOINT) >= 20


async def test_a_text_canary_that_passed_on_chat_never_falls_back_in_that_epoch() -> None:
    fake: list[NoTemplateVllm] = []

    def server(clock: VirtualClock) -> NoTemplateVllm:
        fake.append(NoTemplateVllm(clock, chat_answers=1))
        return fake[0]

    async with scheduling(_specs(text=EVERY_SECOND), server=server) as h:  # type: ignore[arg-type]
        await h.clock.run_until(T0 + 20)
    assert h.ledger.records[TEXT].fallback == ""
    assert fake[0].sent(COMPLETIONS_ENDPOINT) == 0


async def test_a_new_server_epoch_starts_on_chat_again() -> None:
    fake: list[NoTemplateVllm] = []

    def server(clock: VirtualClock) -> NoTemplateVllm:
        fake.append(NoTemplateVllm(clock))
        return fake[0]

    async with scheduling(_specs(text=EVERY_SECOND), server=server) as h:  # type: ignore[arg-type]
        await h.clock.run_until(T0 + 10)
        assert h.ledger.records[TEXT].fallback
        vllm = fake[0]
        before = vllm.sent(CHAT_ENDPOINT)
        vllm.chat_answers = 100  # the restarted server has a chat template
        h.ledger.new_epoch("API server restarted", h.clock())
        await h.clock.run_until(T0 + 20)
    assert h.ledger.records[TEXT].fallback == ""
    assert vllm.sent(CHAT_ENDPOINT) >= before + 9
    assert h.ledger.records[TEXT].results[-1].ok
