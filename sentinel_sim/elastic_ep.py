"""Elastic expert-parallel scaling, as vLLM 0.32's API server does it.

``POST /scale_elastic_ep`` (``{"new_data_parallel_size": N, "drain_timeout":
120}``) scales the data-parallel engines. While it runs, vLLM's
``ScalingMiddleware`` (``vllm/entrypoints/serve/elastic_ep/middleware.py``)
answers *every* HTTP request, ``/health``, ``/metrics`` and ``/v1/*``
included, with 503 and ``{"error": "The model is currently scaling. Please
try again later."}``; the scale request itself, already past the middleware,
answers ``{"message": "Scaled to N data parallel engines"}`` when it ends
(``vllm/entrypoints/serve/elastic_ep/api_router.py``). ``POST
/is_scaling_elastic_ep`` answers ``{"is_scaling_elastic_ep": false}``; during
a scale the middleware answers it 503 like any other path. A scale takes
40-55 s on a real fleet.

Here the scale is the ``elastic_scale`` fault: ``POST /scale_elastic_ep``
switches it on for ``--elastic-scale-seconds`` and waits for it to end; the
control port switches it on for any duration (none: a scale that never ends).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from sentinel_sim.faults import Fault, FaultSpec
from sentinel_sim.server import SimServer

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SCALING_MESSAGE = "The model is currently scaling. Please try again later."


def scaling_middleware(server: SimServer) -> Middleware:
    """vLLM's ``ScalingMiddleware``: while a scale runs, every path answers 503."""

    @web.middleware
    async def scaling(request: web.Request, handler: Handler) -> web.StreamResponse:
        if server.faults.get(Fault.ELASTIC_SCALE) is not None:
            return web.json_response({"error": SCALING_MESSAGE}, status=503)
        return await handler(request)

    return scaling


def _detail(status: int, message: str) -> web.Response:
    """FastAPI's ``HTTPException`` body, as vLLM raises it from the router."""
    return web.json_response({"detail": message}, status=status)


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
        spec = FaultSpec.build(Fault.ELASTIC_SCALE.value, {}, server.config.elastic_scale_seconds)
        entry = server.set_fault(spec)
        if entry.until is not None:  # the scale runs its length (the fault ends itself then)
            await asyncio.sleep(max(0.0, entry.until - time.monotonic()))
        return web.json_response({"message": f"Scaled to {size} data parallel engines"})

    async def is_scaling(request: web.Request) -> web.Response:
        # Reached only while no scale runs: the middleware answers 503 during one.
        scaling = server.faults.get(Fault.ELASTIC_SCALE) is not None
        return web.json_response({"is_scaling_elastic_ep": scaling})

    app.router.add_post("/scale_elastic_ep", scale)
    app.router.add_post("/is_scaling_elastic_ep", is_scaling)
