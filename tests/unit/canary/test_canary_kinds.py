"""Canary kinds: what each sends (priority, nonces past caches) and how replies are judged."""

from __future__ import annotations

import ast
import base64
import io
import pickle
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

import sentinel.canary.spec as spec_module
from sentinel.canary import kinds
from sentinel.canary.catalog import default_directory, load_catalog
from sentinel.canary.kinds import KINDS
from sentinel.canary.protocol import CanaryRequest, KindDefaults, Reply, ServerFacts
from sentinel.canary.result import Reason
from sentinel.canary.spec import CanaryKind, CanarySpec, SpecFieldError
from tests import toykind

CATALOG = load_catalog()


def spec(name: str) -> CanarySpec:
    return CATALOG.get(name)


def image_of(body: Any) -> bytes:
    parts = body["messages"][-1]["content"]
    url = next(p["image_url"]["url"] for p in parts if p["type"] == "image_url")
    prefix = "data:image/png;base64,"
    assert url.startswith(prefix)
    return base64.b64decode(url[len(prefix) :])


def test_registry_lists_the_builtin_kinds_in_order_each_under_its_own_name() -> None:
    assert kinds.names()[:3] == (CanaryKind.TEXT, CanaryKind.STRUCTURED, CanaryKind.MULTIMODAL)
    for kind, probe in KINDS.items():
        assert probe.kind is kind
    assert kinds.CONTROL is CanaryKind.TEXT
    assert kinds.path_kinds()[:2] == (CanaryKind.STRUCTURED, CanaryKind.MULTIMODAL)
    assert not kinds.is_path(CanaryKind.TEXT)
    assert not kinds.is_path(CanaryKind("never-registered"))


def test_the_registry_says_which_kinds_are_paired_idle_gated_and_skip_when_unsupported() -> None:
    correctness = CanaryKind("correctness")
    said = {
        kind: (kinds.is_paired(kind), kinds.is_idle_gated(kind), kinds.skips_unsupported(kind))
        for kind in (CanaryKind.TEXT, CanaryKind.STRUCTURED, CanaryKind.MULTIMODAL, correctness)
    }
    assert said == {
        CanaryKind.TEXT: (False, True, False),  # the control, stood in for by real traffic
        CanaryKind.STRUCTURED: (True, False, True),  # a server without response_format
        CanaryKind.MULTIMODAL: (True, False, True),  # a text-only model takes no image
        correctness: (True, False, True),  # reads its control; no logprobs: no fingerprint
    }
    unknown = CanaryKind("never-registered")
    assert not kinds.is_paired(unknown)
    assert not kinds.is_idle_gated(unknown)
    assert not kinds.skips_unsupported(unknown)


def test_a_path_kind_that_is_not_paired_is_refused() -> None:
    class Unpaired(toykind.ToyCanary):
        paired = False

    with pytest.raises(ValueError, match="must be paired"):
        kinds.register(Unpaired())
    assert toykind.KIND not in KINDS


@pytest.mark.parametrize(
    ("kind", "defaults"),
    [
        (CanaryKind.TEXT, KindDefaults(deadline=8.0, interval=5.0, jitter=0.1)),
        (CanaryKind.STRUCTURED, KindDefaults(deadline=10.0, interval=10.0, jitter=0.0)),
        (CanaryKind.MULTIMODAL, KindDefaults(deadline=10.0, interval=10.0, jitter=0.0)),
    ],
)
def test_each_kind_carries_design_defaults(kind: CanaryKind, defaults: KindDefaults) -> None:
    assert KINDS[kind].defaults == defaults


def test_without_a_reasoning_parser_every_shipped_canary_can_be_validated() -> None:
    for s in CATALOG.specs:
        assert KINDS[s.kind].unvalidatable(s, ServerFacts()) is None
    assert kinds.unvalidatable(CATALOG.specs, ServerFacts()) == {}
    assert set(kinds.unvalidatable(CATALOG.specs, ServerFacts("qwen3"))) == {CanaryKind.STRUCTURED}


def test_a_kind_name_cannot_be_registered_twice_and_the_control_stays() -> None:
    with pytest.raises(ValueError, match="already registered"):
        kinds.register(KINDS[CanaryKind.STRUCTURED])
    with pytest.raises(ValueError, match="control"):
        kinds.unregister(CanaryKind.TEXT)
    assert CanaryKind.TEXT in KINDS


def test_kind_names_are_open_interned_strings() -> None:
    made = CanaryKind("toy-" + "probe")
    assert made is CanaryKind("toy-probe")
    assert CanaryKind("text") is CanaryKind.TEXT
    assert pickle.loads(pickle.dumps(CanaryKind.TEXT)) is CanaryKind.TEXT
    assert (CanaryKind.TEXT.value, f"{CanaryKind.TEXT}", CanaryKind.TEXT == "text") == (
        "text",
        "text",
        True,
    )
    assert type(CanaryKind.TEXT.value) is str
    with pytest.raises(ValueError, match="non-empty"):
        CanaryKind("")


def test_spec_module_is_a_leaf() -> None:
    tree = ast.parse(Path(spec_module.__file__).read_text())
    imported = {
        node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert not {m for m in imported if m.startswith("sentinel")}


SCHEMA_FIELDS: list[tuple[str, Any, str | None]] = [
    ("nonce enum", {"type": "string", "enum": ["ok-{nonce}"]}, None),
    ("no nonce", {"type": "string", "enum": ["ok"]}, "{nonce} placeholder"),
    ("nonce in a key", {"type": "object", "properties": {"k{nonce}": {}}}, None),
    ("bad type", {"type": "strung", "enum": ["ok-{nonce}"]}, "not a valid JSON schema"),
]


@pytest.mark.parametrize(
    ("schema", "problem"), [pytest.param(s, p, id=i) for i, s, p in SCHEMA_FIELDS]
)
def test_structured_checks_its_schema_field(schema: Any, problem: str | None) -> None:
    probe = KINDS[CanaryKind.STRUCTURED]
    if problem is None:
        assert probe.load_fields({"schema": schema}, default_directory()) == {"schema": schema}
        return
    with pytest.raises(SpecFieldError) as caught:
        probe.load_fields({"schema": schema}, default_directory())
    assert (caught.value.key, problem in caught.value.problem) == ("schema", True)


def test_multimodal_loads_its_image_field_and_refuses_what_is_not_a_picture() -> None:
    probe = KINDS[CanaryKind.MULTIMODAL]
    loaded = probe.load_fields({"image": "assets/canary.png"}, default_directory())
    assert bytes(loaded["image"]).startswith(b"\x89PNG")
    with pytest.raises(SpecFieldError, match="not an image"):
        probe.load_fields({"image": "text.yaml"}, default_directory())
    with pytest.raises(SpecFieldError, match="cannot read"):
        probe.load_fields({"image": "assets/absent.png"}, default_directory())


@pytest.mark.parametrize(
    ("name", "streamed"), [("text", True), ("structured", True), ("multimodal", True)]
)
def test_every_request_carries_priority_model_and_every_canary_streams(
    name: str, streamed: bool
) -> None:
    """Canaries stream: a path by its own first token and pace, text by decode past it."""
    s = spec(name)
    body = KINDS[s.kind].build(s, model="m", nonce="abc12345").body
    assert body["priority"] == -100
    assert body["model"] == "m"
    assert body["stream"] is streamed
    assert ("stream_options" in body) is streamed
    assert body["user"] == "sentinel-abc12345"  # the run's nonce, past any cache
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    if name == "text":
        assert body["min_tokens"] == 2  # a healthy engine must decode past the first token


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
    assert "user" not in sent.baseline_body  # cached by its body: no nonce


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
    (
        "structured only reasoning",  # the grammar applies after reasoning: never exercised
        "structured",
        Reply(text="", reasoning="<think>", completion_tokens=4, finish_reason="stop"),
        None,
        Reason.INCONCLUSIVE,
    ),
    (
        "text only reasoning, cut: the engine generated",
        "text",
        Reply(text="", reasoning="<think>", completion_tokens=2, finish_reason="length"),
        None,
        Reason.OK,
    ),
    ("image consumed", "multimodal", Reply(text="a", prompt_tokens=30), 14, Reason.OK),
    (
        "image consumed, special token",
        "multimodal",
        Reply(text="", prompt_tokens=30, completion_tokens=1),
        14,
        Reason.OK,
    ),
    # Zero generated tokens fails every kind, whatever else the reply says.
    (
        "multimodal zero tokens",
        "multimodal",
        Reply(text="", prompt_tokens=30, completion_tokens=0),
        14,
        Reason.EMPTY,
    ),
    ("multimodal nothing", "multimodal", Reply(text="", prompt_tokens=30), 14, Reason.EMPTY),
    ("text zero tokens", "text", Reply(text="ok", completion_tokens=0), None, Reason.EMPTY),
    (
        "structured zero tokens",
        "structured",
        Reply(text='"ok-abc12345"', completion_tokens=0),
        None,
        Reason.EMPTY,
    ),
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
