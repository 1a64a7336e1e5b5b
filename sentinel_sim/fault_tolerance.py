"""vLLM's fault tolerance (``--enable-fault-tolerance``), as 0.33 and 0.34 ship it.

A rank whose peer link breaks waits *unhealthy* for the orchestrator's
``retry`` up to ``engine_recovery_timeout_sec`` (``--fault-tolerance-config``,
120 s by default); ``/health`` stays 200. Its engine loop is parked
(``vllm/v1/fault_tolerance/engine_core_sentinel.py``), so here the engine
gets the ``engine_hang`` fault: generation and the engine's utility calls
(``/is_sleeping``, ``/is_paused``) wait and ``/metrics`` freezes. In the 0.34
form (``--fault-tolerance-release 0.34``) new generation requests get 503 "The
engine has faulted ..." at once instead (``AsyncLLM.check_admission``), and
the routes move under ``/v1`` (the old paths 404), where ``--api-key`` guards
them like every ``/v1`` path (vLLM's ``AuthenticationMiddleware``: 401
``{"error": "Unauthorized"}``, also simulated here for every ``/v1`` path).

Routes on the OpenAI port: ``GET [/v1]/fault_tolerance/status`` (the
frontend's cached status, answered while the engine is parked) and ``POST
[/v1]/fault_tolerance/apply`` (``{"instruction": "retry"}``: 202, and the
unhealthy ranks recover; a dead one reports ``ft_error``). Each call is
counted, so a test can tell that nobody but the orchestrator applied anything.

The control port takes the fault: ``PUT /fault_tolerance/engines/{engine}``
with ``{"status": "unhealthy"|"diagnosing"|"healthy"|"dead", "fault_info":
"RuntimeError", "stuck": false}``; ``GET /fault_tolerance`` shows the status
and the calls. Past the recovery timeout a rank not healthy ends as vLLM's
does: its engine dies (the original error is raised), and the API server
with it; ``stuck: true`` is the broken twin, a rank whose timeout never fires.
Not simulated: the abort of what the rank held when it faulted.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from aiohttp import web
from aiohttp.typedefs import Middleware

from sentinel_sim.faults import Fault, FaultSpec
from sentinel_sim.openai_request import error_response
from sentinel_sim.server import SimServer

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
FAULTED_MESSAGE = (
    "The engine has faulted and cannot accept new requests. Please try again later or on a "
    "different instance."
)
STATUSES = ("healthy", "unhealthy", "diagnosing", "dead")
GENERATION = ("/v1/chat/completions", "/v1/completions")
RETRY_TAKES = 0.5  # seconds an applied retry takes to bring a rank back


class FaultTolerance:
    """Each engine's status, the routes that show it and the control that sets it."""

    def __init__(self, server: SimServer) -> None:
        self.server = server
        self.release = server.config.fault_tolerance  # None: off
        self.engines: dict[int, dict[str, Any]] = {
            i: {"id": i, "status": "healthy"} for i in range(server.config.data_parallel_size)
        }
        self.calls = {"status": 0, "apply": 0}
        self._timers: dict[int, asyncio.TimerHandle] = {}

    @property
    def prefix(self) -> str:
        return "/v1" if self.release == "0.34" else ""

    def document(self) -> dict[str, Any]:
        engines = [dict(e) for e in self.engines.values()]
        return {"schema_version": 1, "total_engines": len(engines), "engines": engines}

    def faulted(self) -> bool:
        return any(e["status"] != "healthy" for e in self.engines.values())

    def set_status(self, engine: int, status: str, fault_info: str, stuck: bool) -> None:
        """One rank's status, and what its engine does in it (see the module docstring)."""
        if engine not in self.engines or status not in STATUSES:
            raise ValueError(f"engine within 0..{len(self.engines) - 1}, status one of {STATUSES}")
        entry: dict[str, Any] = {"id": engine, "status": status}
        if status in ("unhealthy", "diagnosing"):
            entry["fault_info"] = fault_info
            if self.release == "0.34":
                entry["ft_state"] = "recovering"
        was_healthy = self.engines[engine]["status"] == "healthy"
        self.engines[engine] = entry
        if status == "healthy":
            timer = self._timers.pop(engine, None)
            if timer is not None:
                timer.cancel()
            if not self.faulted():
                self.server.clear_fault(Fault.ENGINE_HANG)
            return
        if was_healthy:  # the engine loop parks, waiting for the retry
            self.server.set_fault(FaultSpec.build(Fault.ENGINE_HANG.value, {"engine": engine}))
            if not stuck:
                loop = asyncio.get_running_loop()
                timeout = self.server.config.engine_recovery_timeout
                self._timers[engine] = loop.call_later(timeout, self._give_up, engine)

    def _give_up(self, engine: int) -> None:
        """The recovery timeout: vLLM raises the original error and the engine dies."""
        self._timers.pop(engine, None)
        if self.engines[engine]["status"] != "healthy":
            self.server.signal_engine("kill", engine)

    def _retry(self) -> None:
        for ident, entry in list(self.engines.items()):
            if entry["status"] in ("unhealthy", "diagnosing"):
                self.set_status(ident, "healthy", "", False)
            elif entry["status"] == "dead":
                entry["ft_error"] = "engine is dead and cannot be retried"

    # -- the OpenAI port ------------------------------------------------------

    def middleware(self) -> Middleware:
        """vLLM's API-key check on ``/v1``, and 0.34's faulted 503 before the engine."""
        key = self.server.config.api_key

        @web.middleware
        async def gate(request: web.Request, handler: Handler) -> web.StreamResponse:
            told = request.headers.get("Authorization", "")
            if key and request.path.startswith("/v1") and told != f"Bearer {key}":
                return web.json_response({"error": "Unauthorized"}, status=401)
            faulted_now = self.release == "0.34" and self.faulted()
            if faulted_now and request.method == "POST" and request.path in GENERATION:
                return error_response(503, FAULTED_MESSAGE, err_type="Service Unavailable")
            return await handler(request)

        return gate

    def add_serving_routes(self, app: web.Application) -> None:
        app.middlewares.append(self.middleware())
        if self.release is None:
            return

        async def status(request: web.Request) -> web.Response:
            self.calls["status"] += 1
            return web.json_response(self.document())

        async def apply(request: web.Request) -> web.Response:
            self.calls["apply"] += 1
            try:
                body = json.loads(await request.read())
            except ValueError:
                return web.json_response({"detail": "Invalid JSON format"}, status=400)
            if not isinstance(body, dict) or body.get("instruction") != "retry":
                return web.json_response({"detail": "Invalid instruction."}, status=400)
            asyncio.get_running_loop().call_later(RETRY_TAKES, self._retry)
            return web.json_response(
                {"message": "Request accepted; poll the status for updates."}, status=202
            )

        app.router.add_get(self.prefix + "/fault_tolerance/status", status)
        app.router.add_post(self.prefix + "/fault_tolerance/apply", apply)

    # -- the control port -----------------------------------------------------

    def add_control_routes(self, app: web.Application) -> None:
        async def put(request: web.Request) -> web.Response:
            if self.release is None:
                return web.json_response({"error": "fault tolerance is off"}, status=409)
            try:
                raw = await request.read()
                body = json.loads(raw) if raw.strip() else {}
                if not isinstance(body, dict):
                    raise ValueError("body must be a JSON object")
                self.set_status(
                    int(request.match_info["engine"]),
                    str(body.get("status", "unhealthy")),
                    str(body.get("fault_info", "RuntimeError")),
                    bool(body.get("stuck", False)),
                )
            except (ValueError, TypeError) as exc:
                return web.json_response({"error": str(exc)}, status=400)
            return web.json_response(self.document())

        async def show(request: web.Request) -> web.Response:
            return web.json_response({"status": self.document(), "calls": self.calls})

        app.router.add_put("/fault_tolerance/engines/{engine}", put)
        app.router.add_get("/fault_tolerance", show)


def set_engine_status(
    control_url: str,
    engine: int,
    status: str,
    *,
    fault_info: str = "RuntimeError",
    stuck: bool = False,
) -> dict[str, Any]:
    """Set one rank's status through the control port (tests, scripts)."""
    body = {"status": status, "fault_info": fault_info, "stuck": stuck}
    response = httpx.put(f"{control_url}/fault_tolerance/engines/{engine}", json=body, timeout=5)
    response.raise_for_status()
    result: dict[str, Any] = response.json()
    return result


def fault_tolerance_calls(control_url: str) -> dict[str, int]:
    """How often the status and apply routes were called."""
    response = httpx.get(f"{control_url}/fault_tolerance", timeout=5)
    response.raise_for_status()
    calls: dict[str, int] = response.json()["calls"]
    return calls
