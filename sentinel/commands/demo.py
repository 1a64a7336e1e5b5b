"""``sentinel demo``: a silent hang, caught, on the embedded simulator.

Starts the simulated vLLM (``python -m sentinel_sim``, a subprocess with an
engine child titled ``VLLM::EngineCore``), runs the sidecar against it with
the shipped default timings, stops the engine process with SIGSTOP (vLLM's
own ``/health`` keeps answering 200), and prints the timeline as sentinel's
real HTTP and gRPC endpoints report it: healthy, hang injected, liveness red
after N s, diagnostics written, engine resumed, green again. Exit 0 when all
of that happened within the budget docs/design.md promises.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sentinel.config.loader import load_settings
from sentinel.exitcode import ExitCode

RED_BUDGET = 60.0  # docs/design.md: a hang must turn liveness red well inside a minute
GREEN_BUDGET = 60.0
STARTUP_BUDGET = 60.0


# Shortened timings for ``demo --fast``. Every window must be at least every
# canary's deadline (Settings.check_windows), the catalog's included, so the
# canaries get short deadlines too: the simulator answers in milliseconds.
FAST_DEADLINE = 3.0
FAST_FLAGS: dict[str, object] = {
    "scrape_interval": 0.5,
    "scrape_timeout": 2.0,
    "hang_window": 4.0,
    "no_evidence_window": 6.0,
    "dead_grace": 2.0,
    "canaries": {
        "text": {"interval": 1.0, "deadline": FAST_DEADLINE},
        "structured": {"interval": 2.0, "deadline": FAST_DEADLINE},
        "multimodal": {"interval": 2.0, "deadline": FAST_DEADLINE},
        "correctness": {"interval": 2.0, "deadline": FAST_DEADLINE},
    },
}


def demo_flags(fast: bool, diagnostics_dir: Path) -> dict[str, object]:
    """The settings the demo runs with, less the target (the simulator's port is not known yet)."""
    flags: dict[str, object] = {
        "listen": "127.0.0.1:0",
        "grpc_listen": "127.0.0.1:0",
        "diagnostics_dir": diagnostics_dir,
    }
    if fast:
        flags.update(FAST_FLAGS)
    return flags


class Timeline:
    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.t0:6.1f}s] {text}", flush=True)


async def _poll(
    check: Callable[[], Awaitable[bool]], deadline: float, interval: float = 0.25
) -> bool:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if await check():
            return True
        await asyncio.sleep(interval)
    return False


async def _demo(fast: bool, diagnostics_dir: Path | None) -> int:
    from sentinel.daemon import Daemon
    from sentinel.telemetry.logging import configure_logging
    from sentinel_sim.launch import SimProcess

    tl = Timeline()
    workdir = Path(tempfile.mkdtemp(prefix="sentinel-demo-"))
    diag = diagnostics_dir or workdir / "diagnostics"
    log_path = workdir / "sentinel.log"
    log_file = log_path.open("w", encoding="utf-8")
    configure_logging("info", renderer="json", stream=log_file)
    flags = demo_flags(fast, diag)
    tl.say("starting the simulated vLLM (API process + VLLM::EngineCore child)")
    with SimProcess(scheduling_policy="priority") as sim:
        settings = load_settings(None, env={}, flags={"target": sim.base_url, **flags})
        try:
            async with Daemon(settings).serving() as daemon:
                assert daemon.http is not None
                assert daemon.grpc is not None
                base = daemon.http.url
                tl.say(
                    f"sentinel listening: HTTP {base}, gRPC 127.0.0.1:{daemon.grpc.port}; "
                    f"target {sim.base_url} (engine pid {sim.engine_pid}); log {log_path}"
                )
                async with (
                    httpx.AsyncClient(timeout=3.0) as client,
                    grpc.aio.insecure_channel(f"127.0.0.1:{daemon.grpc.port}") as channel,
                ):
                    stub = health_pb2_grpc.HealthStub(channel)

                    async def code(path: str, url: str = base) -> int:
                        try:
                            return (await client.get(url + path)).status_code
                        except httpx.HTTPError:
                            return -1

                    async def grpc_liveness() -> str:
                        reply = await stub.Check(
                            health_pb2.HealthCheckRequest(service="liveness"), timeout=3
                        )
                        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))

                    async def all_green() -> bool:
                        codes = [await code(p) for p in ("/startupz", "/readyz", "/livez")]
                        return codes == [200, 200, 200]

                    if not await _poll(all_green, STARTUP_BUDGET):
                        tl.say("FAIL: sentinel never turned green on the healthy simulator")
                        return ExitCode.UNHEALTHY
                    tl.say("healthy: /startupz, /readyz and /livez all 200; gRPC liveness SERVING")

                    os.kill(sim.engine_pid, signal.SIGSTOP)
                    injected = time.monotonic()
                    tl.say(f"hang injected: SIGSTOP of VLLM::EngineCore (pid {sim.engine_pid})")
                    tl.say(
                        f"vLLM's own /health still answers {await code('/health', sim.base_url)}"
                    )

                    async def red() -> bool:
                        return await code("/livez") == 503

                    if not await _poll(red, RED_BUDGET):
                        tl.say(f"FAIL: liveness still green {RED_BUDGET:.0f}s after the hang")
                        return ExitCode.UNHEALTHY
                    detected = time.monotonic() - injected
                    reason = (await client.get(base + "/livez")).json().get("reason", "")
                    tl.say(f"liveness red after {detected:.1f}s: {reason}")
                    tl.say(
                        f"gRPC liveness {await grpc_liveness()}; /readyz {await code('/readyz')}; "
                        f"vLLM /health {await code('/health', sim.base_url)}"
                    )

                    async def bundle() -> bool:
                        return any(diag.glob("*/summary.txt")) if diag.exists() else False

                    if await _poll(bundle, 15):
                        written = sorted(diag.glob("*/summary.txt"))[-1]
                        first = written.read_text(encoding="utf-8").splitlines()[:1]
                        tl.say(f"diagnostics written: {written.parent} ({' '.join(first)})")
                    else:
                        tl.say("no diagnostics bundle appeared within 15 s")

                    os.kill(sim.engine_pid, signal.SIGCONT)
                    resumed = time.monotonic()
                    tl.say("engine resumed: SIGCONT")
                    if not await _poll(all_green, GREEN_BUDGET):
                        tl.say(f"FAIL: not green again {GREEN_BUDGET:.0f}s after resuming")
                        return ExitCode.UNHEALTHY
                    tl.say(
                        f"green again after {time.monotonic() - resumed:.1f}s, "
                        "without restarting anything"
                    )
                tl.say(f"PASS: hang detected in {detected:.1f}s (budget {RED_BUDGET:.0f}s)")
                return ExitCode.OK
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(sim.engine_pid, signal.SIGCONT)
            log_file.close()


def demo_main(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_demo(bool(args.fast), args.diagnostics_dir))
    except ImportError as exc:
        print(f"sentinel demo: the simulator is not installed: {exc}", file=sys.stderr)
        return ExitCode.USAGE
