"""Each fault of the simulator, switched through the control port and seen from a plain client."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import jsonschema
import pytest
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families

from sentinel_sim.control import ControlError, SimControl
from sentinel_sim.launch import SimProcess

SCHEMA = {
    "type": "object",
    "properties": {"status": {"type": "string", "enum": ["ok-1234"]}, "n": {"type": "integer"}},
    "required": ["status", "n"],
}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess(decode_tps=200, max_num_seqs=8) as process:
        yield process


@pytest.fixture
def control(sim: SimProcess) -> Iterator[SimControl]:
    with SimControl(sim.control_url) as client:
        yield client
        client.clear_all()


@pytest.fixture
async def client(sim: SimProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=sim.base_url, timeout=30) as http:
        yield http


def _chat(content: Any = "hello", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": content}], "max_tokens": 3}
    body.update(extra)
    return body


def _structured(**extra: Any) -> dict[str, Any]:
    fmt = {"type": "json_schema", "json_schema": {"name": "t", "schema": SCHEMA}}
    return _chat(max_tokens=64, response_format=fmt, **extra)


def _image_chat(size: int = 28) -> dict[str, Any]:
    buffer = io.BytesIO()
    Image.new("RGB", (size, size), (1, 2, 3)).save(buffer, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    content = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": url}}]
    return _chat(content)


def _vllm_samples(text: str) -> dict[tuple[str, str], float]:
    return {
        (s.name, json.dumps(s.labels, sort_keys=True)): s.value
        for family in text_string_to_metric_families(text)
        if family.name.startswith("vllm:")
        for s in family.samples
        if not s.name.endswith("_created")
    }


def _metric(text: str, name: str, **labels: str) -> float:
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


async def _poll(check: Any, what: str, deadline_s: float = 10.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)  # polling with a deadline


async def _ok(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


async def test_engine_hang_health_200_metrics_frozen_then_recovers(
    client: httpx.AsyncClient, control: SimControl
) -> None:
    await _ok(client, _chat())
    control.set_fault("engine_hang")
    frozen = _vllm_samples((await client.get("/metrics")).text)
    with pytest.raises(httpx.ReadTimeout):
        await client.post("/v1/chat/completions", json=_chat(), timeout=1.0)
    assert (await client.get("/health")).status_code == 200
    assert _vllm_samples((await client.get("/metrics")).text) == frozen
    control.clear_fault("engine_hang")
    await _ok(client, _chat())


async def test_fault_duration_expires_by_itself(
    client: httpx.AsyncClient, control: SimControl
) -> None:
    control.set_fault("engine_hang", duration=0.5)
    assert [f["name"] for f in control.faults()] == ["engine_hang"]
    reply = await _ok(client, _chat())  # queued behind the hang, answered after it ends
    assert reply["usage"]["completion_tokens"] == 3
    assert control.faults() == []


async def test_structured_hang_defers_structured_while_text_works(
    client: httpx.AsyncClient, control: SimControl
) -> None:
    control.set_fault("structured_hang")
    stuck = asyncio.create_task(_ok(client, _structured()))

    async def deferred() -> bool:
        text = (await client.get("/metrics")).text
        return _metric(text, "vllm:num_requests_waiting_by_reason", reason="deferred") == 1

    await _poll(deferred, "a deferred structured request")
    await _ok(client, _chat())  # text still flows
    assert not stuck.done()
    control.clear_fault("structured_hang")
    reply = await asyncio.wait_for(stuck, timeout=10)
    jsonschema.validate(json.loads(reply["choices"][0]["message"]["content"]), SCHEMA)


async def test_multimodal_hang_queues_image_requests_while_text_works(
    client: httpx.AsyncClient, control: SimControl
) -> None:
    control.set_fault("multimodal_hang")
    first = asyncio.create_task(_ok(client, _image_chat()))
    second = asyncio.create_task(_ok(client, _image_chat(56)))
    await _ok(client, _chat())  # text still flows
    done, _ = await asyncio.wait({first, second}, timeout=0.5)
    assert not done, "image requests answered while preprocessing hangs"
    control.clear_fault("multimodal_hang")
    small, big = await asyncio.wait_for(asyncio.gather(first, second), timeout=10)
    assert big["usage"]["prompt_tokens"] > small["usage"]["prompt_tokens"]


async def test_stream_stall_stops_tokens_mid_stream(
    client: httpx.AsyncClient, control: SimControl
) -> None:
    control.set_fault("stream_stall", after=2)
    body = _chat(max_tokens=10, ignore_eos=True, stream=True)
    contents: list[str] = []
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        lines = response.aiter_lines()

        async def next_content() -> str:
            while True:
                line = await anext(lines)
                if line.startswith("data: ") and line != "data: [DONE]":
                    delta = json.loads(line[6:])["choices"][0]["delta"]
                    if delta.get("content"):
                        return str(delta["content"])

        contents.append(await asyncio.wait_for(next_content(), 10))
        contents.append(await asyncio.wait_for(next_content(), 10))
        third = asyncio.ensure_future(next_content())
        done, _ = await asyncio.wait({third}, timeout=0.5)
        assert not done, "a token arrived while the stream is stalled"
        control.clear_fault("stream_stall")
        contents.append(await asyncio.wait_for(third, 10))  # and it resumes
        async for _ in lines:
            pass
    assert len(contents) == 3


async def test_slow_decode_degrades_but_progresses(
    client: httpx.AsyncClient, control: SimControl
) -> None:
    control.set_fault("slow_decode", factor=10)  # 200 -> 20 tokens/s
    start = time.monotonic()
    reply = await _ok(client, _chat(max_tokens=10, ignore_eos=True))
    elapsed = time.monotonic() - start
    assert reply["usage"]["completion_tokens"] == 10
    assert reply["choices"][0]["finish_reason"] == "length"
    assert elapsed >= 0.45  # 10 steps of 50 ms: the engine cannot be faster than its step


async def test_error_5xx_storm(client: httpx.AsyncClient, control: SimControl) -> None:
    control.set_fault("error_5xx")
    response = await client.post("/v1/chat/completions", json=_chat())
    assert response.status_code == 500
    assert response.json()["error"]["type"] == "InternalServerError"
    assert (await client.get("/health")).status_code == 200
    control.set_fault("error_5xx", rate=0.5, status=503)
    statuses = {
        (await client.post("/v1/chat/completions", json=_chat(max_tokens=1))).status_code
        for _ in range(60)
    }
    assert statuses == {200, 503}


async def test_garbage_invalid_json(client: httpx.AsyncClient, control: SimControl) -> None:
    control.set_fault("garbage", mode="invalid_json")
    response = await client.post("/v1/chat/completions", json=_chat())
    assert response.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        json.loads(response.text)
    body = _chat(stream=True)
    async with client.stream("POST", "/v1/chat/completions", json=body) as stream:
        data = [line[6:] async for line in stream.aiter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    for payload in data[:-1]:
        with pytest.raises(json.JSONDecodeError):
            json.loads(payload)


async def test_garbage_schema_break(client: httpx.AsyncClient, control: SimControl) -> None:
    control.set_fault("garbage", mode="schema_break")
    reply = await _ok(client, _structured())
    content = json.loads(reply["choices"][0]["message"]["content"])  # still JSON
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(content, SCHEMA)


async def test_blackhole_accepts_and_never_answers(
    client: httpx.AsyncClient, control: SimControl
) -> None:
    control.set_fault("blackhole")
    async with httpx.AsyncClient(base_url=str(client.base_url), timeout=0.5) as fresh:
        with pytest.raises(httpx.ReadTimeout):  # connected, then silence
            await fresh.get("/health")
        with pytest.raises(httpx.ReadTimeout):
            await fresh.post("/v1/chat/completions", json=_chat())
    control.clear_fault("blackhole")
    assert (await client.get("/health")).status_code == 200
    await _ok(client, _chat())


def test_control_rejects_unknown_faults_and_parameters(control: SimControl) -> None:
    with pytest.raises(ValueError, match="nonsense"):
        control.set_fault("nonsense")
    with pytest.raises(ControlError, match="rate"):
        control.set_fault("error_5xx", rate=2)
    with pytest.raises(ControlError, match="speed"):
        control.set_fault("slow_decode", speed=2)
    assert control.faults() == []


async def test_fault_set_at_start_with_duration() -> None:
    async with (
        SimProcess(faults=["error_5xx:rate=1,duration=1"]) as sim,
        httpx.AsyncClient(base_url=sim.base_url, timeout=30) as http,
    ):
        first = await http.post("/v1/chat/completions", json=_chat(max_tokens=1))
        assert first.status_code == 500

        async def healed() -> bool:
            response = await http.post("/v1/chat/completions", json=_chat(max_tokens=1))
            return response.status_code == 200

        await _poll(healed, "the start-up fault to expire")


async def test_exit_fault_ends_the_server() -> None:
    async with SimProcess() as sim:
        sim.control.set_fault("exit")
        assert await asyncio.to_thread(sim.wait_exit, 10) == 1
        async with httpx.AsyncClient(base_url=sim.base_url, timeout=2) as http:
            with pytest.raises(httpx.ConnectError):
                await http.get("/health")
