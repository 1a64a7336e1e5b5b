"""The simulator's OpenAI surface: structured replies, image accounting, tokens, errors, load."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import jsonschema
import pytest
from PIL import Image

from chaos.load import LoadConfig, run_load
from sentinel_sim.launch import SimProcess

SCHEMAS: list[dict[str, Any]] = [
    {"type": "string", "enum": ["ok-7f3a9c"]},
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 5},
            "age": {"type": "integer", "minimum": 18},
            "score": {"type": "number", "maximum": 0.5},
            "ok": {"type": "boolean"},
            "nothing": {"type": "null"},
            "kind": {"const": "canary"},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
        },
        "required": ["name", "age", "score", "ok", "nothing", "kind", "tags"],
        "additionalProperties": False,
    },
    {
        "$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer"}}}},
        "type": "object",
        "properties": {
            "points": {"type": "array", "items": {"$ref": "#/$defs/point"}},
            "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
            "label": {"type": ["string", "null"], "maxLength": 2},
        },
        "required": ["points", "either", "label"],
    },
]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess(decode_tps=1000, max_num_seqs=32) as process:
        yield process


@pytest.fixture
async def client(sim: SimProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=sim.base_url, timeout=30) as http:
        yield http


def _png(width: int, height: int) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (9, 9, 9)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _chat(content: Any = "hello there", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": content}], "max_tokens": 8}
    body.update(extra)
    return body


async def _post(client: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
    return await client.post("/v1/chat/completions", json=body)


@pytest.mark.parametrize("schema", SCHEMAS, ids=["enum-nonce", "object", "refs-anyof"])
@pytest.mark.parametrize("field", ["response_format", "structured_outputs"])
async def test_structured_reply_validates_against_the_schema_sent(
    client: httpx.AsyncClient, schema: dict[str, Any], field: str
) -> None:
    if field == "response_format":
        extra = {field: {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}}
    else:
        extra = {field: {"json": schema}}
    response = await _post(client, _chat(max_tokens=200, **extra))
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "stop"
    jsonschema.validate(json.loads(choice["message"]["content"]), schema)


async def test_enum_nonce_comes_back_verbatim(client: httpx.AsyncClient) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMAS[0]}}
    reply = (await _post(client, _chat(max_tokens=30, response_format=fmt))).json()
    assert reply["choices"][0]["message"]["content"] == '"ok-7f3a9c"'


async def test_json_object_and_choice(client: httpx.AsyncClient) -> None:
    reply = (
        await _post(client, _chat(max_tokens=30, response_format={"type": "json_object"}))
    ).json()
    assert isinstance(json.loads(reply["choices"][0]["message"]["content"]), dict)
    choice = {"structured_outputs": {"choice": ["alpha", "beta"]}}
    reply = (await _post(client, _chat(**choice))).json()
    assert reply["choices"][0]["message"]["content"] in ("alpha", "beta")


async def test_structured_reply_cut_by_max_tokens_is_length(client: httpx.AsyncClient) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "o", "schema": SCHEMAS[1]}}
    reply = (await _post(client, _chat(max_tokens=3, response_format=fmt))).json()
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == 3


async def test_guided_json_is_ignored(client: httpx.AsyncClient) -> None:
    reply = (await _post(client, _chat(guided_json=SCHEMAS[0]))).json()
    assert "ok-7f3a9c" not in reply["choices"][0]["message"]["content"]


async def test_invalid_schema_is_400(client: httpx.AsyncClient) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "b", "schema": {"type": 12}}}
    response = await _post(client, _chat(response_format=fmt))
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "BadRequestError"


async def test_image_tokens_grow_with_the_image(client: httpx.AsyncClient) -> None:
    def content(url: str | None) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = [{"type": "text", "text": "describe"}]
        if url is not None:
            parts.append({"type": "image_url", "image_url": {"url": url}})
        return parts

    counts = []
    for url in (None, _png(14, 14), _png(64, 48), _png(256, 256)):
        response = await _post(client, _chat(content(url)))
        assert response.status_code == 200, response.text
        counts.append(response.json()["usage"]["prompt_tokens"])
    assert counts == sorted(set(counts)), counts  # strictly increasing
    assert counts[1] - counts[0] == 2  # one 14-pixel patch plus a separator


async def test_text_only_model_refuses_images() -> None:
    async with (
        SimProcess(text_only=True) as sim,
        httpx.AsyncClient(base_url=sim.base_url, timeout=30) as http,
    ):
        parts = [{"type": "image_url", "image_url": {"url": _png(8, 8)}}]
        response = await _post(http, _chat(parts))
        assert response.status_code == 400
        assert response.json()["error"]["type"] == "BadRequestError"
        assert (await _post(http, _chat())).status_code == 200


async def test_token_accounting_and_limits(client: httpx.AsyncClient) -> None:
    reply = (await _post(client, _chat(max_completion_tokens=5, ignore_eos=True))).json()
    assert reply["usage"]["completion_tokens"] == 5
    assert reply["choices"][0]["finish_reason"] == "length"
    natural = (await _post(client, _chat(max_tokens=100))).json()
    assert natural["choices"][0]["finish_reason"] == "stop"
    assert natural["usage"]["completion_tokens"] == 16  # the default natural reply length
    for bad in ({"max_tokens": 0}, {"max_tokens": 10_000}):
        response = await _post(client, _chat(**bad))
        assert response.status_code == 400
        assert response.json()["error"]["code"] == 400


async def test_stream_content_matches_non_stream(client: httpx.AsyncClient) -> None:
    body = {"prompt": "same prompt", "max_tokens": 6, "ignore_eos": True}
    whole = (await client.post("/v1/completions", json=body)).json()["choices"][0]["text"]
    pieces = []
    async with client.stream("POST", "/v1/completions", json={**body, "stream": True}) as resp:
        async for line in resp.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                pieces += [c["text"] for c in json.loads(line[6:])["choices"]]
    assert "".join(pieces) == whole


async def test_load_generator_against_the_simulator(sim: SimProcess) -> None:
    config = LoadConfig(
        target=sim.base_url,
        concurrency=8,
        duration=1.0,
        max_tokens=4,
        stream=True,
        mix={"text": 1, "structured": 1, "multimodal": 1},
        seed=7,
    )
    summary = (await run_load(config)).summary()
    assert summary["errors"] == {}
    assert summary["completed"] > 10
    assert set(summary["by_kind"]) == {"text", "structured", "multimodal"}
    latency = summary["latency_s"]
    assert latency["p50"] <= latency["p90"] <= latency["p99"] <= latency["max"]
    rate = LoadConfig(target=sim.base_url, rate=50, duration=0.5, max_tokens=1)
    assert (await run_load(rate)).summary()["completed"] >= 10
