"""Test support: a sentinel daemon in-process on loopback ports, with shortened timings.

The daemon runs exactly as ``sentinel run`` does (real HTTP and gRPC servers,
real canaries over sockets); only the timings are shortened so a hang is
confirmed in seconds. Everything started is stopped on exit.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sentinel.boot import boot
from sentinel.config.loader import load_settings
from sentinel.daemon import Daemon
from sentinel.record.provider import Provider

FAST: dict[str, Any] = {
    "listen": "127.0.0.1:0",
    "grpc_listen": "127.0.0.1:0",
    "scrape_interval": 0.5,
    "scrape_timeout": 2.0,
    "health_interval": 0.5,
    "process_interval": 0.5,
    "eval_interval": 0.25,
    "idle_window": 2.0,
    "hang_window": 4.0,
    "no_evidence_window": 6.0,
    "dead_grace": 1.5,
    # A test reads what sentinel says now: a "not yet" is answered at once, not held
    # (the hold: tests/loopback/test_probe_hold.py and the supervised runs).
    "probe_hold": 0.0,
    "canaries": {
        "text": {"interval": 1.0, "deadline": 2.0, "jitter": 0.0},
        "structured": {"interval": 1.0, "deadline": 2.0},
        "multimodal": {"interval": 1.0, "deadline": 2.0},
        "correctness": {"interval": 1.0, "deadline": 2.0},
    },
}


@dataclass
class Sidecar:
    daemon: Daemon
    url: str
    grpc_port: int
    client: httpx.AsyncClient
    channel: grpc.aio.Channel

    async def code(self, path: str) -> int:
        return (await self.client.get(self.url + path)).status_code

    async def json(self, path: str) -> Any:
        return (await self.client.get(self.url + path)).json()

    async def grpc_status(self, service: str) -> str:
        stub = health_pb2_grpc.HealthStub(self.channel)
        reply = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=3)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))

    async def green(self) -> bool:
        return [await self.code(p) for p in ("/startupz", "/readyz", "/livez")] == [200] * 3


async def eventually(
    check: Callable[[], Awaitable[bool]], deadline: float, what: str, interval: float = 0.1
) -> float:
    """Poll ``check`` until true; return the seconds it took, fail after ``deadline``."""
    start = time.monotonic()
    while True:
        if await check():
            return time.monotonic() - start
        if time.monotonic() - start > deadline:
            raise AssertionError(f"not within {deadline:.0f}s: {what}")
        await asyncio.sleep(interval)


@asynccontextmanager
async def running_sidecar(target: str, **overrides: Any) -> AsyncIterator[Sidecar]:
    """The daemon on ``target``; ``providers=`` hands it evidence providers of the test's own."""
    providers: Sequence[Provider[Any]] = overrides.pop("providers", ())
    flags = {**FAST, "target": target, **overrides}
    # With the shipped catalog, a test's canary overrides change the kinds it
    # names and every other kind keeps FAST's timing (a kind left at its
    # shipped deadline would outlast the short windows).
    if "catalog" not in overrides:
        flags["canaries"] = {**FAST["canaries"], **overrides.get("canaries", {})}
    if "diagnostics_dir" not in flags:
        flags["diagnostics"] = False
        flags["diagnostics_dir"] = Path("/nonexistent")
    boot()  # the process-wide set-up `sentinel run` starts with (idempotent)
    settings = load_settings(None, env={}, flags=flags)
    async with Daemon(settings, providers=providers).serving() as daemon:
        assert daemon.http is not None
        assert daemon.grpc is not None
        async with (
            httpx.AsyncClient(timeout=3.0) as client,
            grpc.aio.insecure_channel(f"127.0.0.1:{daemon.grpc.port}") as channel,
        ):
            yield Sidecar(daemon, daemon.http.url, daemon.grpc.port, client, channel)
