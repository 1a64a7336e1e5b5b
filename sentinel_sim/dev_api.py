"""vLLM's development routes on the OpenAI port, registered only in dev mode.

vLLM 0.32 registers them when ``VLLM_SERVER_DEV_MODE=1``
(``entrypoints/serve/dev/sleep/api_router.py`` and
``entrypoints/rl/online/api_router.py``); the simulator when started with
``--dev-mode`` or that variable. Each acts through the same faults the
control port sets (``sleep``, ``pause``), so a state entered one way can be
left the other way. Answers, as vLLM's:

- ``POST /sleep?level=0|1|2&mode=abort|wait|keep`` (defaults 1, abort) ->
  ``{"status": "sleeping", "level": N}``, once the engine has paused (under
  ``wait``: once its running requests are done)
- ``POST /wake_up`` (optional ``tags``) -> ``{"status": "awake", "tags": ...}``;
  it resumes the scheduler too, ending a ``/pause`` as vLLM's wake-up does
- ``GET /is_sleeping`` -> ``{"is_sleeping": bool}``: true while asleep *or paused*
- ``POST /pause?mode=abort|wait|keep`` (default abort) -> ``{"status": "paused"}``;
  under ``--release 0.33`` and later ``abort`` and ``wait`` reject new requests
  (:mod:`sentinel_sim.refusals`), ``keep`` queues them
- ``POST /resume`` -> ``{"status": "resumed"}`` (500 while a 0.34 checkpoint is
  prepared, as ``/wake_up``: only ``POST /checkpoint/restore`` ends it)
- ``GET /is_paused`` -> ``{"is_paused": bool}``
- ``POST /start_weight_update``, ``POST /update_weights`` (body
  ``{"update_info": {...}}``; the simulator reads ``update_info.seconds``, how
  long the transfer blocks the engine), ``POST /finish_weight_update`` (body
  ``{"weight_version": "..."}``, optional) -> ``{"message": ...}``, each counted
  in ``vllm:rl_weight_update_operations_in_flight{operation=...}`` while it runs
- ``GET /weight_info`` -> ``{"weight_version": "default"}`` until a version is set

The queries (``is_sleeping``, ``is_paused``, ``weight_info``) and the
operations are answered by the engine between steps, so they wait while its
loop is blocked (a hang, a compile, a weight transfer), as on vLLM. Bad
query parameters get vLLM's validation error (400, type ``Bad Request``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from sentinel_sim.faults import PAUSE_MODES, Fault, FaultSpec
from sentinel_sim.openai_request import error_response
from sentinel_sim.refusals import checkpointed
from sentinel_sim.server import EngineDead, SimServer

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _Invalid(Exception):
    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param
        self.message = message


def _query_choice(request: web.Request, name: str, choices: tuple[str, ...], default: str) -> str:
    value = request.query.get(name, default)
    if value not in choices:
        expected = ", ".join(repr(c) for c in choices)
        raise _Invalid(f"query.{name}", f"Input should be {expected} (input: {value!r})")
    return value


def _query_level(request: web.Request) -> int:
    text = request.query.get("level", "1")
    try:
        level = int(text)
    except ValueError:
        raise _Invalid(
            "query.level", f"Input should be a valid integer (input: {text!r})"
        ) from None
    if not 0 <= level <= 2:
        raise _Invalid("query.level", f"Input should be between 0 and 2 (input: {level})")
    return level


async def _body(request: web.Request) -> Mapping[str, Any]:
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise _Invalid("body", "JSON decode error") from None
    if not isinstance(value, Mapping):
        raise _Invalid("body", "Input should be a valid dictionary")
    return value


def _guarded(handler: Handler) -> Handler:
    async def run(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except _Invalid as exc:
            message = f"1 validation error:\n  {exc.param}: {exc.message}"
            return error_response(400, message, param=exc.param, err_type="Bad Request")
        except EngineDead as exc:
            return error_response(500, str(exc))

    return run


def add_dev_routes(app: web.Application, server: SimServer) -> None:
    """Register the sleep, pause and weight-update routes on the OpenAI app."""

    async def settle(mode: str) -> None:
        """Return once the engine has taken the pause in (and drained, under ``wait``)."""
        await server.engine_query("drained" if mode == "wait" else "is_paused")

    async def sleep(request: web.Request) -> web.StreamResponse:
        level = _query_level(request)
        mode = _query_choice(request, "mode", PAUSE_MODES, "abort")
        server.set_fault(FaultSpec.build(Fault.SLEEP.value, {"level": level, "pause": mode}))
        await settle(mode)
        return web.json_response({"status": "sleeping", "level": level})

    async def wake_up(request: web.Request) -> web.StreamResponse:
        tags = request.query.getall("tags", []) or None
        if checkpointed(server):
            return error_response(500, "Cannot wake up while the checkpoint state is prepared")
        server.clear_fault(Fault.SLEEP)
        server.clear_fault(Fault.PAUSE)  # vLLM's wake_up resumes the scheduler
        await server.engine_query("is_sleeping")
        return web.json_response({"status": "awake", "tags": tags})

    async def is_sleeping(request: web.Request) -> web.StreamResponse:
        answers = await server.engine_query("is_sleeping")
        return web.json_response({"is_sleeping": any(answers)})

    async def pause(request: web.Request) -> web.StreamResponse:
        mode = _query_choice(request, "mode", PAUSE_MODES, "abort")
        server.set_fault(FaultSpec.build(Fault.PAUSE.value, {"mode": mode}))
        await settle(mode)
        return web.json_response({"status": "paused"})

    async def resume(request: web.Request) -> web.StreamResponse:
        if checkpointed(server):  # 0.34: only /checkpoint/restore ends a checkpoint's pause
            return error_response(500, "Cannot resume while the checkpoint state is prepared")
        server.clear_fault(Fault.PAUSE)
        await server.engine_query("is_paused")
        return web.json_response({"status": "resumed"})

    async def is_paused(request: web.Request) -> web.StreamResponse:
        answers = await server.engine_query("is_paused")
        return web.json_response({"is_paused": any(answers)})

    async def start_weight_update(request: web.Request) -> web.StreamResponse:
        await server.weight_operation("start")
        return web.json_response({"message": "Weight update started"})

    async def update_weights(request: web.Request) -> web.StreamResponse:
        body = await _body(request)
        info = body.get("update_info")
        if not isinstance(info, Mapping | list):
            raise _Invalid("body.update_info", "Field required")
        seconds = 0.0
        if isinstance(info, Mapping):
            try:
                seconds = max(0.0, float(info.get("seconds", 0.0)))
            except (TypeError, ValueError):
                raise _Invalid("body.update_info.seconds", "Input should be a number") from None
        await server.weight_operation("update", seconds)
        return web.json_response({"message": "Weights updated"})

    async def finish_weight_update(request: web.Request) -> web.StreamResponse:
        body = await _body(request)
        version = body.get("weight_version")
        if version is not None and not isinstance(version, str):
            raise _Invalid("body.weight_version", "Input should be a valid string")
        await server.weight_operation("finish")
        if version is not None:
            await server.engine_query("set_weight_version", version)
        return web.json_response({"message": "Weight update finished"})

    async def weight_info(request: web.Request) -> web.StreamResponse:
        answers = await server.engine_query("weight_version", engine=0)
        return web.json_response({"weight_version": answers[0]})

    routes: list[tuple[str, str, Handler]] = [
        ("POST", "/sleep", sleep),
        ("POST", "/wake_up", wake_up),
        ("GET", "/is_sleeping", is_sleeping),
        ("POST", "/pause", pause),
        ("POST", "/resume", resume),
        ("GET", "/is_paused", is_paused),
        ("POST", "/start_weight_update", start_weight_update),
        ("POST", "/update_weights", update_weights),
        ("POST", "/finish_weight_update", finish_weight_update),
        ("GET", "/weight_info", weight_info),
    ]
    for method, path, handler in routes:
        app.router.add_route(method, path, _guarded(handler))
