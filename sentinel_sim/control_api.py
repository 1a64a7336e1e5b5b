"""The fault-control port: switch faults on and off and signal the engine, at run time.

It lives on its own port so the OpenAI port serves exactly what vLLM serves.

Routes (JSON in, JSON out):

- ``GET /faults`` -> ``{"faults": [{"name", "params", "remaining_s"}, ...]}``
- ``PUT /faults/{name}`` body ``{"params": {...}, "duration": seconds|null}``
  (both optional) -> the fault as listed
- ``DELETE /faults/{name}`` and ``DELETE /faults`` (all)
- ``POST /engine/signal`` body ``{"signal": "stop"|"cont"|"kill"}``: a real
  SIGSTOP / SIGCONT / SIGKILL to the engine child; ``"engine": i`` picks a
  data-parallel engine (default 0), ``"worker": r`` its tensor-parallel rank
- ``GET /state`` -> pids, policy, whether the engine is alive
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from sentinel_sim.faults import Fault, FaultError, FaultSpec
from sentinel_sim.server import SimServer


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


async def _json_body(request: web.Request) -> Mapping[str, Any]:
    raw = await request.read()
    if not raw.strip():
        return {}
    value = json.loads(raw)
    if not isinstance(value, Mapping):
        raise ValueError("body must be a JSON object")
    return value


def build_control_app(server: SimServer) -> web.Application:
    async def list_faults(request: web.Request) -> web.Response:
        now = time.monotonic()
        return web.json_response({"faults": [f.describe(now) for f in server.faults.active()]})

    async def set_fault(request: web.Request) -> web.Response:
        try:
            body = await _json_body(request)
            params = body.get("params") or {}
            if not isinstance(params, Mapping):
                raise FaultError("params must be an object")
            spec = FaultSpec.build(request.match_info["name"], params, body.get("duration"))
            entry = server.set_fault(spec)
        except (ValueError, TypeError) as exc:
            return _error(400, str(exc))
        return web.json_response(entry.describe(time.monotonic()))

    async def clear_fault(request: web.Request) -> web.Response:
        try:
            fault = Fault(request.match_info["name"])
        except ValueError:
            return _error(404, f"unknown fault {request.match_info['name']!r}")
        server.clear_fault(fault)
        return web.json_response({"cleared": [fault.value]})

    async def clear_all(request: web.Request) -> web.Response:
        names = [f.fault.value for f in server.faults.active()]
        server.clear_fault(None)
        return web.json_response({"cleared": names})

    async def signal_engine(request: web.Request) -> web.Response:
        try:
            body = await _json_body(request)
            worker = body.get("worker")
            pid = server.signal_engine(
                str(body.get("signal", "")),
                int(body.get("engine") or 0),
                None if worker is None else int(worker),
            )
        except (ValueError, TypeError) as exc:
            return _error(400, str(exc))
        except ProcessLookupError as exc:
            return _error(409, f"engine process is gone: {exc}")
        return web.json_response({"engine_pid": pid, "signal": body["signal"]})

    async def state(request: web.Request) -> web.Response:
        return web.json_response(server.state())

    app = web.Application()
    app.router.add_get("/faults", list_faults)
    app.router.add_put("/faults/{name}", set_fault)
    app.router.add_post("/faults/{name}", set_fault)
    app.router.add_delete("/faults/{name}", clear_fault)
    app.router.add_delete("/faults", clear_all)
    app.router.add_post("/engine/signal", signal_engine)
    app.router.add_get("/state", state)
    return app
