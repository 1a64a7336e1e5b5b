"""Deliberate refusals as each release's front end answers them, and 0.34's checkpoint routes.

vLLM 0.33 made ``POST /pause`` in ``abort`` or ``wait`` mode reject each new
request inside the engine core (``_reject_add_while_paused``) instead of
queueing it: a plain request gets 503 "Generation is paused. Please retry
after it resumes." (type ``ServiceUnavailableError``); a streamed one has
already had its HTTP 200, so it gets the error as an SSE event with code 503
(type ``InternalServerError`` on chat, ``ServiceUnavailableError`` on
completions) and ``[DONE]``. ``keep`` mode and sleep still queue, as does
every pause under ``--release 0.32``. 0.34's ``/checkpoint/prepare`` pauses
the same way, and ``--checkpoint-prepare-on-startup`` starts so: only ``POST
/checkpoint/restore`` ends it, and ``GET /checkpoint/status`` answers 503
``{"state": "running"}`` in normal operation, 200 ``{"state": "prepared"}``
while prepared (``vllm/entrypoints/serve/checkpoint/api_router.py``). The
``refuse`` fault refuses in any words, streamed the same way. 0.33 also
changed the engine-death 500's text (:func:`engine_dead_text`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from sentinel_sim.faults import Fault, FaultSpec
from sentinel_sim.openai_request import error_response
from sentinel_sim.server import SimServer

PAUSED = "Generation is paused. Please retry after it resumes."
ENGINE_DEAD_0_32 = "EngineCore encountered an issue."
ENGINE_DEAD_0_33 = "The server had an error while processing your request."
SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
REJECTING_MODES = ("abort", "wait")


@dataclass(frozen=True, slots=True)
class Refusal:
    """How a request is refused: its status, message, and whether a stream gets it as an event."""

    status: int
    message: str
    streamed: bool = True  # a streamed request gets HTTP 200, then the error event
    stream_type: str | None = None  # the event's ``type`` (None: as the plain answer's)
    body_type: str | None = None  # the plain answer's ``type`` (None: from the status)


def engine_dead_text(release: str) -> str:
    """The EngineDeadError message a release answers with (0.33: ``CLIENT_MESSAGE``)."""
    return ENGINE_DEAD_0_32 if release == "0.32" else ENGINE_DEAD_0_33


def _rejects(server: SimServer) -> bool:
    entry = server.faults.get(Fault.PAUSE)
    if entry is None:
        return False
    if entry.params.get("checkpoint"):
        return True
    return server.config.release != "0.32" and entry.params["mode"] in REJECTING_MODES


def refusal_of(server: SimServer, *, chat: bool) -> Refusal | None:
    """The refusal a generation request gets now (None: it goes to the engine)."""
    entry = server.faults.get(Fault.REFUSE)
    if entry is not None:
        return Refusal(
            int(entry.params["status"]),
            str(entry.params["message"]),
            streamed=entry.params["stream"] == "event",
        )
    if _rejects(server):
        kind = "InternalServerError" if chat else "ServiceUnavailableError"
        return Refusal(503, PAUSED, stream_type=kind, body_type="ServiceUnavailableError")
    return None


async def refuse(request: web.Request, refusal: Refusal, *, stream: bool) -> web.StreamResponse:
    """Answer ``refusal``: a plain error body, or a stream's 200 with the error event in it."""
    if not (stream and refusal.streamed):
        return error_response(refusal.status, refusal.message, err_type=refusal.body_type)
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    kind = refusal.stream_type or refusal.body_type or "ServiceUnavailableError"
    error = {"message": refusal.message, "type": kind, "param": None, "code": refusal.status}
    await response.write(b"data: " + json.dumps({"error": error}).encode() + b"\n\n")
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


def checkpointed(server: SimServer) -> bool:
    entry = server.faults.get(Fault.PAUSE)
    return entry is not None and bool(entry.params.get("checkpoint"))


def add_checkpoint_routes(app: web.Application, server: SimServer) -> None:
    """0.34's ``/checkpoint/prepare|restore|status`` (not dev-gated, not under ``/v1``)."""

    async def prepare(request: web.Request) -> web.StreamResponse:
        server.set_fault(FaultSpec.build(Fault.PAUSE.value, {"mode": "abort", "checkpoint": True}))
        await server.engine_query("is_paused")
        return web.json_response({"state": "prepared"})

    async def restore(request: web.Request) -> web.StreamResponse:
        if not checkpointed(server):
            return web.json_response({"state": "running"}, status=409)
        server.clear_fault(Fault.PAUSE)
        await server.engine_query("is_paused")
        return web.json_response({"state": "running"})

    async def status(request: web.Request) -> web.StreamResponse:
        if checkpointed(server):
            return web.json_response({"state": "prepared"})
        return web.json_response({"state": "running"}, status=503)

    routes: list[tuple[str, str, Callable[[web.Request], Awaitable[web.StreamResponse]]]] = [
        ("POST", "/checkpoint/prepare", prepare),
        ("POST", "/checkpoint/restore", restore),
        ("GET", "/checkpoint/status", status),
    ]
    for method, path, handler in routes:
        app.router.add_route(method, path, handler)
