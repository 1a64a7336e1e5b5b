"""Elastic expert-parallel scaling, as vLLM's API server does it (0.32, and 0.33+ by default).

``POST /scale_elastic_ep`` (``{"new_data_parallel_size": N, "drain_timeout":
120}``) scales the data-parallel engines. A scale-up first re-creates the stat
loggers, so every counter restarts at 0 ("This resets all the prometheus
metrics", ``vllm/v1/engine/async_llm.py``); then the process-local gate goes up
and vLLM's ``ScalingMiddleware`` (``vllm/entrypoints/serve/elastic_ep/middleware.py``)
answers 503 ``{"error": "The model is currently scaling. Please try again
later."}``:

* 0.32: on *every* path, ``/health``, ``/metrics`` and ``POST
  /is_scaling_elastic_ep`` included; the route answers only
  ``{"is_scaling_elastic_ep": false}`` when reached.
* 0.33+ (``--elastic-ep-release 0.33``, the default): all but ``/health`` and
  ``POST /is_scaling_elastic_ep`` (``_SCALING_OBSERVABILITY_PATHS``), whose
  answer names the phase (``preparing`` the first half of the scale here,
  then ``committing``, then ``completed``), the epoch, the error and the size
  asked for. A commit that fails leaves the gate up for good (vLLM lifts it
  only after a commit that succeeded) and the phase ``failed`` with its error.
  A rank scaled away (external LB) is *retired* from the commit on: every path
  but those two answers 503 "This data-parallel rank has been retired and is
  awaiting shutdown.", and ``/health`` answers 200 whatever its engine does
  (``AsyncLLM.check_health`` returns first for a retired rank).

The scale request itself, already past the middleware, answers ``{"message":
"Scaled to N data parallel engines"}`` when it ends
(``vllm/entrypoints/serve/elastic_ep/api_router.py``). Here the scale is the
``elastic_scale`` fault: ``POST /scale_elastic_ep`` switches it on for
``--elastic-scale-seconds`` and waits for it to end; the control port switches
it on for any duration (none: a commit that never returns) with ``commit``,
``retire`` and ``size``.
"""

from __future__ import annotations

import asyncio
import json
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware

from sentinel_sim.faults import ActiveFault, Fault, FaultSpec
from sentinel_sim.metrics import VllmMetrics
from sentinel_sim.server import SimServer

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SCALING_MESSAGE = "The model is currently scaling. Please try again later."
RETIRED_MESSAGE = "This data-parallel rank has been retired and is awaiting shutdown."
FAILED_ERROR = "RuntimeError: elastic EP commit failed on a peer rank (simulated)"
OBSERVABILITY_PATHS = frozenset({"/health", "/is_scaling_elastic_ep"})
PREPARE_S = 2.0  # how long a scale with no end prepares before its commit hangs


@dataclass(slots=True)
class ScaleState:
    """One server's elastic EP state: the current (or last) scale and the gate."""

    epoch: int = 0
    phase: str = "idle"
    error: str | None = None
    requested: int | None = None
    size: int = 1  # the data-parallel size in force
    running: ActiveFault | None = None  # the fault of the scale under way
    started: float = 0.0
    stuck: bool = False  # a failed commit left the gate up
    retired: bool = False


_STATES: weakref.WeakKeyDictionary[SimServer, ScaleState] = weakref.WeakKeyDictionary()


def state_of(server: SimServer) -> ScaleState:
    """The server's elastic EP state, brought up to date with its ``elastic_scale`` fault."""
    state = _STATES.get(server)
    if state is None:
        state = _STATES[server] = ScaleState(size=server.config.data_parallel_size)
    entry = server.faults.get(Fault.ELASTIC_SCALE)
    if entry is not None and entry is not state.running:
        _begin(server, state, entry)
    elif entry is None and state.running is not None:
        _end(server, state)
    if state.running is not None:
        # Preparing (new ranks bootstrapping, requests draining) the first half, then the
        # commit; a scale with no end prepares for PREPARE_S and never returns from its commit.
        length = _length(state.running, state.started)
        prepare = length / 2 if length != float("inf") else PREPARE_S
        state.phase = "preparing" if time.monotonic() - state.started < prepare else "committing"
        if state.phase == "committing" and state.running.params.get("retire"):
            state.retired = _newest(server)  # vLLM marks the rank retired before the commit
    return state


def _length(entry: ActiveFault, started: float) -> float:
    return float("inf") if entry.until is None else entry.until - started


def _newest(server: SimServer) -> bool:
    return server.config.elastic_ep_release != "0.32"


def _begin(server: SimServer, state: ScaleState, entry: ActiveFault) -> None:
    size = int(entry.params.get("size", state.size + 1))
    state.epoch += 1
    state.running, state.started = entry, time.monotonic()
    state.phase, state.error, state.requested, state.stuck = "preparing", None, size, False
    if size > state.size:
        # A scale-up re-creates the stat loggers: every counter restarts at 0.
        config = server.config
        server.metrics = VllmMetrics(
            config.model,
            max_model_len=config.max_model_len,
            kv_cache_tokens=config.kv_cache_tokens,
            engines=config.data_parallel_size,
        )


def _end(server: SimServer, state: ScaleState) -> None:
    entry, state.running = state.running, None
    if entry is not None and entry.params.get("commit") == "fail":
        state.phase, state.error, state.stuck, state.retired = "failed", FAILED_ERROR, True, False
        return
    state.phase = "completed"
    state.size = state.requested or state.size
    if entry is not None and entry.params.get("retire"):
        state.retired = _newest(server)


def scaling_middleware(server: SimServer) -> Middleware:
    """vLLM's ``ScalingMiddleware``: while a scale runs (or the rank is retired), 503."""

    @web.middleware
    async def scaling(request: web.Request, handler: Handler) -> web.StreamResponse:
        state = state_of(server)
        gated = state.running is not None or state.stuck or state.retired
        if not gated:
            return await handler(request)
        if _newest(server) and request.path in OBSERVABILITY_PATHS:
            if state.retired and request.path == "/health":
                return web.Response(status=200)  # check_health returns first when retired
            return await handler(request)
        message = RETIRED_MESSAGE if state.retired else SCALING_MESSAGE
        return web.json_response({"error": message}, status=503)

    return scaling


def _detail(status: int, message: str) -> web.Response:
    """FastAPI's ``HTTPException`` body, as vLLM raises it from the router."""
    return web.json_response({"detail": message}, status=status)


def status_body(server: SimServer) -> dict[str, Any]:
    """``POST /is_scaling_elastic_ep``'s answer in the server's release form."""
    state = state_of(server)
    if not _newest(server):
        return {"is_scaling_elastic_ep": state.running is not None}
    return {
        "is_scaling_elastic_ep": state.phase in ("preparing", "committing"),
        "phase": state.phase,
        "epoch": None if state.epoch == 0 else f"sim-{state.epoch:04d}",
        "error": state.error,
        "requested_data_parallel_size": state.requested,
    }


def add_elastic_ep_routes(app: web.Application, server: SimServer) -> None:
    async def scale(request: web.Request) -> web.Response:
        try:
            body = json.loads(await request.read())
        except ValueError:
            return _detail(400, "Invalid JSON format")
        if not isinstance(body, dict):
            return _detail(400, "Invalid JSON format")
        size = body.get("new_data_parallel_size")
        drain = body.get("drain_timeout", 120)
        if size is None:
            return _detail(400, "new_data_parallel_size is required")
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            return _detail(400, "new_data_parallel_size must be a positive integer")
        if not isinstance(drain, int) or isinstance(drain, bool) or drain <= 0:
            return _detail(400, "drain_timeout must be a positive integer")
        spec = FaultSpec.build(
            Fault.ELASTIC_SCALE.value, {"size": size}, server.config.elastic_scale_seconds
        )
        entry = server.set_fault(spec)
        state_of(server)
        if entry.until is not None:  # the scale runs its length (the fault ends itself then)
            await asyncio.sleep(max(0.0, entry.until - time.monotonic()))
        return web.json_response({"message": f"Scaled to {size} data parallel engines"})

    async def is_scaling(request: web.Request) -> web.Response:
        # 0.32: reached only while no scale runs (the middleware answers 503 during one).
        return web.json_response(status_body(server))

    app.router.add_post("/scale_elastic_ep", scale)
    app.router.add_post("/is_scaling_elastic_ep", is_scaling)
