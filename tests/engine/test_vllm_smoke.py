"""The real-vLLM plumbing: the session server answers every canary kind, each chaos
plugin fault hangs its path silently and clears at run time, and signals reach
the right processes.

Absence of progress is asserted with short client timeouts (a healthy request
on this model takes well under a second); recovery is polled with deadlines.
"""

from __future__ import annotations

import base64
import io
import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import psutil
import pytest
from PIL import Image

from tests.engine.session import EngineServer

pytestmark = pytest.mark.engine

HUNG = 2.0  # a request still unanswered after this long is stuck
RECOVER = 60.0  # generous deadline for recovery on a shared two-core machine


@pytest.fixture
def client(engine: EngineServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=engine.base_url, timeout=RECOVER) as http:
        yield http


def _chat(engine: EngineServer, content: Any = "Say hello.", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": engine.model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 4,
    }
    body.update(extra)
    return body


def _structured(engine: EngineServer) -> tuple[dict[str, Any], str]:
    """A JSON-schema request whose only valid reply is a fresh nonce (new grammar each time)."""
    nonce = "ok-" + uuid.uuid4().hex[:8]
    schema = {"type": "string", "enum": [nonce]}
    body = _chat(
        engine,
        max_tokens=32,
        response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
    )
    return body, nonce


def _image(engine: EngineServer) -> dict[str, Any]:
    """An image request with fresh pixels, so vLLM's multimodal cache cannot answer it."""
    image = Image.new("RGB", (32, 32), (30, 120, 200))
    seed = uuid.uuid4().int
    for i in range(4):
        image.putpixel((i, 0), ((seed >> (8 * i)) & 255, 0, 0))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    content = [
        {"type": "text", "text": "Describe the image."},
        {"type": "image_url", "image_url": {"url": url}},
    ]
    return _chat(engine, content)


def _hangs(client: httpx.Client, body: dict[str, Any]) -> bool:
    try:
        client.post("/v1/chat/completions", json=body, timeout=HUNG)
    except httpx.TimeoutException:
        return True
    return False


def _eventually_ok(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/chat/completions", json=body, timeout=RECOVER)
    assert response.status_code == 200, response.text
    reply: dict[str, Any] = response.json()
    return reply


def _assert_silent_and_alive(engine: EngineServer, client: httpx.Client, log_mark: int) -> None:
    """/health 200, every vLLM process running, and nothing new in the log but access lines."""
    assert client.get("/health", timeout=10).status_code == 200
    for process in (psutil.Process(engine.api_pid), engine.engine_core(), engine.worker()):
        assert process.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_STOPPED), process
    new = engine.log_path.read_bytes()[log_mark:].decode(errors="replace").splitlines()
    noisy = [line for line in new if '" 200' not in line and "HTTP/1.1" not in line]
    noisy = [
        line
        for line in noisy
        if "Traceback" in line or "ERROR" in line or "WARNING" in line or "sentinel" in line
    ]
    assert not noisy, noisy


def _log_mark(engine: EngineServer) -> int:
    return engine.log_path.stat().st_size


# -- the three canary kinds -------------------------------------------------------------


def test_answers_text_structured_and_image(engine: EngineServer, client: httpx.Client) -> None:
    text = _eventually_ok(client, _chat(engine, priority=-100))
    assert text["choices"][0]["finish_reason"] in ("stop", "length")

    body, nonce = _structured(engine)
    structured = _eventually_ok(client, body)
    assert json.loads(structured["choices"][0]["message"]["content"]) == nonce
    assert structured["choices"][0]["finish_reason"] == "stop"

    image = _eventually_ok(client, _image(engine))
    plain = _eventually_ok(client, _chat(engine, "Describe the image."))
    assert image["usage"]["prompt_tokens"] > plain["usage"]["prompt_tokens"]


def test_processes_are_titled(engine: EngineServer) -> None:
    assert engine.engine_core().ppid() == engine.api_pid
    assert engine.worker().ppid() == engine.engine_core().pid


# -- plugin faults --------------------------------------------------------------------------


def test_engine_hang_blocks_every_request_until_cleared(
    engine: EngineServer, client: httpx.Client
) -> None:
    mark = _log_mark(engine)
    engine.faults.set("engine_hang")
    assert _hangs(client, _chat(engine))
    assert _hangs(client, _chat(engine, priority=-100))
    _assert_silent_and_alive(engine, client, mark)
    engine.faults.clear("engine_hang")
    _eventually_ok(client, _chat(engine))


def test_structured_hang_blocks_only_structured_requests(
    engine: EngineServer, client: httpx.Client
) -> None:
    mark = _log_mark(engine)
    engine.faults.set("structured_hang")
    body, _ = _structured(engine)
    assert _hangs(client, body)
    client.post("/v1/chat/completions", json=_chat(engine), timeout=HUNG).raise_for_status()
    client.post("/v1/chat/completions", json=_image(engine), timeout=HUNG).raise_for_status()
    _assert_silent_and_alive(engine, client, mark)
    engine.faults.clear("structured_hang")
    body, nonce = _structured(engine)
    reply = _eventually_ok(client, body)
    assert json.loads(reply["choices"][0]["message"]["content"]) == nonce


def test_multimodal_hang_blocks_only_image_requests(
    engine: EngineServer, client: httpx.Client
) -> None:
    mark = _log_mark(engine)
    engine.faults.set("multimodal_hang")
    assert _hangs(client, _image(engine))
    client.post("/v1/chat/completions", json=_chat(engine), timeout=HUNG).raise_for_status()
    body, _ = _structured(engine)
    client.post("/v1/chat/completions", json=body, timeout=HUNG).raise_for_status()
    _assert_silent_and_alive(engine, client, mark)
    engine.faults.clear("multimodal_hang")
    _eventually_ok(client, _image(engine))


@dataclass
class _StreamReader:
    """Reads one SSE stream on a thread, recording each ``data:`` payload."""

    events: list[str] = field(default_factory=list)
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def run(self, client: httpx.Client, body: dict[str, Any]) -> threading.Thread:
        def read() -> None:
            try:
                with client.stream("POST", "/v1/chat/completions", json=body) as response:
                    for line in response.iter_lines():
                        if line.startswith("data: "):
                            self.events.append(line[len("data: ") :])
            except BaseException as error:  # reported to the test thread
                self.error = error
            finally:
                self.done.set()

        thread = threading.Thread(target=read, daemon=True)
        thread.start()
        return thread

    def tokens(self) -> int:
        count = 0
        for event in list(self.events):
            if event == "[DONE]":
                continue
            chunk = json.loads(event)
            usage = chunk.get("usage")
            if usage:
                return int(usage["completion_tokens"])
            count += sum(1 for c in chunk["choices"] if c["delta"].get("content"))
        return count


def _wait_for(predicate: Any, deadline_s: float, what: str) -> None:
    deadline = time.monotonic() + deadline_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)  # polling a condition with a deadline


def test_stream_stall_stops_a_stream_mid_way_and_resumes(
    engine: EngineServer, client: httpx.Client
) -> None:
    mark = _log_mark(engine)
    engine.faults.set("stream_stall", after=2)
    reader = _StreamReader()
    body = _chat(
        engine, stream=True, max_tokens=12, ignore_eos=True, stream_options={"include_usage": True}
    )
    thread = reader.run(client, body)
    _wait_for(lambda: len(reader.events) >= 2, RECOVER, "the first chunks")
    seen = len(reader.events)
    # the stream stays open and silent: no chunk arrives while the fault holds
    assert not reader.done.wait(HUNG)
    assert len(reader.events) == seen
    assert "[DONE]" not in reader.events
    _assert_silent_and_alive(engine, client, mark)
    engine.faults.clear("stream_stall")
    assert reader.done.wait(RECOVER), "stream did not finish after the stall cleared"
    thread.join(timeout=RECOVER)
    assert reader.error is None, reader.error
    assert reader.events[-1] == "[DONE]"
    assert reader.tokens() == 12


def test_slow_decode_slows_but_answers(engine: EngineServer, client: httpx.Client) -> None:
    body = _chat(engine, max_tokens=16, ignore_eos=True)
    started = time.monotonic()
    _eventually_ok(client, body)
    baseline = time.monotonic() - started
    engine.faults.set("slow_decode", factor=10)
    started = time.monotonic()
    reply = _eventually_ok(client, body)
    slowed = time.monotonic() - started
    assert reply["usage"]["completion_tokens"] == 16
    # 16 steps, each stretched to at least 10 x 10 ms by the plugin once it has
    # seen the fault file (polled every 0.2 s, so the first steps may be fast).
    assert slowed >= max(3 * baseline, 16 * 0.05), (slowed, baseline)
    engine.faults.clear("slow_decode")


def test_fault_with_duration_clears_itself(engine: EngineServer, client: httpx.Client) -> None:
    engine.faults.set("engine_hang", duration=3.0)
    assert _hangs(client, _chat(engine))
    _eventually_ok(client, _chat(engine))


# -- signals ----------------------------------------------------------------------------------


def test_sigstop_worker_stalls_requests_and_sigcont_resumes(
    engine: EngineServer, client: httpx.Client
) -> None:
    engine.stop_worker()
    try:
        # A signal is delivered asynchronously: the state follows within moments.
        deadline = time.monotonic() + 5
        while engine.worker().status() != psutil.STATUS_STOPPED:
            assert time.monotonic() < deadline, engine.worker().status()
            time.sleep(0.05)
        assert client.get("/health", timeout=10).status_code == 200
        assert _hangs(client, _chat(engine))
    finally:
        engine.resume_worker()
    _eventually_ok(client, _chat(engine))


def test_sigstop_engine_core_stalls_requests_and_sigcont_resumes(
    engine: EngineServer, client: httpx.Client
) -> None:
    engine.stop_engine_core()
    try:
        assert client.get("/health", timeout=10).status_code == 200
        assert _hangs(client, _chat(engine))
    finally:
        engine.resume_engine_core()
    _eventually_ok(client, _chat(engine))


def test_sigkill_engine_core_turns_health_503_or_exits(
    engine: EngineServer, client: httpx.Client
) -> None:
    """Last in this module: it costs a server restart."""
    engine.kill_engine_core()

    def unhealthy() -> bool:
        if not engine.alive():
            return True
        try:
            return client.get("/health", timeout=2).status_code == 503
        except httpx.TransportError:
            return True

    _wait_for(unhealthy, 30.0, "/health 503 or the API server to exit")
    engine.restart()  # on the same port
    with httpx.Client(base_url=engine.base_url, timeout=RECOVER) as fresh:
        _eventually_ok(fresh, _chat(engine))
