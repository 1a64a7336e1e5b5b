"""The simulator's legitimate-stall states, as vLLM 0.32 shows them, seen from a plain client.

Each state holds requests while nothing is broken: a long chunked prefill,
sleep mode, a paused scheduler, an RL weight update, a compile step, a slow
image queue; plus a ``/metrics`` behind a proxy's 401 and a reasoning model.
The tests check what each state shows on ``/metrics``, on vLLM's dev routes
and in status codes, and that requests go through once it ends.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import httpx
import jsonschema
import psutil
import pytest
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families

from sentinel_sim.control import ControlError, SimControl
from sentinel_sim.launch import SimProcess

SCHEMA = {
    "type": "object",
    "properties": {"status": {"type": "string", "enum": ["ok-5150"]}},
    "required": ["status"],
}
COMPILERS = ("ptxas", "nvcc", "cc1plus", "ninja")
WORK = (
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
    "vllm:iteration_tokens_total_count",
    "vllm:time_to_first_token_seconds_count",
)
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")


# -- helpers -------------------------------------------------------------------------------


def _metric(text: str, name: str, **labels: str) -> float:
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def _has(text: str, name: str) -> bool:
    return any(
        s.name == name for family in text_string_to_metric_families(text) for s in family.samples
    )


def _values(text: str, names: tuple[str, ...]) -> dict[str, float]:
    return {name: _metric(text, name) for name in names}


def _sleep_state(text: str) -> dict[str, float]:
    return {
        state: _metric(text, "vllm:engine_sleep_state", sleep_state=state)
        for state in ("awake", "weights_offloaded", "discard_all")
    }


async def _scrape(client: httpx.AsyncClient) -> str:
    response = await client.get("/metrics")
    assert response.status_code == 200, response.text
    return response.text


async def _poll(check: Callable[[], Awaitable[bool]], what: str, deadline_s: float = 10.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)  # polling with a deadline


async def _metric_reaches(
    client: httpx.AsyncClient, name: str, value: float, deadline_s: float = 10.0, **labels: str
) -> str:
    seen: list[str] = []

    async def reached() -> bool:
        seen[:] = [await _scrape(client)]
        return _metric(seen[0], name, **labels) == value

    await _poll(reached, f"{name}{labels or ''} == {value}", deadline_s)
    return seen[0]


def _chat(content: Any = "hello", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": content}], "max_tokens": 3}
    body.update(extra)
    return body


def _structured(**extra: Any) -> dict[str, Any]:
    fmt = {"type": "json_schema", "json_schema": {"name": "t", "schema": SCHEMA}}
    return _chat(response_format=fmt, **extra)


def _image_chat(size: int = 28) -> dict[str, Any]:
    buffer = io.BytesIO()
    Image.new("RGB", (size, size), (1, 2, 3)).save(buffer, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    content = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": url}}]
    return _chat(content)


async def _chat_ok(client: httpx.AsyncClient, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
    response = await client.post("/v1/chat/completions", json=body, **kw)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


async def _still_pending(task: asyncio.Future[Any], seconds: float = 0.5) -> bool:
    """True when ``task`` has not finished within ``seconds`` (a bounded wait, not a sleep)."""
    done, _ = await asyncio.wait({task}, timeout=seconds)
    return not done


async def _stream_first_token(
    client: httpx.AsyncClient, body: dict[str, Any]
) -> tuple[asyncio.Task[list[str]], asyncio.Event]:
    """Start a streamed chat; returns (task collecting its data lines, set at the 1st token)."""
    first = asyncio.Event()

    async def run() -> list[str]:
        lines: list[str] = []
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    lines.append(line[6:])
                    if line != "data: [DONE]" and json.loads(line[6:])["choices"]:
                        delta = json.loads(line[6:])["choices"][0]["delta"]
                        if delta.get("content"):
                            first.set()
        return lines

    task = asyncio.create_task(run())
    await asyncio.wait_for(first.wait(), 10)
    return task, first


# -- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    """A dev-mode simulator, dev mode switched on through the environment as vLLM reads it."""
    with SimProcess(decode_tps=100, max_num_seqs=8, env={"VLLM_SERVER_DEV_MODE": "1"}) as process:
        yield process


@pytest.fixture
def control(sim: SimProcess) -> Iterator[SimControl]:
    with SimControl(sim.control_url) as client:
        client.clear_all()
        yield client
        client.clear_all()


@pytest.fixture
async def client(sim: SimProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=sim.base_url, timeout=30) as http:
        yield http


# -- long prefill ----------------------------------------------------------------------------


async def test_long_prefill_holds_the_priority_canary_with_only_gauges_moving() -> None:
    # 1000-token chunks at 5000 tokens/s: each step lasts 0.2 s, 6 steps of prefill.
    async with (
        SimProcess(
            scheduling_policy="priority",
            max_num_batched_tokens=1000,
            prefill_tps=5000,
            decode_tps=100,
        ) as sim,
        httpx.AsyncClient(base_url=sim.base_url, timeout=30) as client,
    ):
        before = await _scrape(client)
        sim.control.set_fault("long_prefill", tokens=6000, max_tokens=4)
        # Once its first chunk ran it is the running request (a canary arriving earlier,
        # at priority -100, would be admitted first: the queue is ordered, not the batch).
        await _metric_reaches(client, "vllm:num_requests_running", 1)
        started = time.monotonic()
        canary = asyncio.create_task(_chat_ok(client, _chat(max_tokens=1, priority=-100)))
        kv_seen: list[float] = []
        work_during: list[dict[str, float]] = []

        async def prefill_done() -> bool:
            text = await _scrape(client)
            if _metric(text, "vllm:time_to_first_token_seconds_count") > 0:
                return True
            kv = _metric(text, "vllm:kv_cache_usage_perc")
            if kv > 0:  # from the first chunk on: the long request runs, the canary waits
                assert _metric(text, "vllm:num_requests_running") == 1
                assert _metric(text, "vllm:num_requests_waiting") in (0, 1)
                if not kv_seen or kv != kv_seen[-1]:
                    kv_seen.append(kv)
            work_during.append(_values(text, WORK))
            return False

        await _poll(prefill_done, "the long prompt's first token")
        assert kv_seen == sorted(kv_seen), "KV usage only rises while prefilling"
        assert len(kv_seen) >= 3, f"KV usage rose in too few chunks: {kv_seen}"
        assert all(w == _values(before, WORK) for w in work_during), "a counter moved"
        reply = await asyncio.wait_for(canary, 10)
        assert time.monotonic() - started >= 0.7  # held behind the last 5 chunks, about 1 s
        assert reply["usage"]["completion_tokens"] == 1
        text = await _metric_reaches(client, "vllm:num_requests_running", 0)
        # the long request is a real one: it counts, prompt and all, when it finishes
        assert _metric(text, "vllm:request_success_total", finished_reason="length") == 2
        assert _metric(text, "vllm:prompt_tokens_total") >= 6000


def test_long_prefill_must_fit_in_the_kv_cache(control: SimControl) -> None:
    with pytest.raises(ControlError, match="kv-cache-tokens"):
        control.set_fault("long_prefill", tokens=200000)  # the default cache holds 65536
    assert control.faults() == []


async def test_clearing_long_prefill_aborts_its_request(
    client: httpx.AsyncClient, control: SimControl, sim: SimProcess
) -> None:
    control.set_fault("long_prefill", tokens=60000, prefill_tps=1000, chunk=500)
    await _metric_reaches(client, "vllm:num_requests_running", 1)
    control.clear_fault("long_prefill")
    await _chat_ok(client, _chat(max_tokens=1))  # admitted at once: nothing left running
    await _metric_reaches(client, "vllm:kv_cache_usage_perc", 0)


# -- sleep -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("level", "state"), [(1, "weights_offloaded"), (2, "discard_all")])
async def test_sleep_fault_queues_requests_with_frozen_gauges(
    client: httpx.AsyncClient, control: SimControl, level: int, state: str
) -> None:
    assert _sleep_state(await _scrape(client)) == {
        "awake": 1,
        "weights_offloaded": 0,
        "discard_all": 0,
    }
    control.set_fault("sleep", level=level)
    asleep = _sleep_state(await _scrape(client))
    assert asleep == {"awake": 0, "weights_offloaded": 0, "discard_all": 0, state: 1}
    assert (await client.get("/is_sleeping")).json() == {"is_sleeping": True}
    assert (await client.get("/health")).status_code == 200
    frozen = _values(await _scrape(client), GAUGES + WORK)
    queued = asyncio.create_task(_chat_ok(client, _chat()))
    assert await _still_pending(queued), "a request was served while asleep"
    assert _values(await _scrape(client), GAUGES + WORK) == frozen  # no step, no stats
    control.clear_fault("sleep")
    reply = await asyncio.wait_for(queued, 10)
    assert reply["choices"][0]["finish_reason"] in ("stop", "length")
    assert _sleep_state(await _scrape(client))["awake"] == 1
    assert (await client.get("/is_sleeping")).json() == {"is_sleeping": False}


async def test_sleep_in_503_mode_refuses_generation(
    client: httpx.AsyncClient, control: SimControl
) -> None:
    control.set_fault("sleep", mode="503")
    response = await client.post("/v1/chat/completions", json=_chat())
    assert response.status_code == 503
    assert response.json()["error"]["code"] == 503
    assert (await client.get("/health")).status_code == 200
    assert (await client.get("/v1/models")).status_code == 200
    control.clear_fault("sleep")
    await _chat_ok(client, _chat())


async def test_sleep_and_wake_up_endpoints(client: httpx.AsyncClient) -> None:
    # a running request is aborted by the sleep (vLLM's default mode)
    stream, _ = await _stream_first_token(
        client, _chat(max_tokens=500, ignore_eos=True, stream=True)
    )
    response = await client.post("/sleep", params={"level": "2"})
    assert response.status_code == 200
    assert response.json() == {"status": "sleeping", "level": 2}
    lines = await asyncio.wait_for(stream, 10)
    finals = [json.loads(line)["choices"][0] for line in lines[:-1] if json.loads(line)["choices"]]
    assert finals[-1]["finish_reason"] == "abort"
    text = await _scrape(client)
    assert _sleep_state(text)["discard_all"] == 1
    assert _metric(text, "vllm:request_success_total", finished_reason="abort") >= 1
    assert (await client.get("/is_sleeping")).json() == {"is_sleeping": True}
    queued = asyncio.create_task(_chat_ok(client, _chat()))
    assert await _still_pending(queued, 0.3)
    response = await client.post("/wake_up")
    assert response.json() == {"status": "awake", "tags": None}
    await asyncio.wait_for(queued, 10)
    assert (await client.get("/is_sleeping")).json() == {"is_sleeping": False}
    bad = await client.post("/sleep", params={"level": "3"})
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "query.level"


# -- pause -----------------------------------------------------------------------------------


async def test_pause_keep_freezes_requests_and_gauges(
    client: httpx.AsyncClient, control: SimControl
) -> None:
    stream, _ = await _stream_first_token(
        client, _chat(max_tokens=200, ignore_eos=True, stream=True)
    )
    control.set_fault("pause")  # mode keep
    assert (await client.get("/is_paused")).json() == {"is_paused": True}
    assert (await client.get("/is_sleeping")).json() == {"is_sleeping": True}
    frozen_text = await _scrape(client)
    assert _sleep_state(frozen_text)["awake"] == 1  # paused is not asleep
    queued = asyncio.create_task(_chat_ok(client, _chat()))
    assert await _still_pending(queued)
    assert not stream.done()
    after = await _scrape(client)
    assert _values(after, GAUGES + WORK) == _values(frozen_text, GAUGES + WORK)
    assert _metric(after, "vllm:num_requests_running") == 1  # the last step's view
    response = await client.post("/resume")
    assert response.json() == {"status": "resumed"}
    await asyncio.wait_for(queued, 10)
    lines = await asyncio.wait_for(stream, 15)
    assert lines[-1] == "[DONE]"
    assert (await client.get("/is_paused")).json() == {"is_paused": False}


async def test_pause_abort_ends_requests_with_reason_abort(
    client: httpx.AsyncClient, control: SimControl
) -> None:
    before = _metric(await _scrape(client), "vllm:request_success_total", finished_reason="abort")
    long_body = _chat(max_tokens=500, ignore_eos=True)
    in_flight = asyncio.create_task(_chat_ok(client, long_body))
    await _metric_reaches(client, "vllm:num_requests_running", 1)
    control.set_fault("pause", mode="abort")
    reply = await asyncio.wait_for(in_flight, 10)
    assert reply["choices"][0]["finish_reason"] == "abort"
    text = await _metric_reaches(
        client, "vllm:request_success_total", before + 1, finished_reason="abort"
    )
    assert _metric(text, "vllm:num_requests_running") == 1  # gauges keep the last step
    queued = asyncio.create_task(_chat_ok(client, _chat()))
    assert await _still_pending(queued, 0.3)
    control.clear_fault("pause")
    await asyncio.wait_for(queued, 10)


async def test_pause_wait_endpoint_drains_running_requests(client: httpx.AsyncClient) -> None:
    success = "vllm:request_success_total"
    before = _metric(await _scrape(client), success, finished_reason="length")
    running = asyncio.create_task(_chat_ok(client, _chat(max_tokens=30, ignore_eos=True)))
    await _metric_reaches(client, "vllm:num_requests_running", 1)
    response = await client.post("/pause", params={"mode": "wait"})  # returns once drained
    assert response.json() == {"status": "paused"}
    assert _metric(await _scrape(client), success, finished_reason="length") == before + 1
    assert (await asyncio.wait_for(running, 5))["choices"][0]["finish_reason"] == "length"
    queued = asyncio.create_task(_chat_ok(client, _chat()))
    assert await _still_pending(queued, 0.3)
    await client.post("/wake_up")  # vLLM's wake-up resumes a paused scheduler too
    await asyncio.wait_for(queued, 10)
    bad = await client.post("/pause", params={"mode": "later"})
    assert bad.status_code == 400
    assert (await client.get("/is_paused")).json() == {"is_paused": False}


# -- weight update ---------------------------------------------------------------------------


async def test_weight_update_fault_holds_requests_with_its_gauge_at_one(
    client: httpx.AsyncClient, control: SimControl
) -> None:
    assert (await client.get("/weight_info")).json()["weight_version"] != "step-42"
    durations = "vllm:rl_weight_update_operation_duration_seconds_count"
    done_before = _metric(await _scrape(client), durations, operation="update")
    control.set_fault("weight_update", version="step-42")
    text = await _scrape(client)
    in_flight = "vllm:rl_weight_update_operations_in_flight"
    assert _metric(text, in_flight, operation="update") == 1
    queued = asyncio.create_task(_chat_ok(client, _chat()))
    query = asyncio.create_task(client.get("/is_paused"))  # answered between engine steps
    assert await _still_pending(queued)
    assert not query.done()
    control.clear_fault("weight_update")
    await asyncio.wait_for(queued, 10)
    assert (await asyncio.wait_for(query, 10)).json() == {"is_paused": False}
    text = await _scrape(client)
    assert _metric(text, in_flight, operation="update") == 0
    assert _metric(text, durations, operation="update") == done_before + 1
    assert (await client.get("/weight_info")).json() == {"weight_version": "step-42"}


async def test_weight_update_endpoints(client: httpx.AsyncClient) -> None:
    in_flight = "vllm:rl_weight_update_operations_in_flight"
    async with (
        SimProcess(dev_mode=True) as fresh,  # --dev-mode; no weight operation yet
        httpx.AsyncClient(base_url=fresh.base_url, timeout=30) as other,
    ):
        assert (await other.get("/weight_info")).json() == {"weight_version": "default"}
        assert not _has(await _scrape(other), in_flight)  # created at the first operation
    assert (await client.post("/start_weight_update")).status_code == 200
    update = asyncio.create_task(
        client.post("/update_weights", json={"update_info": {"seconds": 1.0}})
    )
    await _metric_reaches(client, in_flight, 1, operation="update")
    response = await asyncio.wait_for(update, 10)
    assert response.json() == {"message": "Weights updated"}
    assert _metric(await _scrape(client), in_flight, operation="update") == 0
    response = await client.post("/finish_weight_update", json={"weight_version": "v7"})
    assert response.status_code == 200
    assert (await client.get("/weight_info")).json() == {"weight_version": "v7"}
    assert (await client.post("/update_weights", json={})).status_code == 400


# -- compile step and spinning hangs ---------------------------------------------------------


def _compiler_children(engine: psutil.Process) -> list[psutil.Process]:
    return [c for c in engine.children() if c.name() in COMPILERS]


async def test_compile_step_runs_a_busy_compiler_child_then_reaps_it(
    client: httpx.AsyncClient, control: SimControl, sim: SimProcess
) -> None:
    engine = sim.engine_process()
    control.set_fault("compile_step", seconds=3.0, compiler="ptxas")
    request = asyncio.create_task(_chat_ok(client, _chat()))
    found: list[psutil.Process] = []

    async def compiling() -> bool:
        found[:] = _compiler_children(engine)
        return bool(found)

    await _poll(compiling, "a ptxas child of the engine")
    child = found[0]
    assert child.name() == "ptxas"
    assert os.path.basename(child.cmdline()[0]) == "ptxas"
    frozen = _values(await _scrape(client), GAUGES + WORK)
    burnt = child.cpu_times().user

    async def burning() -> bool:
        return child.cpu_times().user - burnt >= 0.1

    await _poll(burning, "the compiler child to burn CPU", 5.0)
    assert not request.done()
    assert _values(await _scrape(client), GAUGES + WORK) == frozen  # no stats mid-compile
    reply = await asyncio.wait_for(request, 10)
    assert reply["usage"]["completion_tokens"] == 3
    assert not child.is_running()  # killed and reaped: not even a zombie is left
    assert _compiler_children(engine) == []


@pytest.mark.parametrize(
    ("fault", "params"),
    [("compile_step", {"seconds": 2.0, "compiler": "none"}), ("engine_hang", {"spin": True})],
)
async def test_in_process_compile_and_spinning_hang_burn_the_engine_cpu(
    client: httpx.AsyncClient,
    control: SimControl,
    sim: SimProcess,
    fault: str,
    params: dict[str, Any],
) -> None:
    engine = sim.engine_process()
    start = engine.cpu_times().user
    control.set_fault(fault, **params)
    request = asyncio.create_task(_chat_ok(client, _chat()))

    async def burning() -> bool:
        return engine.cpu_times().user - start >= 0.3

    await _poll(burning, "the engine to burn CPU", 5.0)
    assert _compiler_children(engine) == []  # no child: the engine itself is busy
    assert not request.done()
    if fault == "engine_hang":
        control.clear_fault(fault)
    await asyncio.wait_for(request, 10)


# -- slow image, metrics 401 -----------------------------------------------------------------


async def test_slow_image_serialises_image_requests_while_text_flows(
    client: httpx.AsyncClient, control: SimControl
) -> None:
    control.set_fault("slow_image", seconds=0.6)
    started = time.monotonic()
    first = asyncio.create_task(_chat_ok(client, _image_chat()))
    second = asyncio.create_task(_chat_ok(client, _image_chat(56)))
    await _chat_ok(client, _chat())  # text does not queue behind images
    assert time.monotonic() - started < 0.6
    small, big = await asyncio.wait_for(asyncio.gather(first, second), 10)
    assert time.monotonic() - started >= 1.2  # the second waited behind the first
    assert big["usage"]["prompt_tokens"] > small["usage"]["prompt_tokens"]


async def test_metrics_401_while_serving_goes_on(
    client: httpx.AsyncClient, control: SimControl
) -> None:
    control.set_fault("metrics_401")
    response = await client.get("/metrics")
    assert response.status_code == 401
    assert "WWW-Authenticate" in response.headers
    await _chat_ok(client, _chat())
    assert (await client.get("/health")).status_code == 200
    control.clear_fault("metrics_401")
    assert (await client.get("/metrics")).status_code == 200


# -- reasoning parser; routes without dev mode -----------------------------------------------


@pytest.fixture(scope="module")
def reasoning_sim() -> Iterator[SimProcess]:
    with SimProcess(decode_tps=400, reasoning_parser="qwen3", reasoning_tokens=8) as process:
        yield process


async def test_reasoning_parser_splits_thinking_from_content(reasoning_sim: SimProcess) -> None:
    async with httpx.AsyncClient(base_url=reasoning_sim.base_url, timeout=30) as client:
        reply = await _chat_ok(client, _chat(max_tokens=40))
        message = reply["choices"][0]["message"]
        assert message["reasoning"]
        assert message["content"]
        assert reply["choices"][0]["finish_reason"] == "stop"

        # structured output: the grammar starts after thinking; a small budget ends inside it
        short = await _chat_ok(client, _structured(max_tokens=5))
        assert short["choices"][0]["message"]["content"] is None
        assert short["choices"][0]["message"]["reasoning"]
        assert short["choices"][0]["finish_reason"] == "length"
        full = await _chat_ok(client, _structured(max_tokens=64))
        jsonschema.validate(json.loads(full["choices"][0]["message"]["content"]), SCHEMA)

        # thinking switched off: schema applied from the first token
        off = _structured(max_tokens=64, chat_template_kwargs={"enable_thinking": False})
        plain = await _chat_ok(client, off)
        assert plain["choices"][0]["message"]["reasoning"] is None
        jsonschema.validate(json.loads(plain["choices"][0]["message"]["content"]), SCHEMA)

        deltas: list[dict[str, Any]] = []
        body = _chat(max_tokens=12, stream=True)
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: {"):
                    choices = json.loads(line[6:])["choices"]
                    deltas += [c["delta"] for c in choices]
        reasoning = "".join(d.get("reasoning") or "" for d in deltas)
        content = "".join(d.get("content") or "" for d in deltas)
        first_content = next(i for i, d in enumerate(deltas) if d.get("content"))
        assert reasoning
        assert content
        assert not any(d.get("reasoning") for d in deltas[first_content:])


async def test_dev_routes_exist_only_in_dev_mode(reasoning_sim: SimProcess) -> None:
    async with httpx.AsyncClient(base_url=reasoning_sim.base_url, timeout=30) as client:
        for method, path in (("POST", "/sleep"), ("GET", "/is_paused"), ("GET", "/weight_info")):
            assert (await client.request(method, path)).status_code == 404
