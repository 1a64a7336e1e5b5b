"""The canary runner: one canary request over HTTP, judged, as a frozen :class:`CanaryResult`.

It owns the exchange (request, streaming, the event stream read under a byte
cap); what the reply's bytes mean and which closed :class:`Reason` every
exception maps to is :mod:`sentinel.canary.replies` (:func:`classify`), so a
failed canary never raises; transport failures are named by
:mod:`sentinel.transport`, shared with the evidence adapters. It does not own
time: the caller passes the deadline, the runner enforces it on the whole
request or stream and, when it passes, closes the connection so vLLM aborts
the request instead of finishing work nobody waits for. Cancellation of the
caller's task propagates (after the connection is closed).

With a late wait the exchange may outlive its deadline: :mod:`sentinel.canary.late`.

A canary may be aimed at one data-parallel engine: vLLM's OpenAI server pins
a request carrying ``X-data-parallel-rank: N`` to engine N (its balancer
would otherwise steer every new request away from a stuck engine). The
header is sent only when the caller names an engine, and the result records
which one.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import secrets
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import httpx_sse
import structlog
from httpx_sse._decoders import SSEDecoder, SSELineDecoder

from sentinel.canary.kinds import KINDS
from sentinel.canary.late import Adopter, outlive
from sentinel.canary.protocol import CHAT_ENDPOINT, CanaryKindDriver, CanaryRequest, Reply
from sentinel.canary.refusal import Refusal
from sentinel.canary.replies import (
    CanaryFailure,
    choice_reasoning,
    choice_text,
    classify,
    decode_json,
    int_or_none,
    parse_reply,
    status_failure,
    stream_failure,
)
from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanarySpec
from sentinel.transport import classify_transport, iter_capped, read_capped

__all__ = [
    "DP_RANK_HEADER",
    "CanaryRunner",
    "ModelResolutionError",
    "new_nonce",
]

log = structlog.get_logger(__name__)

MAX_BODY_BYTES = 1 << 20  # a canary reply is tiny; a huge one is garbage, not worth reading
# Without a caller's deadline (model resolution from a tool), one still applies:
# every read of the target has a total deadline.
DEFAULT_DEADLINE = 30.0
MAX_DETAIL = 300
MODELS_PATH = "/v1/models"
# vLLM reads it case-insensitively (``_get_data_parallel_rank``); the spelling is its own.
DP_RANK_HEADER = "X-data-parallel-rank"


class ModelResolutionError(Exception):
    """``/v1/models`` did not name a model; ``reason`` says why in the canary vocabulary."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(f"cannot resolve the served model ({reason}): {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(slots=True)
class _Progress:
    """What one exchange learned so far, kept when it fails part way."""

    started: float  # the send, on the runner's clock
    engine: int | None  # the data-parallel engine it is aimed at (None: unaimed)
    responded: bool = False  # response headers arrived
    http_status: int | None = None
    ttft: float | None = None
    tokens: int = 0  # streamed pieces of generated text received so far
    reply: Reply | None = None  # the whole reply, once it arrived
    refusal: Refusal | None = None  # the deliberate refusal it was answered with
    side_usage: tuple[int | None, int | None] | None = None  # a baseline sent: ours too


def new_nonce() -> str:
    return secrets.token_hex(4)


class CanaryRunner:
    """Sends canaries to one server through a client the daemon owns.

    The multimodal baseline (the prompt token count without the image) is
    cached per (model, baseline request), so it costs one extra small request
    per server model, not one per run.
    """

    def __init__(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        *,
        api_key: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        nonce: Callable[[], str] = new_nonce,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        self._client = client
        self._max_body = max_body_bytes
        self._base_url = base_url.rstrip("/")
        self._api_key = api_key
        self._clock = clock
        self._nonce = nonce
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._baselines: dict[tuple[str, str], int] = {}

    @property
    def base_url(self) -> str:
        return self._base_url

    def forget_baselines(self) -> None:
        """Drop cached baselines; the daemon calls it when the server restarts."""
        self._baselines.clear()

    async def resolve_model(self, *, deadline: float | None = None) -> str:
        """The first model id ``/v1/models`` lists; raises :class:`ModelResolutionError`."""
        progress = _Progress(self._clock(), None)
        try:
            async with asyncio.timeout(DEFAULT_DEADLINE if deadline is None else deadline):
                payload = await self._get_json(MODELS_PATH, progress)
        except Exception as exc:
            reason, detail = classify(exc, responded=progress.responded)
            raise ModelResolutionError(reason, self._scrub(detail)) from None
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, list) or not data:
            raise ModelResolutionError(Reason.BAD_BODY, f"{MODELS_PATH} lists no model")
        first = data[0]
        model_id = first.get("id") if isinstance(first, dict) else None
        if not isinstance(model_id, str) or not model_id:
            raise ModelResolutionError(Reason.BAD_BODY, f"{MODELS_PATH}: first entry has no id")
        return model_id

    async def run(
        self,
        spec: CanarySpec,
        *,
        model: str,
        deadline: float,
        engine: int | None = None,
        late_wait: float = 0.0,
        adopt_late: Adopter | None = None,
    ) -> CanaryResult:
        """Send one canary and judge it. Never raises for a failed canary.

        ``engine``: the data-parallel engine to aim it at (None: let the
        server choose; the header is then not sent at all). ``late_wait``
        (seconds past the send, longer than ``deadline``) with ``adopt_late``:
        at the deadline the request is offered to ``adopt_late`` as a
        :class:`~sentinel.canary.late.LateCanary` instead of being closed; the
        TIMEOUT result returned then says ``awaiting_late`` when it was taken.
        """
        progress = _Progress(self._clock(), engine)
        sent_at = asyncio.get_running_loop().time()
        if adopt_late is None or late_wait <= deadline:
            return await self._attempt(spec, model, progress, sent_at + deadline)
        return await outlive(
            self._attempt(spec, model, progress, sent_at + late_wait, late_wait),
            name=f"canary-attempt:{spec.name}",
            deadline=deadline,
            late_wait=late_wait,
            timed_out=lambda: self._timed_out(spec, progress),
            adopt=adopt_late,
        )

    async def _attempt(
        self, spec: CanarySpec, model: str, progress: _Progress, until: float, late_wait: float = 0
    ) -> CanaryResult:
        """The exchange and its judgement, bounded at ``until`` (loop time); never raises.

        ``late_wait``: the bound is a late wait's, named so when it passes.
        Cancellation propagates, after the connection is closed.
        """
        driver = KINDS[spec.kind]
        started, headers = progress.started, self._headers
        if progress.engine is not None:
            headers = {**headers, DP_RANK_HEADER: str(progress.engine)}
        try:
            sent = driver.build(spec, model=model, nonce=self._nonce())
            async with asyncio.timeout_at(until):
                reply = await self._exchange(spec, driver, sent.body, progress, started, headers)
                progress.reply = reply
                duration = self._clock() - started
                baseline = await self._baseline(sent, model, progress)
            judgement = driver.judge(sent, reply, baseline_prompt_tokens=baseline)
            reason, detail = judgement.reason, judgement.detail
        except Exception as exc:
            duration = self._clock() - started
            reason, detail = classify(exc, responded=progress.responded)
            if isinstance(exc, TimeoutError) and late_wait:
                detail = f"no answer within late_wait ({late_wait:g} s past the send)"
            if isinstance(exc, CanaryFailure):
                progress.http_status = exc.http_status or progress.http_status
                progress.refusal = exc.refusal
            if reason is Reason.PROTOCOL and classify_transport(exc) is None:
                log.warning("canary_unexpected_error", canary=spec.name, error=detail)
        return self._result(spec, progress, duration, reason, detail)

    def _timed_out(self, spec: CanarySpec, progress: _Progress) -> CanaryResult:
        """The TIMEOUT result of a canary at its deadline, with what it had learned by then."""
        reason, detail = classify(TimeoutError(), responded=progress.responded)
        return self._result(spec, progress, self._clock() - progress.started, reason, detail)

    def _result(
        self, spec: CanarySpec, progress: _Progress, duration: float, reason: Reason, detail: str
    ) -> CanaryResult:
        reply = progress.reply
        return CanaryResult(
            name=spec.name,
            kind=spec.kind,
            reason=reason,
            started=progress.started,
            duration=duration,
            detail=self._scrub(detail),
            ttft=progress.ttft,
            http_status=progress.http_status,
            prompt_tokens=reply.prompt_tokens if reply else None,
            completion_tokens=reply.completion_tokens if reply else None,
            stream=spec.stream,
            tokens_received=progress.tokens if spec.stream else None,
            engine=progress.engine,
            generations=reply.generations if reply else (),
            refusal=progress.refusal,
            side_usage=progress.side_usage,
        )

    async def _baseline(self, sent: CanaryRequest, model: str, owner: _Progress) -> int | None:
        if sent.baseline_body is None:
            return None
        key = (model, json.dumps(sent.baseline_body, sort_keys=True))
        cached = self._baselines.get(key)
        if cached is not None:
            return cached
        progress, owner.side_usage = _Progress(self._clock(), None), (None, None)  # usage unknown
        try:
            payload = await self._post_json(CHAT_ENDPOINT, sent.baseline_body, progress)
            reply = parse_reply(payload, chat=True)
            owner.side_usage = (reply.prompt_tokens, reply.completion_tokens)
        except CanaryFailure as exc:  # a refused baseline keeps its state (and its run)
            raise exc.prefixed("baseline (no image)") from None
        if reply.prompt_tokens is None:
            raise CanaryFailure(Reason.BAD_BODY, "baseline (no image) has no usage.prompt_tokens")
        self._baselines[key] = reply.prompt_tokens
        return reply.prompt_tokens

    async def _exchange(
        self,
        spec: CanarySpec,
        driver: CanaryKindDriver,
        body: Mapping[str, Any],
        progress: _Progress,
        started: float,
        headers: Mapping[str, str],
    ) -> Reply:
        chat = spec.endpoint == CHAT_ENDPOINT
        url = self._base_url + spec.endpoint
        # timeout=None: the caller's deadline is the only clock on a canary.
        async with self._client.stream(
            "POST", url, json=dict(body), headers=dict(headers), timeout=None
        ) as response:
            progress.responded = True
            progress.http_status = response.status_code
            if not response.is_success:
                raw = await self._read_capped(response)
                raise status_failure(response.status_code, raw, driver)
            # A server that answers a streamed request with one JSON body (it
            # does not stream, or a proxy buffered it) still answered: judge it.
            if not spec.stream or _is_json(response):
                return parse_reply(decode_json(await self._read_capped(response)), chat=chat)
            return await self._read_stream(response, progress, started, chat=chat)

    async def _read_stream(
        self, response: httpx.Response, progress: _Progress, started: float, *, chat: bool
    ) -> Reply:
        text: list[str] = []
        reasoning: list[str] = []  # thinking a reasoning parser split off: generated too
        usage: Mapping[str, Any] = {}
        finish_reason: str | None = None
        async for event in self._events(response):
            if event.data == "[DONE]":
                return Reply(
                    text="".join(text),
                    prompt_tokens=int_or_none(usage.get("prompt_tokens")),
                    completion_tokens=int_or_none(usage.get("completion_tokens")),
                    finish_reason=finish_reason,
                    reasoning="".join(reasoning),
                )
            if not event.data:
                continue
            chunk = decode_json(event.data.encode())
            if not isinstance(chunk, dict):
                raise CanaryFailure(Reason.BAD_BODY, "stream chunk is not a JSON object")
            if "error" in chunk:
                raise stream_failure(chunk)
            if isinstance(chunk.get("usage"), dict):
                usage = chunk["usage"]
            for choice in chunk.get("choices") or []:
                if not isinstance(choice, dict):
                    raise CanaryFailure(Reason.BAD_BODY, "stream choice is not an object")
                piece = choice_text(choice, chat=chat, delta=True)
                thought = choice_reasoning(choice, chat=chat, delta=True)
                if piece or thought:
                    if progress.ttft is None:
                        progress.ttft = self._clock() - started
                    progress.tokens += 1
                    text.append(piece)
                    reasoning.append(thought)
                if choice.get("finish_reason"):
                    finish_reason = str(choice["finish_reason"])
        raise CanaryFailure(Reason.BAD_BODY, "stream ended without [DONE]")

    async def _get_json(self, path: str, progress: _Progress) -> Any:
        return await self._json("GET", path, None, progress)

    async def _post_json(self, path: str, body: Mapping[str, Any], progress: _Progress) -> Any:
        return await self._json("POST", path, body, progress)

    async def _json(
        self, method: str, path: str, body: Mapping[str, Any] | None, progress: _Progress
    ) -> Any:
        async with self._client.stream(
            method,
            self._base_url + path,
            json=None if body is None else dict(body),
            headers=self._headers,
            timeout=None,
        ) as response:
            progress.responded = True
            progress.http_status = response.status_code
            raw = await self._read_capped(response)
            if not response.is_success:
                raise status_failure(response.status_code, raw, None)
            return decode_json(raw)

    async def _read_capped(self, response: httpx.Response) -> bytes:
        try:
            return await read_capped(response, self._max_body)
        except httpx.StreamError as exc:  # consumed or closed: a broken exchange
            raise CanaryFailure(Reason.PROTOCOL, f"{type(exc).__name__}: {exc}") from None

    async def _events(self, response: httpx.Response) -> AsyncIterator[httpx_sse.ServerSentEvent]:
        """Server-sent events of ``response``, its bytes capped like any other reply.

        httpx-sse's decoders, fed through :func:`sentinel.transport.iter_capped`,
        so an endless stream or a never-ending line costs at most the cap.
        """
        content_type = response.headers.get("content-type", "").partition(";")[0]
        if "text/event-stream" not in content_type:
            raise httpx_sse.SSEError(
                f"Expected response header Content-Type to contain 'text/event-stream', "
                f"got {content_type!r}"
            )
        lines = SSELineDecoder()
        events = SSEDecoder()
        text = codecs.getincrementaldecoder("utf-8")("strict")
        async for chunk in iter_capped(response, self._max_body):
            for line in lines.decode(text.decode(chunk)):
                event = events.decode(line.rstrip("\n"))
                if event is not None:
                    yield event
        for line in lines.flush():
            event = events.decode(line.rstrip("\n"))
            if event is not None:
                yield event

    def _scrub(self, detail: str) -> str:
        """Details end up in logs, metrics views and /status: the key must never reach them."""
        if self._api_key:
            detail = detail.replace(self._api_key, "***")
        return detail[:MAX_DETAIL]


def _is_json(response: httpx.Response) -> bool:
    content_type: str = response.headers.get("content-type", "")
    return content_type.partition(";")[0].strip().lower() == "application/json"
