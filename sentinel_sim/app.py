"""``python -m sentinel_sim``: the API process, dressed as vLLM's API server.

Starts the engine child, serves both ports, owns faults and metrics through :class:`SimServer`.

Start-up order: control port first (so faults can be set during a simulated
model load), then the engine child, then the OpenAI port once the engine says
it is ready (like vLLM, whose port opens only after the engine is up), then
one JSON "ready" line on stdout (and ``--ready-file``)::

    {"event": "ready", "port": 8000, "control_port": 8001, "engine_pid": 1234,
     "api_pid": 1233, "model": "sim-model", "scheduling_policy": "fcfs",
     "engine_pids": [1234], "worker_pids": [[]]}

(``engine_pids`` one per data-parallel engine, ``worker_pids`` each engine's
tensor-parallel workers, empty without ``--tensor-parallel-size``.)

When the engine dies (SIGKILL, crash) ``/health`` answers 503 for
``dead_exit_delay`` seconds and the process exits with status 1, as vLLM's
API server does. SIGTERM or SIGINT stops the engine and exits 0.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import sys
from collections.abc import Sequence

import setproctitle
from aiohttp import web

from sentinel_sim.api_servers import ApiServers
from sentinel_sim.config import SimConfig, parse_args
from sentinel_sim.control_api import build_control_app
from sentinel_sim.fault_gates import close_listener
from sentinel_sim.fault_tolerance import FaultTolerance
from sentinel_sim.openai_api import build_openai_app
from sentinel_sim.satellite import SERVER_HEADER
from sentinel_sim.server import EngineDead, SimServer


def _ready_line(
    server: SimServer, port: int, control_port: int, satellites: ApiServers | None
) -> str:
    return json.dumps(
        {
            "event": "ready",
            "port": port,
            "control_port": control_port,
            "engine_pid": server.engine_pid,
            "engine_pids": [link.pid for link in server.links],
            "worker_pids": [link.worker_pids for link in server.links],
            "api_pid": os.getpid(),
            "api_pids": [os.getpid(), *(satellites.pids if satellites is not None else [])],
            "model": server.config.model,
            "scheduling_policy": server.config.scheduling_policy,
        }
    )


def _write_ready_file(path: str, line: str) -> None:
    """Atomically, so a watcher never reads half a line."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(line + "\n")
    os.replace(tmp, path)


def _bound_port(site: web.BaseSite) -> int:
    server = site._server
    assert isinstance(server, asyncio.base_events.Server)
    return int(server.sockets[0].getsockname()[1])


async def _answered_by_server_0(_: web.Request, response: web.StreamResponse) -> None:
    response.headers.setdefault(SERVER_HEADER, "0")


async def serve(config: SimConfig) -> int:
    server = SimServer(config)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, server.stopping.set)

    fault_tolerance = FaultTolerance(server)  # --enable-fault-tolerance: routes on both ports
    control_app = build_control_app(server)
    fault_tolerance.add_control_routes(control_app)
    control_runner = web.AppRunner(control_app, access_log=None, shutdown_timeout=1.0)
    await control_runner.setup()
    control_site = web.TCPSite(control_runner, config.control_host, config.control_port)
    await control_site.start()
    satellites = (
        ApiServers(config.api_server_count, config.host, config.port)
        if config.api_server_count > 1
        else None
    )
    openai_app = build_openai_app(server)
    fault_tolerance.add_serving_routes(openai_app)
    if satellites is not None:
        openai_app.on_response_prepare.append(_answered_by_server_0)
    openai_runner = web.AppRunner(
        openai_app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0
    )
    await openai_runner.setup()
    server.close_listener = functools.partial(close_listener, openai_runner)
    try:
        await server.start_engine()
        for spec in config.faults:
            server.set_fault(spec)
        server.idle.start()
        if satellites is None:
            openai_site: web.BaseSite = web.TCPSite(
                openai_runner, config.host, config.port, backlog=4096
            )
            await openai_site.start()
        else:  # server 0 serves the shared socket too, and relays the satellites' requests
            openai_site = web.SockSite(openai_runner, satellites.socket)
            private = web.TCPSite(openai_runner, "127.0.0.1", 0)
            await openai_site.start()
            await private.start()
            await satellites.start(f"http://127.0.0.1:{_bound_port(private)}")
            server.wedge_api = satellites.wedge
        line = _ready_line(server, _bound_port(openai_site), _bound_port(control_site), satellites)
        if config.ready_file:
            _write_ready_file(config.ready_file, line)
        print(line, flush=True)
        await server.stopping.wait()
    except EngineDead as exc:
        print(f"engine failed to start: {exc}", file=sys.stderr, flush=True)
        server.exit_code = 1
    finally:
        server.mm_gate.set()
        server.open_gate.set()
        server.metrics_gate.set()
        if satellites is not None:
            await satellites.stop()
        await server.shutdown_engine()
        await openai_runner.cleanup()
        await control_runner.cleanup()
        server.close()
    return server.exit_code


# vLLM's API server module: sentinel recognises the API process by it on the
# command line, so the simulator wears it too and production code never has to
# name a test double.
VLLM_API_MODULE = "vllm.entrypoints.openai.api_server"


def take_vllm_api_title(args: Sequence[str]) -> str:
    """Retitle this process as vLLM's API server, keeping its arguments.

    The arguments stay because sentinel reads flags such as
    ``--scheduling-policy`` from the API server's command line. The kernel's
    short name (``comm``) is put back, so the process is still named as the
    interpreter that runs it, like a real ``python -m vllm...`` server.
    """
    name = setproctitle.getthreadtitle()
    title = " ".join(["python", "-m", VLLM_API_MODULE, *args])
    setproctitle.setproctitle(title)
    if name:
        setproctitle.setthreadtitle(name)
    return title


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m sentinel_sim``; ``argv`` None means this process's."""
    if argv is None:
        argv = sys.argv[1:]
        take_vllm_api_title(argv)
    config = parse_args(argv)
    return asyncio.run(serve(config))
