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


# -- the busy-looking hang shapes and the broken shapes ----------------------

_WORK = (
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
    "vllm:iteration_tokens_total_count",
    "vllm:iteration_tokens_total_sum",
)


async def _scrape(client: httpx.AsyncClient) -> str:
    return (await client.get("/metrics")).text


def _work(text: str) -> dict[str, float]:
    """The completed-work counters: what a hung engine must leave flat."""
    return {name: _metric(text, name) for name in _WORK}


async def _gauge_at_least(client: httpx.AsyncClient, name: str, value: float, what: str) -> None:
    async def reached() -> bool:
        return _metric(await _scrape(client), name) >= value

    await _poll(reached, what)


async def _hung_request(client: httpx.AsyncClient) -> None:
    with pytest.raises(httpx.ReadTimeout):
        await client.post("/v1/chat/completions", json=_chat(), timeout=0.6)


async def test_stuck_running_hangs_with_real_requests_in_running(
    client: httpx.AsyncClient, control: SimControl
) -> None:
    control.set_fault("stuck_running", requests=2)
    await _gauge_at_least(client, "vllm:num_requests_running", 2, "2 stuck requests running")
    before = await _scrape(client)
    await _hung_request(client)
    after = await _scrape(client)
    assert _work(after) == _work(before)
    assert _metric(after, "vllm:num_requests_running") == 2
    assert (await client.get("/health")).status_code == 200
    control.clear_fault("stuck_running")
    await _ok(client, _chat())


@pytest.mark.parametrize(
    ("fault", "moving"),
    [
        ("waiting_churn", "vllm:num_requests_waiting"),
        ("preemption_churn", "vllm:num_preemptions_total"),
    ],
)
async def test_churn_moves_one_series_while_work_stays_flat(
    client: httpx.AsyncClient, control: SimControl, fault: str, moving: str
) -> None:
    control.set_fault(fault, period=0.1)
    await _gauge_at_least(client, "vllm:num_requests_running", 1, "a stuck request running")
    first = await _scrape(client)
    seen = {_metric(first, moving)}

    async def moved_twice() -> bool:
        seen.add(_metric(await _scrape(client), moving))
        return len(seen) >= 3

    await _poll(moved_twice, f"{moving} to keep changing")
    await _hung_request(client)
    assert _work(await _scrape(client)) == _work(first)
    control.clear_fault(fault)
    await _ok(client, _chat())


async def test_prefill_no_decode_counts_prompts_and_decodes_nothing(
    client: httpx.AsyncClient, control: SimControl
) -> None:
    control.set_fault("prefill_no_decode")
    before = await _scrape(client)
    await _hung_request(client)

    async def prefilled() -> bool:
        now = await _scrape(client)
        return _metric(now, "vllm:prompt_tokens_total") > _metric(
            before, "vllm:prompt_tokens_total"
        )

    await _poll(prefilled, "the prompt to be prefilled")
    after = await _scrape(client)
    assert _metric(after, "vllm:generation_tokens_total") == _metric(
        before, "vllm:generation_tokens_total"
    )
    assert _metric(after, "vllm:request_success_total") == _metric(
        before, "vllm:request_success_total"
    )
    assert _metric(after, "vllm:iteration_tokens_total_sum") > _metric(
        before, "vllm:iteration_tokens_total_sum"
    )
    control.clear_fault("prefill_no_decode")
    await _ok(client, _chat())


async def test_stall_after_first_gives_each_stream_one_token(
    client: httpx.AsyncClient, control: SimControl
) -> None:
    control.set_fault("stall_after_first")
    await _gauge_at_least(client, "vllm:num_requests_running", 1, "a stuck request running")
    body = _chat(max_tokens=10, ignore_eos=True, stream=True)
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        lines = response.aiter_lines()

        async def next_content() -> str:
            while True:
                line = await anext(lines)
                if line.startswith("data: ") and line != "data: [DONE]":
                    delta = json.loads(line[6:])["choices"][0]["delta"]
                    if delta.get("content"):
                        return str(delta["content"])

        await asyncio.wait_for(next_content(), 10)
        second = asyncio.ensure_future(next_content())
        done, _ = await asyncio.wait({second}, timeout=0.5)
        assert not done, "a second token arrived"
        second.cancel()
    control.clear_fault("stall_after_first")
    await _ok(client, _chat())


async def test_reset_all_closes_generation_without_a_response(
    client: httpx.AsyncClient, control: SimControl
) -> None:
    control.set_fault("reset_all")
    for body in (_chat(), _chat(stream=True)):
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            await client.post("/v1/chat/completions", json=body)
    assert (await client.get("/health")).status_code == 200
    assert (await client.get("/metrics")).status_code == 200
    control.clear_fault("reset_all")
    await _ok(client, _chat())


async def test_error_5xx_storm_answers_instantly(
    client: httpx.AsyncClient, control: SimControl
) -> None:
    control.set_fault("stuck_running")  # even in front of a hung engine
    control.set_fault("error_5xx", rate=1.0)
    started = time.monotonic()
    for _ in range(5):
        response = await client.post("/v1/chat/completions", json=_chat(), timeout=2.0)
        assert response.status_code == 500
    assert time.monotonic() - started < 2.0


async def test_empty_200_answers_zero_tokens_and_leaves_the_engine_alone(
    client: httpx.AsyncClient, control: SimControl
) -> None:
    async def quiet() -> bool:  # earlier tests' stuck requests finish once their fault ends
        text = await _scrape(client)
        return _metric(text, "vllm:num_requests_running") == 0

    await _poll(quiet, "an idle engine")
    control.set_fault("empty_200")
    before = await _scrape(client)
    reply = await _ok(client, _chat())
    assert reply["choices"][0]["message"]["content"] == ""
    assert reply["usage"]["completion_tokens"] == 0
    body = _chat(stream=True, stream_options={"include_usage": True})
    async with client.stream("POST", "/v1/chat/completions", json=body) as stream:
        assert stream.status_code == 200
        data = [line[6:] async for line in stream.aiter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    chunks = [json.loads(payload) for payload in data[:-1]]
    assert (
        "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == ""
    )
    assert chunks[-1]["usage"]["completion_tokens"] == 0
    assert _work(await _scrape(client)) == _work(before)


async def test_metrics_lapse_hangs_scrapes_while_serving(
    client: httpx.AsyncClient, control: SimControl
) -> None:
    control.set_fault("metrics_lapse")
    with pytest.raises(httpx.ReadTimeout):
        await client.get("/metrics", timeout=0.5)
    await _ok(client, _chat())
    assert (await client.get("/health")).status_code == 200
    control.clear_fault("metrics_lapse")
    assert (await client.get("/metrics")).status_code == 200


async def test_slow_decode_two_seconds_per_token_is_expressible(
    client: httpx.AsyncClient, control: SimControl
) -> None:
    control.set_fault("slow_decode", token_s=0.3)
    started = time.monotonic()
    reply = await _ok(client, _chat(max_tokens=3, ignore_eos=True))
    assert reply["usage"]["completion_tokens"] == 3
    assert time.monotonic() - started >= 0.85  # three steps of 0.3 s
    assert control.faults()[0]["params"]["token_s"] == 0.3


async def test_listener_closed_refuses_while_the_process_lives() -> None:
    async with SimProcess() as sim, httpx.AsyncClient(base_url=sim.base_url, timeout=2) as http:
        assert (await http.get("/health")).status_code == 200
        sim.control.set_fault("listener_closed")

        async def refused() -> bool:
            try:
                async with httpx.AsyncClient(base_url=sim.base_url, timeout=2) as fresh:
                    await fresh.get("/health")
            except httpx.ConnectError:
                return True
            return False

        await _poll(refused, "the API port to refuse connections")
        assert sim.returncode() is None
        assert sim.control.state()["engine_alive"] is True
        sim.control.clear_fault("listener_closed")
        assert await refused()  # for good: clearing does not reopen it
