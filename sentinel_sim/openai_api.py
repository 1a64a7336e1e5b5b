"""The OpenAI-compatible port, shaped like vLLM 0.32's: only what vLLM serves, nothing more.

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions``,
``GET /v1/models``, ``GET /health``, ``GET /metrics``, and in dev mode vLLM's
development routes (:mod:`sentinel_sim.dev_api`). Error bodies use vLLM's
``ErrorResponse``: ``{"error": {"message", "type", "param", "code"}}`` with
``code`` the HTTP status. Streaming answers are server-sent events, one
``data: {json}`` chunk per engine step, ending with ``data: [DONE]``; usage
appears in the stream only when ``stream_options.include_usage`` is set.

Under ``--reasoning-parser`` a chat reply's thinking goes to
``message.reasoning`` (``delta.reasoning`` when streamed; the field is
``reasoning_content`` under ``--reasoning-field reasoning_content``, as before
vLLM 0.11) with ``content`` null until the answer starts; a request with
``chat_template_kwargs: {"enable_thinking": false}`` does not think.

A client that disconnects cancels its handler (aiohttp ``handler_cancellation``)
and the request is aborted in the engine, as vLLM does.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from sentinel_sim.dev_api import add_dev_routes
from sentinel_sim.elastic_ep import add_elastic_ep_routes, scaling_middleware
from sentinel_sim.fault_gates import fault_middleware
from sentinel_sim.faults import Fault
from sentinel_sim.foreign import image_refused
from sentinel_sim.logprobs import logprob_options, logprobs_json, merged, served, several_prompts
from sentinel_sim.metrics import QUEUE_FULL
from sentinel_sim.model import (
    ImageError,
    Reply,
    fixed_reply,
    image_tokens,
    model_card,
    unconstrained_reply,
)
from sentinel_sim.openai_request import (
    NO_CHAT_TEMPLATE,
    PRIORITY_HEADER,
    Prepared,
    RequestError,
    ValidationFailure,
    chat_prompt,
    completion_prompt,
    data_parallel_rank,
    error_response,
    int_field,
    remote_prefill,
)
from sentinel_sim.refusals import (
    Refusal,
    add_checkpoint_routes,
    engine_dead_text,
    refusal_of,
    refuse,
)
from sentinel_sim.server import EngineDead, Pending, SimServer
from sentinel_sim.structured import ConstraintError, constraint_of

SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}


def _preprocess_images(urls: list[str], gate: threading.Event, delay: float) -> int:
    """Runs on the single preprocessing thread; ``multimodal_hang`` holds it at the gate.

    ``delay`` (the ``slow_image`` fault) is time spent preprocessing: on this one
    thread, so each image request waits behind the earlier ones.
    """
    gate.wait()
    if delay > 0:
        time.sleep(delay)
    return sum(image_tokens(url) for url in urls)


class Refused(Exception):
    """A generation request refused on purpose (:mod:`sentinel_sim.refusals`)."""

    def __init__(self, refusal: Refusal, *, stream: bool) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal
        self.stream = stream


class OpenAIApi:
    """The handlers; one instance per server."""

    def __init__(self, server: SimServer) -> None:
        self.server = server
        self.config = server.config
        self.created = int(time.time())
        self.dead_text = engine_dead_text(server.config.release)

    # -- plain routes ----------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=503 if self.server.dead else 200)

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            body=self.server.metrics.exposition(self.config.exposition),
            headers={"Content-Type": CONTENT_TYPE_LATEST},
        )

    async def models(self, request: web.Request) -> web.Response:
        card = model_card(self.config.model, self.created, self.config.max_model_len)
        return web.json_response({"object": "list", "data": [card]})

    # -- generation ------------------------------------------------------------

    async def chat(self, request: web.Request) -> web.StreamResponse:
        async with self.server.idle.request():  # an inference request wakes an idle sleep
            return await self._generate(request, chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        async with self.server.idle.request():
            return await self._completions(request)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        bodies = await several_prompts(request)
        if bodies is not None:  # a prompt list: one choice per prompt, as vLLM answers
            gathered = [self._generate(request, chat=False, body=b) for b in bodies]
            return merged(list(await asyncio.gather(*gathered)))  # type: ignore[arg-type]
        return await self._generate(request, chat=False)

    async def _generate(
        self, request: web.Request, *, chat: bool, body: Mapping[str, Any] | None = None
    ) -> web.StreamResponse:
        arrival = time.monotonic()
        try:
            prepared = await self._prepare(request, chat=chat, body=body)
            reply = self._plan(prepared)
            natural = reply.natural_length
            if natural is not None:
                eos_at: int | None = natural
            elif prepared.ignore_eos:
                eos_at = None
            else:
                eos_at = max(reply.thinking + self.config.reply_tokens, prepared.min_tokens, 1)
            if self.server.faults.get(Fault.EMPTY_200) is not None:
                # A broken front end: 200, zero tokens, and the engine never sees it.
                pending = Pending(0, reply, prepared.prompt_tokens)
                pending.finish = "stop"
            else:
                pending = self._submit(prepared, reply, eos_at, arrival)
        except RequestError as exc:
            return error_response(
                exc.status,
                exc.message,
                param=exc.param,
                err_type="Bad Request" if isinstance(exc, ValidationFailure) else None,
            )
        except Refused as exc:  # after the HTTP 200 of a stream, as the engine core's rejection
            return await refuse(request, exc.refusal, stream=exc.stream)
        try:
            if prepared.stream:
                return await self._stream(request, pending, prepared, chat=chat)
            return await self._complete(pending, prepared, chat=chat)
        finally:
            self.server.abort(pending)  # no-op unless the client left before the end

    def _submit(
        self, prepared: Prepared, reply: Reply, eos_at: int | None, arrival: float
    ) -> Pending:
        cap = self.config.max_num_queued_reqs
        if cap is not None and len(self.server.pending) + 1 > cap:
            # vLLM's admission control (AsyncLLM before the engine): every
            # unfinished request counts, whatever its priority.
            self.server.metrics.admission_rejections.labels(
                self.config.model, "max_num_queued_reqs"
            ).inc()
            raise RequestError(503, QUEUE_FULL)
        try:
            return self.server.submit(
                reply,
                prompt_tokens=prepared.prompt_tokens,
                max_tokens=prepared.max_tokens,
                eos_at=eos_at,
                priority=prepared.priority,
                arrival=arrival,
                structured=prepared.constraint is not None,
                engine=prepared.engine,
                remote=prepared.remote,
            )
        except EngineDead:
            raise RequestError(500, self.dead_text) from None

    async def _prepare(
        self, request: web.Request, *, chat: bool, body: Mapping[str, Any] | None = None
    ) -> Prepared:
        if body is None:
            try:
                body = json.loads(await request.read())
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise RequestError(400, f"Invalid JSON body: {exc}") from None
        if not isinstance(body, Mapping):
            raise RequestError(400, "request body must be a JSON object")
        model = body.get("model")
        if model is not None and model != self.config.model:
            raise RequestError(404, f"The model `{model}` does not exist.")
        status = self.server.should_fail_5xx()
        if status is not None:
            raise RequestError(status, "Injected server error (error_5xx fault).")
        if self.server.dead:
            raise RequestError(500, self.dead_text)
        if self.server.sleep_refuses():
            raise RequestError(503, "The model is sleeping. Wake it up with POST /wake_up.")
        refusal = refusal_of(self.server, chat=chat)
        if refusal is not None:
            raise Refused(refusal, stream=body.get("stream") is True)
        if chat:
            text, prompt_tokens, images = chat_prompt(body)
        else:
            (text, prompt_tokens), images = completion_prompt(body), []
        if images:
            if self.config.text_only:
                raise image_refused(self.config)  # in vLLM's words, or another server's
            loop = asyncio.get_running_loop()
            try:
                prompt_tokens += await loop.run_in_executor(
                    self.server.mm_executor,
                    _preprocess_images,
                    images,
                    self.server.mm_gate,
                    self.server.image_delay(),
                )
            except ImageError as exc:
                raise RequestError(400, f"Failed to load image: {exc}") from None
            self.server.metrics.images_preprocessed(len(images))
        if chat and self.config.no_chat_template:
            # After the messages (and their images) are parsed, as vLLM renders them.
            raise RequestError(400, NO_CHAT_TEMPLATE)
        try:
            constraint = constraint_of(body)
        except ConstraintError as exc:
            raise RequestError(400, str(exc)) from None
        limit = self.config.max_model_len
        if prompt_tokens >= limit:
            raise RequestError(
                400,
                f"This model's maximum context length is {limit} tokens. However, your request "
                f"has {prompt_tokens} input tokens. Please reduce the length of the input "
                "messages.",
            )
        max_tokens = int_field(body, "max_completion_tokens", None)
        if max_tokens is None:
            max_tokens = int_field(body, "max_tokens", None)
        if max_tokens is None:
            max_tokens = limit - prompt_tokens
        if max_tokens < 1:
            raise RequestError(400, f"max_tokens must be at least 1, got {max_tokens}.")
        if prompt_tokens + max_tokens > limit:
            raise RequestError(
                400,
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, "
                f"{max_tokens} in the completion). Please reduce the length of the messages or "
                "completion.",
            )
        header = request.headers.get(PRIORITY_HEADER)
        if header is not None:
            try:
                priority = int(header)
            except ValueError:
                raise RequestError(400, f"{PRIORITY_HEADER} must be an integer") from None
        else:
            priority = int_field(body, "priority", 0) or 0
        if self.config.scheduling_policy == "fcfs":
            priority = 0  # accepted and silently ignored, as vLLM does
        options = body.get("stream_options")
        options = options if isinstance(options, Mapping) else {}
        thinking = 0
        if chat and self.config.reasoning_parser:
            kwargs = body.get("chat_template_kwargs")
            disabled = isinstance(kwargs, Mapping) and kwargs.get("enable_thinking") is False
            disabled = disabled and not self.config.thinking_ignores_template
            thinking = 0 if disabled else self.config.reasoning_tokens
        return Prepared(
            prompt_text=text,
            prompt_tokens=prompt_tokens,
            image_urls=images,
            constraint=constraint,
            max_tokens=max_tokens,
            min_tokens=int_field(body, "min_tokens", 0) or 0,
            ignore_eos=bool(body.get("ignore_eos", False)),
            priority=priority,
            stream=bool(body.get("stream", False)),
            include_usage=bool(options.get("include_usage", False)),
            continuous_usage=bool(options.get("continuous_usage_stats", False)),
            engine=data_parallel_rank(request.headers, self.config.data_parallel_size),
            thinking=thinking,
            logprobs=logprob_options(body, self.server),
            remote=remote_prefill(body),
        )

    def _plan(self, prepared: Prepared) -> Reply:
        constraint = prepared.constraint
        thinking = prepared.thinking
        if constraint is None:
            return served(unconstrained_reply(prepared.prompt_text, thinking), self.server)
        # The grammar applies once reasoning has ended: the thinking is free text.
        if self.server.garbage_mode() == "schema_break":
            return fixed_reply(constraint.broken_reply(), thinking)
        return fixed_reply(constraint.reply(), thinking)

    def _message_parts(self, pending: Pending, start: int) -> tuple[str | None, str | None]:
        """(reasoning, content) of tokens ``start..generated`` as vLLM's parser splits them."""
        if not self.config.reasoning_parser:
            return None, pending.reply.text(start, pending.generated)
        return pending.reply.split(start, pending.generated)

    @staticmethod
    def _usage(pending: Pending) -> dict[str, Any]:
        return {
            "prompt_tokens": pending.prompt_tokens,
            "total_tokens": pending.prompt_tokens + pending.generated,
            "completion_tokens": pending.generated,
            "prompt_tokens_details": None,
        }

    async def _complete(
        self, pending: Pending, prepared: Prepared, *, chat: bool
    ) -> web.StreamResponse:
        try:
            while not pending.done:
                await pending.wait_update()
        except EngineDead:
            return error_response(500, self.dead_text)
        text = pending.reply.text(0, pending.generated)
        reasoning, content = self._message_parts(pending, 0)
        if self.server.garbage_mode() == "invalid_json":
            broken = '{"id": "chatcmpl-garbage", "object": "chat.completion", "choices": [{"mess'
            return web.Response(text=broken, content_type="application/json")
        created = int(time.time())
        if chat:
            body: dict[str, Any] = {
                "id": "chatcmpl-" + uuid.uuid4().hex,
                "object": "chat.completion",
                "created": created,
                "model": self.config.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": content,
                            "refusal": None,
                            "annotations": None,
                            "audio": None,
                            "function_call": None,
                            self.config.reasoning_field: reasoning,
                        },
                        "logprobs": logprobs_json(
                            prepared.logprobs, pending.reply, pending.generated, chat=True
                        ),
                        "finish_reason": pending.finish,
                        "stop_reason": None,
                    }
                ],
                "service_tier": None,
                "system_fingerprint": None,
                "usage": self._usage(pending),
                "prompt_logprobs": None,
                "kv_transfer_params": None,
            }
        else:
            body = {
                "id": "cmpl-" + uuid.uuid4().hex,
                "object": "text_completion",
                "created": created,
                "model": self.config.model,
                "choices": [
                    {
                        "index": 0,
                        "text": text,
                        "logprobs": logprobs_json(
                            prepared.logprobs, pending.reply, pending.generated, chat=False
                        ),
                        "finish_reason": pending.finish,
                        "stop_reason": None,
                        "prompt_logprobs": None,
                    }
                ],
                "usage": self._usage(pending),
                "kv_transfer_params": None,
            }
        return web.json_response(body)

    async def _stream(
        self, request: web.Request, pending: Pending, prepared: Prepared, *, chat: bool
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        ident = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"
        model = self.config.model

        async def send(payload: dict[str, Any]) -> None:
            if self.server.garbage_mode() == "invalid_json":
                data = json.dumps(payload)[: -max(2, len(json.dumps(payload)) // 3)]
            else:
                data = json.dumps(payload)
            await response.write(b"data: " + data.encode() + b"\n\n")

        def chunk(choice: dict[str, Any] | None) -> dict[str, Any]:
            payload: dict[str, Any] = {
                "id": ident,
                "object": obj,
                "created": created,
                "model": model,
                "choices": [] if choice is None else [choice],
            }
            if prepared.include_usage and prepared.continuous_usage:
                payload["usage"] = self._usage(pending)
            return payload

        if chat:
            await send(
                chunk(
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                )
            )
        sent = 0
        try:
            while True:
                if pending.generated > sent or pending.finish is not None:
                    choice: dict[str, Any]
                    if chat:
                        reasoning, content = self._message_parts(pending, sent)
                        delta: dict[str, Any] = {}
                        if reasoning is not None:
                            delta[self.config.reasoning_field] = reasoning
                        if content is not None or reasoning is None:
                            delta["content"] = content or ""
                        choice = {"index": 0, "delta": delta, "logprobs": None}
                    else:
                        text = pending.reply.text(sent, pending.generated)
                        choice = {"index": 0, "text": text, "logprobs": None}
                    sent = pending.generated
                    choice["finish_reason"] = pending.finish
                    if pending.finish is not None or not chat:
                        choice["stop_reason"] = None
                    await send(chunk(choice))
                    if pending.finish is not None:
                        break
                await pending.wait_update()
        except EngineDead:
            error = {"error": {"message": self.dead_text, "type": "InternalServerError",
                               "param": None, "code": 500}}  # fmt: skip
            await response.write(b"data: " + json.dumps(error).encode() + b"\n\n")
        else:
            if prepared.include_usage:
                payload = chunk(None)
                payload["usage"] = self._usage(pending)
                await send(payload)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def build_openai_app(server: SimServer) -> web.Application:
    api = OpenAIApi(server)

    middlewares = [scaling_middleware(server), fault_middleware(server)]
    app = web.Application(middlewares=middlewares, client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", api.chat)
    if server.config.completions:
        app.router.add_post("/v1/completions", api.completions)
    app.router.add_get("/v1/models", api.models)
    app.router.add_get("/health", api.health)
    app.router.add_get("/metrics", api.metrics)
    add_elastic_ep_routes(app, server)
    if server.config.release == "0.34":
        add_checkpoint_routes(app, server)
    if server.config.dev_mode:
        add_dev_routes(app, server)
    return app
