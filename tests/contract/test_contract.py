"""The API surface sentinel depends on, asserted identically against the simulator and real vLLM.

Every assertion here must hold for vLLM 0.32 (CPU build, tiny random models):
small ``max_tokens``, generous deadlines, no claims about speed, and no claim
about generated text except where a constraint forces it (a JSON-schema enum
nonce a random model cannot produce by chance).
"""

from __future__ import annotations

import base64
import io
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families

from tests.contract.target import ContractTarget

DEADLINE = 60.0  # a generous bound for one small request on a slow CPU vLLM


@pytest.fixture
def client(contract_target: ContractTarget) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=contract_target.base_url, timeout=DEADLINE) as http:
        yield http


def _chat(target: ContractTarget, content: Any = "Say hello.", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": target.model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 4,
    }
    body.update(extra)
    return body


def _png_data_url(size: int, nonce: int = 0) -> str:
    image = Image.new("RGB", (size, size), (200, 30, 30))
    image.putpixel((0, 0), (nonce % 256, 0, 0))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _sse_events(response: httpx.Response) -> list[str]:
    """The ``data:`` payloads of a server-sent-event stream, checking the framing on the way."""
    events: list[str] = []
    pending: list[str] = []
    for line in response.iter_lines():
        if line == "":
            if pending:
                events.append("\n".join(pending))
                pending = []
            continue
        assert line.startswith("data: "), f"not an SSE data line: {line!r}"
        pending.append(line[len("data: ") :])
    assert not pending, "stream ended without the blank line that closes an event"
    return events


def _vllm_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("vllm:"):
            continue
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def _sample(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def _assert_error_body(response: httpx.Response, status: int, err_type: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert isinstance(error["message"], str)
    assert error["message"]
    assert error["type"] == err_type
    assert error["code"] == status
    assert "param" in error


# -- discovery and liveness ------------------------------------------------------


def test_models_lists_the_served_model(
    client: httpx.Client, contract_target: ContractTarget
) -> None:
    response = client.get("/v1/models")
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "list"
    assert contract_target.model in [card["id"] for card in body["data"]]
    assert all(card["object"] == "model" for card in body["data"])


def test_health_is_200(client: httpx.Client) -> None:
    assert client.get("/health").status_code == 200


# -- metrics ----------------------------------------------------------------------

GAUGES = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:num_requests_waiting_by_reason",
    "vllm:kv_cache_usage_perc",
)
COUNTERS = (
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:request_success",
    "vllm:num_preemptions",
)
HISTOGRAMS = (
    "vllm:iteration_tokens_total",
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",
)


def test_metrics_names_types_and_labels(
    client: httpx.Client, contract_target: ContractTarget
) -> None:
    assert client.post("/v1/chat/completions", json=_chat(contract_target)).status_code == 200
    text = client.get("/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    expected = (
        [(n, "gauge") for n in GAUGES]
        + [(n, "counter") for n in COUNTERS]
        + [(n, "histogram") for n in HISTOGRAMS]
    )
    for name, kind in expected:
        assert name in families, f"{name} missing from /metrics"
        family = families[name]
        assert family.type == kind, f"{name} is a {family.type}, expected {kind}"
        assert family.samples, f"{name} has no samples"
        for sample in family.samples:
            assert sample.labels.get("model_name") == contract_target.model, sample
            assert "engine" in sample.labels, sample
    # counters are exposed with the _total suffix sentinel reads
    for name in COUNTERS:
        assert any(s.name == name + "_total" for s in families[name].samples), name
    assert any(
        s.name == "vllm:iteration_tokens_total_count"
        for s in families["vllm:iteration_tokens_total"].samples
    )
    reasons = {s.labels.get("finished_reason") for s in families["vllm:request_success"].samples}
    assert {"stop", "length"} <= reasons
    waiting_reasons = {
        s.labels.get("reason") for s in families["vllm:num_requests_waiting_by_reason"].samples
    }
    assert {"capacity", "deferred"} <= waiting_reasons


def test_completed_request_moves_the_progress_counters(
    client: httpx.Client, contract_target: ContractTarget
) -> None:
    before = client.get("/metrics").text
    reply = client.post("/v1/chat/completions", json=_chat(contract_target)).json()
    after = client.get("/metrics").text
    reason = reply["choices"][0]["finish_reason"]
    generated = reply["usage"]["completion_tokens"]
    success = "vllm:request_success_total"
    assert _sample(after, success, finished_reason=reason) >= (
        _sample(before, success, finished_reason=reason) + 1
    )
    assert _sample(after, "vllm:generation_tokens_total") >= (
        _sample(before, "vllm:generation_tokens_total") + generated
    )
    assert _sample(after, "vllm:iteration_tokens_total_count") > _sample(
        before, "vllm:iteration_tokens_total_count"
    )


# -- non-streaming replies ---------------------------------------------------------


def test_chat_completion_shape_and_usage(
    client: httpx.Client, contract_target: ContractTarget
) -> None:
    response = client.post("/v1/chat/completions", json=_chat(contract_target, max_tokens=3))
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert body["model"] == contract_target.model
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str)
    assert choice["finish_reason"] in ("stop", "length")
    usage = body["usage"]
    assert 1 <= usage["completion_tokens"] <= 3
    assert usage["prompt_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_completions_shape(client: httpx.Client, contract_target: ContractTarget) -> None:
    body = {"model": contract_target.model, "prompt": "Once upon a time", "max_tokens": 3}
    response = client.post("/v1/completions", json=body)
    assert response.status_code == 200
    reply = response.json()
    assert reply["object"] == "text_completion"
    assert reply["id"].startswith("cmpl-")
    assert isinstance(reply["choices"][0]["text"], str)
    assert reply["choices"][0]["finish_reason"] in ("stop", "length")
    assert reply["usage"]["completion_tokens"] <= 3


# -- streaming ----------------------------------------------------------------------


def test_chat_stream_framing_without_usage(
    client: httpx.Client, contract_target: ContractTarget
) -> None:
    body = _chat(contract_target, stream=True, max_tokens=3)
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = _sse_events(response)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert all(c.get("usage") is None for c in chunks), "usage streamed without include_usage"
    assert chunks[0]["choices"][0]["delta"].get("role") == "assistant"
    finished = [c for c in chunks if c["choices"] and c["choices"][0].get("finish_reason")]
    assert len(finished) == 1
    assert finished[0]["choices"][0]["finish_reason"] in ("stop", "length")


def test_chat_stream_usage_only_when_requested(
    client: httpx.Client, contract_target: ContractTarget
) -> None:
    body = _chat(contract_target, stream=True, max_tokens=3, stream_options={"include_usage": True})
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        events = _sse_events(response)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    last = chunks[-1]
    assert last["choices"] == []
    usage = last["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert 1 <= usage["completion_tokens"] <= 3
    assert all(c.get("usage") is None for c in chunks[:-1])


def test_completions_stream_framing(client: httpx.Client, contract_target: ContractTarget) -> None:
    body = {"model": contract_target.model, "prompt": "Once", "max_tokens": 3, "stream": True}
    with client.stream("POST", "/v1/completions", json=body) as response:
        assert response.status_code == 200
        events = _sse_events(response)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks
    assert all(c["object"] == "text_completion" for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")


# -- errors ---------------------------------------------------------------------------


def test_unknown_model_is_404_with_error_body(
    client: httpx.Client, contract_target: ContractTarget
) -> None:
    body = _chat(contract_target, model="no-such-model-" + uuid.uuid4().hex[:6])
    _assert_error_body(client.post("/v1/chat/completions", json=body), 404, "NotFoundError")


def test_invalid_request_is_400_with_error_body(
    client: httpx.Client, contract_target: ContractTarget
) -> None:
    # A body that breaks the request schema fails vLLM's request validation:
    # type "Bad Request", the field named as body.<field>.
    body = {"model": contract_target.model, "messages": "not a list", "max_tokens": 2}
    response = client.post("/v1/chat/completions", json=body)
    _assert_error_body(response, 400, "Bad Request")
    assert response.json()["error"]["param"] == "body.messages"


def test_invalid_value_is_400_bad_request_error(
    client: httpx.Client, contract_target: ContractTarget
) -> None:
    body = {"model": contract_target.model, "messages": [{"role": "user", "content": "hi"}]}
    response = client.post("/v1/chat/completions", json={**body, "max_tokens": -1})
    _assert_error_body(response, 400, "BadRequestError")


def test_undecodable_image_is_400(client: httpx.Client, contract_target: ContractTarget) -> None:
    garbage = "data:image/png;base64," + base64.b64encode(b"not an image at all").decode()
    content = [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": garbage}},
    ]
    response = client.post("/v1/chat/completions", json=_chat(contract_target, content))
    _assert_error_body(response, 400, "BadRequestError")


def test_image_request_costs_prompt_tokens_or_is_refused(
    client: httpx.Client, contract_target: ContractTarget
) -> None:
    text_only = client.post("/v1/chat/completions", json=_chat(contract_target, "Describe."))
    assert text_only.status_code == 200
    content = [
        {"type": "text", "text": "Describe."},
        {"type": "image_url", "image_url": {"url": _png_data_url(32, int(time.time()))}},
    ]
    response = client.post("/v1/chat/completions", json=_chat(contract_target, content))
    if not contract_target.supports_images:
        _assert_error_body(response, 400, "BadRequestError")
        return
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["prompt_tokens"] > text_only.json()["usage"]["prompt_tokens"]


# -- structured outputs ------------------------------------------------------------------


def test_json_schema_enum_nonce_comes_back_exactly(
    client: httpx.Client, contract_target: ContractTarget
) -> None:
    nonce = "ok-" + uuid.uuid4().hex[:6]
    schema = {"type": "string", "enum": [nonce]}
    body = _chat(
        contract_target,
        max_tokens=24,
        response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
    )
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    assert json.loads(choice["message"]["content"]) == nonce
    assert choice["finish_reason"] == "stop"


def test_removed_guided_json_is_ignored_not_rejected(
    client: httpx.Client, contract_target: ContractTarget
) -> None:
    nonce = "ok-" + uuid.uuid4().hex[:6]
    body = _chat(contract_target, max_tokens=8, guided_json={"type": "string", "enum": [nonce]})
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    assert nonce not in response.json()["choices"][0]["message"]["content"]


# -- priority -------------------------------------------------------------------------------


def test_priority_field_and_header_are_accepted(
    client: httpx.Client, contract_target: ContractTarget
) -> None:
    """Under fcfs vLLM accepts and ignores them; under priority it honours them. Never an error."""
    response = client.post("/v1/chat/completions", json=_chat(contract_target, priority=-100))
    assert response.status_code == 200, response.text
    response = client.post(
        "/v1/chat/completions",
        json=_chat(contract_target),
        headers={"X-Vllm-Priority": "-100"},
    )
    assert response.status_code == 200, response.text


# -- aborts and a stopped engine --------------------------------------------------------------


def _wait_idle(client: httpx.Client) -> str:
    """The exposition once nothing runs or waits and the success counters have settled.

    A request that just left the engine may be counted a moment after the
    gauges drop to zero, so two idle reads in a row must agree.
    """
    deadline = time.monotonic() + DEADLINE
    previous: tuple[float, ...] | None = None
    while True:
        text = client.get("/metrics").text
        busy = _sample(text, "vllm:num_requests_running") + _sample(
            text, "vllm:num_requests_waiting"
        )
        counts = tuple(
            _sample(text, "vllm:request_success_total", finished_reason=reason)
            for reason in ("stop", "length")
        )
        if busy == 0 and counts == previous:
            return text
        previous = counts if busy == 0 else None
        assert time.monotonic() < deadline, "server never went idle"
        time.sleep(0.25)  # polling /metrics with a deadline


def test_client_disconnect_aborts_without_counting_success(
    client: httpx.Client, contract_target: ContractTarget
) -> None:
    before = _wait_idle(client)
    # Long enough that a slow first chunk on a loaded CPU machine cannot let the
    # whole stream finish before the hang-up is seen.
    body = _chat(contract_target, stream=True, max_tokens=1500, ignore_eos=True)
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: "):
                break  # first chunk seen: the request is in the engine; now hang up
    after = _wait_idle(client)
    for reason in ("stop", "length"):
        assert _sample(after, "vllm:request_success_total", finished_reason=reason) == _sample(
            before, "vllm:request_success_total", finished_reason=reason
        )


def test_stopped_engine_health_200_metrics_frozen_requests_stall(
    client: httpx.Client, contract_target: ContractTarget
) -> None:
    _wait_idle(client)
    contract_target.stop_engine()
    try:
        assert client.get("/health").status_code == 200
        frozen = _vllm_samples(client.get("/metrics").text)
        with pytest.raises(httpx.TimeoutException):
            client.post("/v1/chat/completions", json=_chat(contract_target), timeout=2.0)
        assert client.get("/health").status_code == 200
        assert _vllm_samples(client.get("/metrics").text) == frozen
    finally:
        contract_target.resume_engine()
    response = client.post("/v1/chat/completions", json=_chat(contract_target))
    assert response.status_code == 200
