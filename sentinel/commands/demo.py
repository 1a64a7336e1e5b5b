"""``sentinel demo``: a silent hang, caught, on the embedded simulator.

Starts the simulated vLLM (``python -m sentinel_sim``, a subprocess with an
engine child titled ``VLLM::EngineCore``), runs the sidecar against it with
the shipped default timings, serves two clients' small requests for 15 s,
stops the engine process with SIGSTOP (vLLM's own ``/health`` keeps answering
200), and prints the timeline as sentinel's real HTTP and gRPC endpoints
report it: healthy, hang injected, liveness red after N s, the confirmed
hang's bundle stored (its path, summary and ``timeline.png``, which shows the
red liveness lane and the work falling flat before it), engine resumed, green
again. Exit 0 when all of that happened within the budget docs/design.md
promises. ``make readme-figure`` runs the same machinery with another
:class:`Scenario`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sentinel.config.loader import load_settings
from sentinel.diagnostics.store import INDEX_FILE, SUMMARY_FILE
from sentinel.diagnostics.timeline import TIMELINE_FILE
from sentinel.exitcode import ExitCode

if TYPE_CHECKING:  # imported when the demo runs: without the simulator, it says so
    from sentinel_sim.launch import SimProcess

RED_BUDGET = 60.0  # docs/design.md: a hang must turn liveness red well inside a minute
GREEN_BUDGET = 60.0
STARTUP_BUDGET = 60.0
BUNDLE_BUDGET = 30.0  # a capture's budget (8 s) and its child's start, with room to spare


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


@dataclass(frozen=True, slots=True)
class Scenario:
    """What the demo does to the healthy simulator, after how long, under how much load.

    ``inject`` and ``release`` act on the running simulator. ``clients``
    send small chat requests from the first green answers until the release,
    so the picture has real work to fall flat; ``healthy_s`` (cut to
    :data:`FAST_HEALTHY_S` under ``--fast``) is how long they work first. The
    command runs :data:`SIGSTOP`; the README's figure (``make readme-figure``)
    a fault of the simulator's.
    """

    name: str
    inject: Callable[[SimProcess], None]
    release: Callable[[SimProcess], None]
    healthy_s: float = 15.0
    clients: int = 2


def _stop(sim: SimProcess) -> None:
    os.kill(sim.engine_pid, signal.SIGSTOP)


def _resume(sim: SimProcess) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(sim.engine_pid, signal.SIGCONT)


SIGSTOP = Scenario("SIGSTOP of VLLM::EngineCore", _stop, _resume)
FAST_HEALTHY_S = 2.0


async def _load(base_url: str, model: str, clients: int) -> None:
    """``clients`` loops of small chat requests, until cancelled; a failure is retried."""
    body = {"model": model, "messages": [{"role": "user", "content": "Count."}], "max_tokens": 32}
    async with httpx.AsyncClient(timeout=60.0) as client:

        async def one() -> None:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    await client.post(f"{base_url}/v1/chat/completions", json=body)
                await asyncio.sleep(0.05)

        async with asyncio.TaskGroup() as group:
            for _ in range(clients):
                group.create_task(one())


@dataclass(frozen=True, slots=True)
class DemoRun:
    """How the demo ended, and the confirmed hang's bundle (None: none was written)."""

    code: int
    bundle: Path | None = None


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


def confirmed_bundle(diag: Path) -> Path | None:
    """The newest stored bundle of a confirmed hang under ``diag`` (its trigger ``<kind>-hang``).

    Only renamed (final) directories count: the store writes each under a
    hidden temporary name first. A suspicion's bundle, captured before
    liveness turned red, is not the one the restart follows.
    """
    found = None
    for index in sorted(diag.glob("*/incident.json")) if diag.is_dir() else ():
        try:
            trigger = json.loads(index.read_text(encoding="utf-8")).get("trigger", "")
        except (OSError, ValueError, AttributeError):
            continue
        if str(trigger).endswith("-hang") and not index.parent.name.startswith("."):
            found = index.parent
    return found


def _picture(bundle: Path) -> str:
    """Where the bundle's picture is, or why it was not drawn (the store's own words)."""
    picture = bundle / TIMELINE_FILE
    if picture.is_file():
        return f"timeline {picture}"
    try:
        said = json.loads((bundle / INDEX_FILE).read_text(encoding="utf-8")).get("timeline")
    except (OSError, ValueError, AttributeError):
        said = None
    return f"timeline {said or 'not drawn'}"


async def run_demo(
    fast: bool, diagnostics_dir: Path | None, scenario: Scenario = SIGSTOP
) -> DemoRun:
    """Run the demo: healthy, the scenario's hang, liveness red, the bundle stored, green again."""
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
    load: asyncio.Task[None] | None = None
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
                        return DemoRun(ExitCode.UNHEALTHY)
                    tl.say("healthy: /startupz, /readyz and /livez all 200; gRPC liveness SERVING")
                    if scenario.clients:
                        work = _load(sim.base_url, sim.model, scenario.clients)
                        load = asyncio.create_task(work)
                    healthy = min(scenario.healthy_s, FAST_HEALTHY_S if fast else math.inf)
                    tl.say(f"{scenario.clients} clients served for {healthy:.0f}s before the hang")
                    await asyncio.sleep(healthy)

                    scenario.inject(sim)
                    injected = time.monotonic()
                    tl.say(f"hang injected: {scenario.name} (engine pid {sim.engine_pid})")
                    tl.say(
                        f"vLLM's own /health still answers {await code('/health', sim.base_url)}"
                    )

                    async def red() -> bool:
                        return await code("/livez") == 503

                    if not await _poll(red, RED_BUDGET):
                        tl.say(f"FAIL: liveness still green {RED_BUDGET:.0f}s after the hang")
                        return DemoRun(ExitCode.UNHEALTHY)
                    detected = time.monotonic() - injected
                    reason = (await client.get(base + "/livez")).json().get("reason", "")
                    tl.say(f"liveness red after {detected:.1f}s: {reason}")
                    tl.say(
                        f"gRPC liveness {await grpc_liveness()}; /readyz {await code('/readyz')}; "
                        f"vLLM /health {await code('/health', sim.base_url)}"
                    )

                    # The confirmed hang's bundle: captured once liveness turned red, so its
                    # picture holds the red lane. The engine stays hung until it is stored.
                    async def stored() -> bool:
                        return confirmed_bundle(diag) is not None

                    written = confirmed_bundle(diag) if await _poll(stored, BUNDLE_BUDGET) else None
                    if written is not None:
                        first = (written / SUMMARY_FILE).read_text(encoding="utf-8").splitlines()
                        tl.say(f"diagnostics written: {written} ({' '.join(first[:1])})")
                        tl.say(f"  summary {written / SUMMARY_FILE}; {_picture(written)}")
                    else:
                        tl.say(f"no bundle of the confirmed hang within {BUNDLE_BUDGET:.0f} s")

                    scenario.release(sim)
                    resumed = time.monotonic()
                    tl.say("engine resumed")
                    if not await _poll(all_green, GREEN_BUDGET):
                        tl.say(f"FAIL: not green again {GREEN_BUDGET:.0f}s after resuming")
                        return DemoRun(ExitCode.UNHEALTHY, written)
                    tl.say(
                        f"green again after {time.monotonic() - resumed:.1f}s, "
                        "without restarting anything"
                    )
                tl.say(f"PASS: hang detected in {detected:.1f}s (budget {RED_BUDGET:.0f}s)")
                return DemoRun(ExitCode.OK, written)
        finally:
            if load is not None:
                load.cancel()
                with contextlib.suppress(BaseException):
                    await load
            scenario.release(sim)
            log_file.close()


def demo_main(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(run_demo(bool(args.fast), args.diagnostics_dir)).code
    except ImportError as exc:
        print(f"sentinel demo: the simulator is not installed: {exc}", file=sys.stderr)
        return ExitCode.USAGE
