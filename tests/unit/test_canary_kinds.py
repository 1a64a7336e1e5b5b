"""Canary kinds: what each sends (priority, nonces past caches) and how replies are judged."""

from __future__ import annotations

import base64
import io
from dataclasses import replace
from typing import Any

import pytest
from PIL import Image

from sentinel.canary.kinds import KINDS
from sentinel.canary.protocol import CanaryRequest, Reply
from sentinel.canary.result import CanaryKind, Reason
from sentinel.catalog import CanarySpec, load_catalog

CATALOG = load_catalog()


def spec(name: str) -> CanarySpec:
    return CATALOG.get(name)


def image_of(body: Any) -> bytes:
    parts = body["messages"][-1]["content"]
    url = next(p["image_url"]["url"] for p in parts if p["type"] == "image_url")
    prefix = "data:image/png;base64,"
    assert url.startswith(prefix)
    return base64.b64decode(url[len(prefix) :])


def test_registry_covers_every_kind() -> None:
    assert set(KINDS) == set(CanaryKind)
    for kind, probe in KINDS.items():
        assert probe.kind is kind


@pytest.mark.parametrize("name", ["text", "structured", "multimodal"])
def test_every_request_carries_priority_model_and_no_stream_by_default(name: str) -> None:
    s = spec(name)
    body = KINDS[s.kind].build(s, model="m", nonce="abc12345").body
    assert body["priority"] == -100
    assert body["model"] == "m"
    assert body["stream"] is False
    assert "stream_options" not in body


def test_a_model_in_the_template_wins() -> None:
    s = replace(spec("text"), request={**spec("text").request, "model": "pinned"})
    assert KINDS[s.kind].build(s, model="served", nonce="n").body["model"] == "pinned"


def test_streaming_asks_for_usage() -> None:
    s = replace(spec("text"), stream=True)
    body = KINDS[s.kind].build(s, model="m", nonce="n").body
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_building_does_not_mutate_the_template() -> None:
    s = spec("multimodal")
    before = repr(s.request)
    KINDS[s.kind].build(s, model="m", nonce="n1")
    assert repr(s.request) == before


def test_structured_schema_carries_the_nonce_and_varies_per_run() -> None:
    s = spec("structured")
    probe = KINDS[s.kind]
    first = probe.build(s, model="m", nonce="aaaa1111")
    second = probe.build(s, model="m", nonce="bbbb2222")
    assert first.schema == {"type": "string", "enum": ["ok-aaaa1111"]}
    assert first.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "sentinel_canary", "schema": first.schema},
    }
    assert first.body["response_format"] != second.body["response_format"]


def test_multimodal_image_bytes_vary_per_run_and_stay_a_32px_png() -> None:
    s = spec("multimodal")
    probe = KINDS[s.kind]
    first = probe.build(s, model="m", nonce="aaaa1111")
    second = probe.build(s, model="m", nonce="bbbb2222")
    a, b = image_of(first.body), image_of(second.body)
    assert a != b
    assert image_of(probe.build(s, model="m", nonce="aaaa1111").body) == a
    with Image.open(io.BytesIO(a)) as picture:
        assert picture.format == "PNG"
        assert picture.size == (32, 32)
    parts = first.body["messages"][-1]["content"]
    assert parts[-1] == {"type": "text", "text": s.request["messages"][-1]["content"]}


def test_multimodal_baseline_is_the_same_prompt_without_the_image() -> None:
    s = replace(spec("multimodal"), stream=True)
    sent = KINDS[s.kind].build(s, model="m", nonce="n")
    assert sent.baseline_body is not None
    assert sent.baseline_body["messages"] == s.request["messages"]
    assert sent.baseline_body["stream"] is False
    assert "stream_options" not in sent.baseline_body
    assert sent.baseline_body["max_tokens"] == 1
    assert sent.baseline_body["priority"] == -100


def sent_for(name: str, nonce: str = "abc12345") -> CanaryRequest:
    s = spec(name)
    return KINDS[s.kind].build(s, model="m", nonce=nonce)


JUDGEMENTS: list[tuple[str, str, Reply, int | None, Reason]] = [
    ("text ok", "text", Reply(text="ok"), None, Reason.OK),
    ("text empty", "text", Reply(text="", finish_reason="stop"), None, Reason.EMPTY),
    (
        "text empty, zero tokens",
        "text",
        Reply(text="", completion_tokens=0, finish_reason="stop"),
        None,
        Reason.EMPTY,
    ),
    (
        "text special tokens only",  # decoded, then stripped by the server: still alive
        "text",
        Reply(text="", completion_tokens=2, finish_reason="length"),
        None,
        Reason.OK,
    ),
    ("structured ok", "structured", Reply(text='"ok-abc12345"'), None, Reason.OK),
    ("structured other nonce", "structured", Reply(text='"ok-ffff0000"'), None, Reason.SCHEMA),
    ("structured not json", "structured", Reply(text="{\n  \n"), None, Reason.SCHEMA),
    ("structured wrong type", "structured", Reply(text="42"), None, Reason.SCHEMA),
    ("structured empty", "structured", Reply(text=""), None, Reason.EMPTY),
    ("image consumed", "multimodal", Reply(text="", prompt_tokens=30), 14, Reason.OK),
    (
        "image dropped",
        "multimodal",
        Reply(text="x", prompt_tokens=14),
        14,
        Reason.IMAGE_NOT_CONSUMED,
    ),
    ("no usage", "multimodal", Reply(text="x"), 14, Reason.BAD_BODY),
]


@pytest.mark.parametrize(
    ("name", "reply", "baseline", "reason"),
    [pytest.param(n, r, b, want, id=i) for i, n, r, b, want in JUDGEMENTS],
)
def test_judgement(name: str, reply: Reply, baseline: int | None, reason: Reason) -> None:
    sent = sent_for(name)
    judgement = KINDS[spec(name).kind].judge(sent, reply, baseline_prompt_tokens=baseline)
    assert judgement.reason is reason
    assert (judgement.detail == "") == (reason is Reason.OK)


@pytest.mark.parametrize(
    ("kind", "status", "message", "reason"),
    [
        (CanaryKind.MULTIMODAL, 400, "tiny-llama is not a multimodal model", Reason.UNSUPPORTED),
        (CanaryKind.MULTIMODAL, 400, "max_tokens must be at least 1", None),
        (CanaryKind.MULTIMODAL, 500, "tiny-llama is not a multimodal model", None),
        (CanaryKind.TEXT, 400, "tiny-llama is not a multimodal model", None),
    ],
)
def test_rejection(kind: CanaryKind, status: int, message: str, reason: Reason | None) -> None:
    assert KINDS[kind].rejection(status, message) == reason
