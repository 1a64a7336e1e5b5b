"""The canary runner against a mocked transport (reply shapes) and a real local server (time).

Reply shapes are checked at the httpx transport seam; deadlines, disconnects and
stalls need real sockets, so they run against an aiohttp server on 127.0.0.1:0
that records whether the client went away (vLLM aborts a request on exactly that).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import pytest
from aiohttp import web

from chaos.ports import free_port
from sentinel.canary.catalog import load_catalog
from sentinel.canary.result import Reason
from sentinel.canary.runner import CanaryRunner, ModelResolutionError
from sentinel.canary.spec import CanaryKind, CanarySpec

CATALOG = load_catalog()
TEXT = CATALOG.get("text")
# The catalog streams the path kinds; these tests judge reply contents, so they
# ask for whole replies (streaming has its own tests below).
STRUCTURED = replace(CATALOG.get("structured"), stream=False)
MULTIMODAL = replace(CATALOG.get("multimodal"), stream=False)
BASE = "http://sim.test"
KEY = "sk-secret-key-123"

Handler = Callable[[httpx.Request], httpx.Response]


def chat_reply(
    text: str | None, *, prompt_tokens: int = 10, completion_tokens: int = 2, finish: str = "stop"
) -> Any:
    return {
        "id": "c1",
        "object": "chat.completion",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def sse(*chunks: Any, done: bool = True) -> bytes:
    lines = [f"data: {json.dumps(c)}\n\n" for c in chunks]
    if done:
        lines.append("data: [DONE]\n\n")
    return "".join(lines).encode()


def delta(content: str | None = None, finish: str | None = None) -> Any:
    return {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}]}


@dataclass
class Recorder:
    """Records every request the mock transport saw, answering with ``handler``."""

    handler: Handler
    requests: list[httpx.Request] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.handler(request)

    def bodies(self) -> list[Any]:
        return [json.loads(r.content) for r in self.requests if r.method == "POST"]


async def run_mock(
    handler: Handler, spec: CanarySpec, *, api_key: str | None = None, times: int = 1
) -> tuple[list[Any], Recorder]:
    recorder = Recorder(handler)
    async with httpx.AsyncClient(transport=httpx.MockTransport(recorder)) as client:
        runner = CanaryRunner(client, BASE, api_key=api_key)
        results = [await runner.run(spec, model="m", deadline=5) for _ in range(times)]
    return results, recorder


async def test_text_ok_sends_priority_model_and_bearer_key() -> None:
    (result,), rec = await run_mock(
        lambda r: httpx.Response(200, json=chat_reply("ok")), TEXT, api_key=KEY
    )
    assert result.reason is Reason.OK, result.detail
    assert (result.kind, result.http_status, result.prompt_tokens) == (CanaryKind.TEXT, 200, 10)
    request = rec.requests[0]
    assert request.url == f"{BASE}/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    body = rec.bodies()[0]
    # the text canary streams (and asks for at least 2 tokens)
    assert (body["priority"], body["model"], body["stream"]) == (-100, "m", True)


async def test_no_authorization_header_without_a_key() -> None:
    _, rec = await run_mock(lambda r: httpx.Response(200, json=chat_reply("ok")), TEXT)
    assert "authorization" not in rec.requests[0].headers


async def test_completions_endpoint_reads_choice_text() -> None:
    spec = replace(TEXT, endpoint="/v1/completions", request={"prompt": "Say", "max_tokens": 1})
    reply = {"choices": [{"index": 0, "text": " ok", "finish_reason": "length"}], "usage": {}}
    (result,), rec = await run_mock(lambda r: httpx.Response(200, json=reply), spec)
    assert result.reason is Reason.OK, result.detail
    assert rec.requests[0].url.path == "/v1/completions"
    assert rec.bodies()[0]["prompt"] == "Say"


def server_error(status: int, message: str) -> Handler:
    body = {"error": {"message": message, "type": "BadRequestError", "param": None, "code": status}}
    return lambda r: httpx.Response(status, json=body)


SHAPES: list[tuple[str, CanarySpec, Handler, Reason]] = [
    (
        "nothing generated",
        TEXT,
        lambda r: httpx.Response(200, json=chat_reply("", completion_tokens=0)),
        Reason.EMPTY,
    ),
    (
        "null content, no tokens",
        TEXT,
        lambda r: httpx.Response(200, json=chat_reply(None, completion_tokens=0)),
        Reason.EMPTY,
    ),
    # Tokens decoded but stripped from the text (special tokens): the engine is alive.
    ("tokens but no text", TEXT, lambda r: httpx.Response(200, json=chat_reply("")), Reason.OK),
    ("not json", TEXT, lambda r: httpx.Response(200, content=b"<html>"), Reason.BAD_BODY),
    ("no choices", TEXT, lambda r: httpx.Response(200, json={"choices": []}), Reason.BAD_BODY),
    ("5xx", TEXT, server_error(500, "engine dead"), Reason.HTTP_STATUS),
    # A fast 503 with a body nobody taught sentinel: a deliberate refusal, never a failure.
    ("unknown 503", TEXT, server_error(503, "engine dead"), Reason.REFUSED),
    ("paused 503", TEXT, server_error(503, "Generation is paused. Retry."), Reason.REFUSED),
    ("plain 4xx", MULTIMODAL, server_error(400, "max_tokens too large"), Reason.HTTP_STATUS),
    (
        "not multimodal",
        MULTIMODAL,
        server_error(400, "tiny-llama is not a multimodal model"),
        Reason.UNSUPPORTED,
    ),
    (
        "old error shape",
        MULTIMODAL,
        lambda r: httpx.Response(
            400,
            json={"object": "error", "message": "m is not a multimodal model", "code": 400},
        ),
        Reason.UNSUPPORTED,
    ),
    (
        "schema broken",
        STRUCTURED,
        lambda r: httpx.Response(200, json=chat_reply('"not-the-nonce"')),
        Reason.SCHEMA,
    ),
    (
        "refused",
        TEXT,
        lambda r: (_ for _ in ()).throw(httpx.ConnectError("refused", request=r)),
        Reason.CONNECT,
    ),
    (
        "reset before a response",
        TEXT,
        lambda r: (_ for _ in ()).throw(httpx.ReadError("reset", request=r)),
        Reason.PROTOCOL,  # something listens: a failed canary, never a vanished server
    ),
]


@pytest.mark.parametrize(
    ("spec", "handler", "reason"), [pytest.param(s, h, r, id=i) for i, s, h, r in SHAPES]
)
async def test_reply_shapes_map_to_reasons(
    spec: CanarySpec, handler: Handler, reason: Reason
) -> None:
    (result,), _ = await run_mock(handler, spec, api_key=KEY)
    assert result.reason is reason, result.detail
    assert KEY not in result.detail


async def test_structured_reply_is_validated_against_the_schema_sent() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        schema = json.loads(request.content)["response_format"]["json_schema"]["schema"]
        return httpx.Response(200, json=chat_reply(json.dumps(schema["enum"][0])))

    results, rec = await run_mock(answer, STRUCTURED, times=2)
    assert [r.reason for r in results] == [Reason.OK, Reason.OK]
    enums = [b["response_format"]["json_schema"]["schema"]["enum"] for b in rec.bodies()]
    assert enums[0] != enums[1]


async def test_multimodal_baseline_is_fetched_once_and_compared() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        content = json.loads(request.content)["messages"][-1]["content"]
        with_image = isinstance(content, list)
        return httpx.Response(200, json=chat_reply("x", prompt_tokens=26 if with_image else 10))

    results, rec = await run_mock(answer, MULTIMODAL, times=3)
    assert [r.reason for r in results] == [Reason.OK] * 3
    assert [r.prompt_tokens for r in results] == [26] * 3
    with_image = [isinstance(b["messages"][-1]["content"], list) for b in rec.bodies()]
    assert with_image == [True, False, True, True]  # one baseline, cached after
    # The baseline is sentinel's own work: its usage rides on the run that sent it.
    assert [r.side_usage for r in results] == [(10, 2), None, None]


async def test_multimodal_image_dropped_is_reported() -> None:
    results, _ = await run_mock(
        lambda r: httpx.Response(200, json=chat_reply("x", prompt_tokens=10)), MULTIMODAL
    )
    assert results[0].reason is Reason.IMAGE_NOT_CONSUMED


async def test_streaming_collects_text_usage_and_ttft() -> None:
    spec = replace(TEXT, stream=True)
    body = sse(
        delta("o"),
        delta("k", finish="stop"),
        {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}},
    )

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    (result,), rec = await run_mock(answer, spec)
    assert result.reason is Reason.OK, result.detail
    assert result.stream
    assert (result.prompt_tokens, result.completion_tokens) == (7, 2)
    assert result.ttft is not None
    assert 0 <= result.ttft <= result.duration
    assert result.tokens_received == 2  # both content pieces, not the usage chunk
    assert rec.bodies()[0]["stream_options"] == {"include_usage": True}


STREAM_SHAPES: list[tuple[str, bytes, str, Reason]] = [
    ("no done", sse(delta("ok"), done=False), "text/event-stream", Reason.BAD_BODY),
    ("only done", sse(), "text/event-stream", Reason.EMPTY),
    ("not sse", b'{"choices": []}', "application/json", Reason.BAD_BODY),
    ("bad chunk", b"data: {nope\n\n", "text/event-stream", Reason.BAD_BODY),
    (
        "error chunk",
        sse({"error": {"message": "boom", "type": "InternalServerError", "code": 500}}),
        "text/event-stream",
        Reason.HTTP_STATUS,
    ),
]


@pytest.mark.parametrize(
    ("body", "content_type", "reason"),
    [pytest.param(b, c, r, id=i) for i, b, c, r in STREAM_SHAPES],
)
async def test_stream_shapes(body: bytes, content_type: str, reason: Reason) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": content_type})

    (result,), _ = await run_mock(answer, replace(TEXT, stream=True))
    assert result.reason is reason, result.detail


@pytest.mark.parametrize(
    ("handler", "reason"),
    [
        (lambda r: httpx.Response(200, json={"data": [{"id": "tiny"}, {"id": "b"}]}), None),
        (lambda r: httpx.Response(200, json={"data": []}), Reason.BAD_BODY),
        (lambda r: httpx.Response(401, json={"error": {"message": "no"}}), Reason.HTTP_STATUS),
        (
            lambda r: (_ for _ in ()).throw(httpx.ConnectError("refused", request=r)),
            Reason.CONNECT,
        ),
    ],
)
async def test_resolve_model(handler: Handler, reason: Reason | None) -> None:
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        runner = CanaryRunner(client, BASE + "/", api_key=KEY)
        if reason is None:
            assert await runner.resolve_model() == "tiny"
        else:
            with pytest.raises(ModelResolutionError) as caught:
                await runner.resolve_model()
            assert caught.value.reason is reason


# --- real sockets: deadlines, disconnects, stalls -------------------------------------


@dataclass
class StallServer:
    """An aiohttp server whose handlers stall; it records requests and client disconnects."""

    url: str
    received: asyncio.Event
    disconnected: asyncio.Event


async def wait_for(event: asyncio.Event, within: float = 5.0) -> None:
    await asyncio.wait_for(event.wait(), within)


@pytest.fixture
async def stall_server() -> AsyncIterator[StallServer]:
    received = asyncio.Event()
    disconnected = asyncio.Event()

    async def hang(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        received.set()
        try:
            if body.get("stream"):
                response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await response.prepare(request)
                await response.write(sse(delta("o"), done=False))
                await asyncio.Event().wait()  # stall mid-stream
            await asyncio.Event().wait()  # engine hang: never answer
        except asyncio.CancelledError:
            disconnected.set()
            raise
        raise AssertionError("unreachable")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", hang)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield StallServer(f"http://127.0.0.1:{port}", received, disconnected)
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("stream", [False, True], ids=["hang", "stream-stall"])
async def test_deadline_gives_timeout_and_closes_the_connection(
    stall_server: StallServer, stream: bool
) -> None:
    async with httpx.AsyncClient() as client:
        runner = CanaryRunner(client, stall_server.url)
        result = await runner.run(replace(TEXT, stream=stream), model="m", deadline=0.3)
        assert result.reason is Reason.TIMEOUT
        assert result.duration >= 0.3
        assert (result.ttft is not None) == stream  # the first delta arrived before the stall
        # Pieces are counted only when streamed: one arrived, then the stall.
        assert result.tokens_received == (1 if stream else None)
        await wait_for(stall_server.disconnected)


async def test_cancelling_the_caller_propagates_and_closes_the_connection(
    stall_server: StallServer,
) -> None:
    async with httpx.AsyncClient() as client:
        runner = CanaryRunner(client, stall_server.url)
        task = asyncio.create_task(runner.run(TEXT, model="m", deadline=30))
        await wait_for(stall_server.received)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await wait_for(stall_server.disconnected)


async def test_refused_connection_is_connect() -> None:
    port = free_port()
    async with httpx.AsyncClient() as client:
        runner = CanaryRunner(client, f"http://127.0.0.1:{port}")
        result = await runner.run(TEXT, model="m", deadline=5)
        assert result.reason is Reason.CONNECT
        with pytest.raises(ModelResolutionError) as caught:
            await runner.resolve_model(deadline=5)
        assert caught.value.reason is Reason.CONNECT
