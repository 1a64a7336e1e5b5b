"""Benchmark: sentinel with its shipped default timings against the simulated vLLM.

Run: ``make bench`` or ``python -m tests.bench.bench_sentinel [--quick] [--json PATH]
[--only NAME ...]``. The daemon runs in-process with every setting at its
default except the listen ports (``127.0.0.1:0``) and the diagnostics
directory (a temporary folder); the simulator runs as a subprocess. Figures:

1. ``hang``: engine hang through the simulator's control API on an idle
   server, three rounds (fresh simulator and sidecar each): seconds from
   ``set_fault`` to ``/livez`` 503 and to gRPC ``liveness`` NOT_SERVING,
   ``/readyz`` at that moment, seconds from ``clear_all`` to ``/livez`` and
   ``/readyz`` 200. Budget 30 s each.
2. ``sigstop``: the same with SIGSTOP of the ``VLLM::EngineCore`` child
   (SIGCONT to recover, and always in ``finally``).
3. ``livez``: ``/livez`` latency while the target is hung (confirmed red
   first), 200 requests per second, open loop (request i goes out at
   start + i x 5 ms whether or not earlier ones returned), keep-alive
   connections from a pool. The client runs in its own process, so the
   figure is sentinel's latency and not the client's event loop. Budget p99
   under 5 ms.
4. ``slow_decode``: the decode step slowed so much that every text canary
   (2 tokens, 8 s deadline) misses its deadline while background load keeps
   the token counters rising, for 3 minutes: ``/livez`` must never fail and
   at least 5 canary timeouts must be counted.
5. ``saturation_priority`` and ``saturation_fcfs``: ``max_num_seqs`` 4 and
   200 concurrent long requests for 3 minutes: ``/livez`` must never fail;
   canary latency percentiles; ``/status`` ``priority.effective`` must match
   the engine's scheduling policy.

Background load runs in a separate process (``python -m chaos.load``) so it
does not share the daemon's event loop. ``--quick`` shortens the measurement
windows (not sentinel's timings). The process exits 1 when any budget is
missed. The daemon's JSON log is kept in a temporary folder whose path is
printed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

import aiohttp
import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table

from sentinel.config.loader import load_settings
from sentinel.daemon import Daemon
from sentinel.telemetry.logging import configure_logging
from sentinel_sim.control import AsyncSimControl
from sentinel_sim.launch import SimProcess

FIGURES = (
    "hang",
    "sigstop",
    "livez",
    "livez_capture",
    "slow_decode",
    "saturation_priority",
    "saturation_fcfs",
)
ALIASES = {"saturation": ("saturation_priority", "saturation_fcfs")}

ROUNDS = 3
HANG_BUDGET_S = 30.0
LIVEZ_RATE = 200.0
LIVEZ_P99_BUDGET_S = 0.005
MIN_CANARY_TIMEOUTS = 5
# Simulator decode is 100 tok/s per sequence; x900 makes one engine step 9 s. A
# canary answers at the earliest one step after admission (measured: x500 let
# canaries admitted into a freed slot answer in 5.8 s), so one step must outlast the
# 8 s text deadline; 16 background sequences still add tokens every 9 s, well
# inside the 15 s hang window.
SLOW_DECODE_FACTOR = 900.0

STARTUP_DEADLINE_S = 90.0  # sidecar green after start (all canary kinds must pass once)
OBSERVE_DEADLINE_S = 90.0  # longer than every budget, so a miss still yields a figure
POLL_S = 0.1
WINDOW_POLL_S = 0.5


class BenchError(RuntimeError):
    """A figure could not be measured at all (e.g. the sidecar never turned green)."""


@dataclass(slots=True)
class Check:
    figure: str
    name: str
    value: str
    budget: str
    passed: bool


@dataclass(slots=True)
class Report:
    quick: bool
    workdir: str
    cpu_count: int | None = os.cpu_count()
    load_average: dict[str, list[float]] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)

    def check(self, figure: str, name: str, value: str, budget: str, passed: bool) -> None:
        self.checks.append(Check(figure, name, value, budget, passed))

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {
            "quick": self.quick,
            "workdir": self.workdir,
            "cpu_count": self.cpu_count,
            "load_average": self.load_average,
            "figures": self.figures,
            "checks": [asdict(c) for c in self.checks],
            "passed": self.passed,
        }


def _loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _pcts(values: Sequence[float]) -> dict[str, float | None]:
    """p50/p90/p99/max (inclusive quantiles); None when empty."""
    if not values:
        return {"p50": None, "p90": None, "p99": None, "max": None}
    if len(values) == 1:
        return {"p50": values[0], "p90": values[0], "p99": values[0], "max": values[0]}
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50": cuts[49], "p90": cuts[89], "p99": cuts[98], "max": max(values)}


def _seconds(value: float | None) -> str:
    return "not reached" if value is None else f"{value:.2f} s"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.2f} ms"


def _metric(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` (or ``name_total``) whose labels match."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in (name, name + "_total") and all(
                sample.labels.get(k) == v for k, v in labels.items()
            ):
                total += sample.value
    return total


# -- the sidecar under test ------------------------------------------------------


@dataclass
class Sidecar:
    daemon: Daemon
    url: str
    client: httpx.AsyncClient
    channel: grpc.aio.Channel

    async def code(self, path: str) -> int:
        """HTTP status of ``path``; 0 when no answer came (counted as a failure)."""
        try:
            return (await self.client.get(self.url + path)).status_code
        except httpx.HTTPError:
            return 0

    async def json(self, path: str) -> Any:
        return (await self.client.get(self.url + path)).json()

    async def text(self, path: str) -> str:
        return (await self.client.get(self.url + path)).text

    async def grpc_status(self, service: str) -> str:
        stub = health_pb2_grpc.HealthStub(self.channel)
        try:
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=3)
        except grpc.aio.AioRpcError as exc:
            return f"error: {exc.code().name}"
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))

    async def green(self) -> bool:
        codes = [await self.code(p) for p in ("/startupz", "/readyz", "/livez")]
        return codes == [200, 200, 200]


@asynccontextmanager
async def running_sidecar(target: str, workdir: Path) -> AsyncIterator[Sidecar]:
    """The daemon with default settings; only ports and the diagnostics folder are set."""
    diagnostics = Path(tempfile.mkdtemp(prefix="diagnostics-", dir=workdir))
    settings = load_settings(
        None,
        env={},
        flags={
            "target": target,
            "listen": "127.0.0.1:0",
            "grpc_listen": "127.0.0.1:0",
            "diagnostics_dir": str(diagnostics),
        },
    )
    daemon = Daemon(settings)
    stop = asyncio.Event()
    task = asyncio.create_task(daemon.run(stop), name="sentinel-daemon")
    try:
        started = asyncio.create_task(daemon.started.wait())
        done, _ = await asyncio.wait({task, started}, timeout=30, return_when="FIRST_COMPLETED")
        if started not in done:
            started.cancel()
            if task in done:
                task.result()  # raises the daemon's start-up error
            raise BenchError("sentinel did not start listening within 30 s")
        assert daemon.http is not None
        assert daemon.grpc is not None
        async with (
            httpx.AsyncClient(timeout=3.0) as client,
            grpc.aio.insecure_channel(f"127.0.0.1:{daemon.grpc.port}") as channel,
        ):
            yield Sidecar(daemon, daemon.http.url, client, channel)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def wait_until(
    check: Callable[[], Awaitable[bool]], since: float, deadline: float, interval: float = POLL_S
) -> float | None:
    """Poll ``check``; the seconds from ``since`` until it first held, None past ``deadline``."""
    while True:
        if await check():
            return time.monotonic() - since
        if time.monotonic() - since > deadline:
            return None
        await asyncio.sleep(interval)


async def wait_green(sidecar: Sidecar) -> float:
    took = await wait_until(sidecar.green, time.monotonic(), STARTUP_DEADLINE_S, 0.25)
    if took is None:
        status = await sidecar.json("/status")
        raise BenchError(
            f"sidecar not green within {STARTUP_DEADLINE_S:.0f} s: "
            f"{json.dumps(status.get('history', []))[:800]}"
        )
    return took


# -- background load, in its own process ---------------------------------------


@asynccontextmanager
async def background_load(
    target: str, *, concurrency: int, duration: float, max_tokens: int, request_timeout: float
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``python -m chaos.load`` (closed loop) for the block; terminated on exit."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "chaos.load",
        "--target",
        target,
        "--concurrency",
        str(concurrency),
        "--duration",
        str(duration),
        "--max-tokens",
        str(max_tokens),
        "--timeout",
        str(request_timeout),
        "--json",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()


async def sim_counter(sim: SimProcess, name: str) -> float:
    async with httpx.AsyncClient(timeout=5.0) as client:
        return _metric((await client.get(sim.base_url + "/metrics")).text, name)


# -- figures 1 and 2: hang detection -------------------------------------------


async def hang_round(fault: str, workdir: Path) -> dict[str, Any]:
    """One round on a fresh simulator and sidecar: inject, time red, recover, time green."""
    async with (
        SimProcess(scheduling_policy="priority") as sim,
        AsyncSimControl(sim.control_url) as control,
        running_sidecar(sim.base_url, workdir) as sidecar,
    ):
        startup_s = await wait_green(sidecar)
        if await sidecar.grpc_status("liveness") != "SERVING":
            raise BenchError("gRPC liveness not SERVING while green")

        async def livez_red() -> bool:
            return await sidecar.code("/livez") == 503

        async def grpc_red() -> bool:
            return await sidecar.grpc_status("liveness") == "NOT_SERVING"

        async def livez_green() -> bool:
            return await sidecar.code("/livez") == 200

        async def readyz_green() -> bool:
            return await sidecar.code("/readyz") == 200

        injected = time.monotonic()
        try:
            if fault == "engine_hang":
                await control.set_fault("engine_hang")
            else:
                os.kill(sim.engine_pid, signal.SIGSTOP)
            livez_s, grpc_s = await asyncio.gather(
                wait_until(livez_red, injected, OBSERVE_DEADLINE_S),
                wait_until(grpc_red, injected, OBSERVE_DEADLINE_S),
            )
            readyz_at_red = await sidecar.code("/readyz")
            reason = (await sidecar.json("/livez")).get("reason")
            status = await sidecar.json("/status")
        finally:
            if fault != "engine_hang":
                with contextlib.suppress(ProcessLookupError):
                    os.kill(sim.engine_pid, signal.SIGCONT)
        cleared = time.monotonic()
        if fault == "engine_hang":
            await control.clear_all()
        livez_back_s, readyz_back_s = await asyncio.gather(
            wait_until(livez_green, cleared, OBSERVE_DEADLINE_S),
            wait_until(readyz_green, cleared, OBSERVE_DEADLINE_S),
        )
        return {
            "startup_s": round(startup_s, 3),
            "livez_503_s": None if livez_s is None else round(livez_s, 3),
            "grpc_not_serving_s": None if grpc_s is None else round(grpc_s, 3),
            "readyz_at_red": readyz_at_red,
            "livez_reason": reason,
            "hangs": status["verdict"]["hangs"],
            "engine_down": status["evidence"]["engine_down"],
            "livez_200_after_clear_s": None if livez_back_s is None else round(livez_back_s, 3),
            "readyz_200_after_clear_s": None if readyz_back_s is None else round(readyz_back_s, 3),
        }


def _max_or_none(values: Sequence[float | None]) -> float | None:
    return None if any(v is None for v in values) else max(v for v in values if v is not None)


async def figure_hang(report: Report, figure: str, fault: str, workdir: Path) -> None:
    rounds: list[dict[str, Any]] = []
    for number in range(1, ROUNDS + 1):
        result = await hang_round(fault, workdir)
        rounds.append(result)
        print(
            f"  {figure} round {number}: /livez 503 after {_seconds(result['livez_503_s'])}, "
            f"gRPC NOT_SERVING after {_seconds(result['grpc_not_serving_s'])}, "
            f"/readyz {result['readyz_at_red']}, green after "
            f"{_seconds(result['readyz_200_after_clear_s'])}; reason: {result['livez_reason']}",
            flush=True,
        )
    report.figures[figure] = {"fault": fault, "rounds": rounds}
    budget = f"<= {HANG_BUDGET_S:.0f} s"
    for key, label in (
        ("livez_503_s", "/livez 503 after injection"),
        ("grpc_not_serving_s", "gRPC liveness NOT_SERVING after injection"),
        ("livez_200_after_clear_s", "/livez 200 after recovery"),
        ("readyz_200_after_clear_s", "/readyz 200 after recovery"),
    ):
        values = [r[key] for r in rounds]
        worst = _max_or_none(values)
        report.figures[figure][f"max_{key}"] = worst
        shown = ", ".join(_seconds(v) for v in values)
        report.check(
            figure,
            label,
            f"{shown} (max {_seconds(worst)})",
            budget,
            worst is not None and worst <= HANG_BUDGET_S,
        )
    codes = [r["readyz_at_red"] for r in rounds]
    report.check(
        figure,
        "/readyz when liveness turned red",
        ", ".join(str(c) for c in codes),
        "503 every round",
        all(c == 503 for c in codes),
    )


# -- figure 3: /livez latency while hung ----------------------------------------


async def livez_client(url: str, rate: float, seconds: float) -> dict[str, Any]:
    """Open loop from a keep-alive pool; runs in its own process (``--livez-client``)."""
    connector = aiohttp.TCPConnector(limit=64, force_close=False)
    timeout = aiohttp.ClientTimeout(total=5)
    records: list[tuple[float, float, float, int]] = []
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one(scheduled: float) -> None:
            sent = time.perf_counter()
            status = 0
            try:
                async with session.get(url) as response:
                    await response.read()
                    status = response.status
            except (aiohttp.ClientError, TimeoutError):
                status = 0
            records.append((scheduled, sent, time.perf_counter(), status))

        # Open a few pooled connections before the clock starts (not recorded).
        for _ in range(5):
            await asyncio.gather(*(one(0.0) for _ in range(4)))
        records.clear()

        count = int(rate * seconds)
        start = time.perf_counter() + 0.05
        tasks: list[asyncio.Task[None]] = []
        for i in range(count):
            scheduled = start + i / rate
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)  # pacing the open loop, not waiting on state
            tasks.append(asyncio.create_task(one(scheduled)))
        await asyncio.gather(*tasks)
    return {
        "start": start,
        "records": [(s - start, sent - s, done - sent, code) for s, sent, done, code in records],
    }


async def loop_lag(seconds: float, period: float = 0.005) -> dict[str, float | None]:
    """How late a 5 ms sleep wakes up in this (the daemon's) event loop, over ``seconds``."""
    lags: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        before = time.perf_counter()
        await asyncio.sleep(period)  # pacing the ticker
        lags.append(time.perf_counter() - before - period)
    return {k: _round(v) for k, v in _pcts(lags).items()}


async def figure_livez(
    report: Report, quick: bool, workdir: Path, *, during_capture: bool = False
) -> None:
    """/livez latency at 200/s while hung; ``during_capture``: from the fault on,
    so the diagnostics capture at the first missed deadline falls inside the window."""
    name = "livez_capture" if during_capture else "livez"
    seconds = 10.0 if quick else 30.0
    async with (
        SimProcess(scheduling_policy="priority") as sim,
        AsyncSimControl(sim.control_url) as control,
        running_sidecar(sim.base_url, workdir) as sidecar,
    ):
        await wait_green(sidecar)
        injected = time.monotonic()
        await control.set_fault("engine_hang")

        async def livez_red() -> bool:
            return await sidecar.code("/livez") == 503

        red_s: float | None = None
        if not during_capture:
            red_s = await wait_until(livez_red, injected, OBSERVE_DEADLINE_S)
            if red_s is None:
                raise BenchError("the engine hang was not confirmed; /livez never answered 503")
        client = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.bench.bench_sentinel",
            "--livez-client",
            sidecar.url + "/livez",
            str(LIVEZ_RATE),
            str(seconds),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
        )
        ticker = asyncio.create_task(loop_lag(seconds))
        cpu_before = time.process_time()
        try:
            stdout, _ = await asyncio.wait_for(client.communicate(), seconds + 60)
            lag = await ticker
            cpu_s = time.process_time() - cpu_before
        finally:
            ticker.cancel()
            if client.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    client.kill()
                await client.wait()
        still_red = await sidecar.code("/livez") == 503
        status = await sidecar.json("/status")
        await control.clear_all()
    if client.returncode != 0:
        raise BenchError(f"the /livez client exited with {client.returncode}")
    data = json.loads(stdout)
    records = data["records"]
    answered = [r for r in records if r[3] != 0]
    latencies = [r[2] for r in answered]
    from_schedule = [r[1] + r[2] for r in answered]
    lags = [r[1] for r in records]
    codes: dict[str, int] = {}
    for r in records:
        codes[str(r[3])] = codes.get(str(r[3]), 0) + 1
    span = max((r[0] + r[1] + r[2] for r in answered), default=0.0)
    achieved = len(answered) / span if span > 0 else 0.0
    latency = _pcts(latencies)
    figure: dict[str, Any] = {
        "rate_target": LIVEZ_RATE,
        "seconds": seconds,
        "red_after_s": None if red_s is None else round(red_s, 3),
        "scheduled": int(LIVEZ_RATE * seconds),
        "sent": len(records),
        "answered": len(answered),
        "status_codes": codes,
        "achieved_rate": round(achieved, 1),
        "latency_s": latency,
        "latency_from_schedule_s": _pcts(from_schedule),
        "client_send_lag_s": _pcts(lags),
        "daemon_loop_lag_s": lag,
        "daemon_process_cpu_s": round(cpu_s, 3),
        "slowest": [
            {"at_s": round(r[0], 3), "latency_s": round(r[2], 5)}
            for r in sorted(answered, key=lambda r: -r[2])[:20]
        ],
        "still_red_after": still_red,
        "hangs": status["verdict"]["hangs"],
        "incidents": status["incidents"]["recent"],
        "load_average": _loadavg(),
    }
    report.figures[name] = figure
    if during_capture:
        captures = [i for i in status["incidents"]["recent"] if i.get("duration_s") is not None]
        report.check(
            name,
            "diagnostics captured inside the window (capture seconds)",
            ", ".join(f"{i['duration_s']:.2f} s" for i in captures) or "none",
            "a capture under 10 s",
            bool(captures) and all(i["duration_s"] < 10 for i in captures),
        )
        report.check(
            name,
            f"/livez latency at {LIVEZ_RATE:.0f}/s from the fault, capture included: "
            "p50 / p90 / p99 / max",
            " / ".join(_ms(latency[k]) for k in ("p50", "p90", "p99", "max")),
            f"p99 < {LIVEZ_P99_BUDGET_S * 1000:.0f} ms",
            latency["p99"] is not None and latency["p99"] < LIVEZ_P99_BUDGET_S,
        )
        return
    report.check(
        "livez",
        f"/livez latency at {LIVEZ_RATE:.0f}/s, hung target: p50 / p90 / p99 / max",
        " / ".join(_ms(latency[k]) for k in ("p50", "p90", "p99", "max")),
        f"p99 < {LIVEZ_P99_BUDGET_S * 1000:.0f} ms",
        latency["p99"] is not None and latency["p99"] < LIVEZ_P99_BUDGET_S,
    )
    report.check(
        "livez",
        "requests answered / achieved rate",
        f"{len(answered)} of {len(records)} at {achieved:.1f}/s",
        "all answered",
        len(answered) == len(records) == int(LIVEZ_RATE * seconds),
    )
    report.check(
        "livez",
        "answers while hung (status codes)",
        json.dumps(codes, sort_keys=True),
        "all 503",
        set(codes) == {"503"} and still_red,
    )


# -- figures 4 and 5: liveness under slow decode and saturation -------------------


@dataclass(slots=True)
class Window:
    livez: list[int] = field(default_factory=list)
    readyz: list[int] = field(default_factory=list)
    progress_ages: list[float] = field(default_factory=list)
    canaries: dict[tuple[str, str, float], tuple[str, float]] = field(default_factory=dict)

    def by_kind(self) -> dict[str, dict[str, Any]]:
        kinds: dict[str, dict[str, Any]] = {}
        for (kind, _name, _started), (reason, duration) in self.canaries.items():
            entry = kinds.setdefault(kind, {"durations": [], "reasons": {}})
            entry["durations"].append(duration)
            entry["reasons"][reason] = entry["reasons"].get(reason, 0) + 1
        return {
            kind: {
                "count": len(e["durations"]),
                "reasons": e["reasons"],
                "duration_s": {k: _round(v) for k, v in _pcts(e["durations"]).items()},
            }
            for kind, e in sorted(kinds.items())
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


async def watch(sidecar: Sidecar, seconds: float) -> Window:
    """Poll /livez, /readyz and /status every 0.5 s; collect every canary sent meanwhile."""
    window = Window()
    began = time.monotonic()
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        window.livez.append(await sidecar.code("/livez"))
        window.readyz.append(await sidecar.code("/readyz"))
        with contextlib.suppress(httpx.HTTPError, ValueError):
            age = (await sidecar.json("/status"))["evidence"]["progress_age"]
            if age is not None:
                window.progress_ages.append(float(age))
        for kind, record in sidecar.daemon.ledger.records.items():
            for result in record.results:
                if result.started >= began:
                    key = (kind.value, result.name, result.started)
                    window.canaries[key] = (result.reason.value, result.duration)
        await asyncio.sleep(WINDOW_POLL_S)  # pacing the polls
    return window


def _window_figure(window: Window) -> dict[str, Any]:
    return {
        "livez_polls": len(window.livez),
        "livez_non_200": sum(1 for c in window.livez if c != 200),
        "readyz_polls": len(window.readyz),
        "readyz_non_200": sum(1 for c in window.readyz if c != 200),
        "progress_age_max_s": max(window.progress_ages, default=None),
        "canaries": window.by_kind(),
    }


async def figure_slow_decode(report: Report, quick: bool, workdir: Path) -> None:
    seconds = 45.0 if quick else 180.0
    async with (
        SimProcess(scheduling_policy="priority") as sim,
        AsyncSimControl(sim.control_url) as control,
        running_sidecar(sim.base_url, workdir) as sidecar,
    ):
        await wait_green(sidecar)
        timeouts_before = _metric(
            await sidecar.text("/metrics"), "sentinel_canary_total", reason="timeout"
        )
        tokens_before = await sim_counter(sim, "vllm:generation_tokens_total")
        await control.set_fault("slow_decode", factor=SLOW_DECODE_FACTOR)
        async with background_load(
            sim.base_url, concurrency=16, duration=seconds + 30, max_tokens=64, request_timeout=120
        ):
            window = await watch(sidecar, seconds)
        metrics = await sidecar.text("/metrics")
        tokens_after = await sim_counter(sim, "vllm:generation_tokens_total")
        status = await sidecar.json("/status")
        await control.clear_all()
    timeouts = _metric(metrics, "sentinel_canary_total", reason="timeout") - timeouts_before
    figure = _window_figure(window)
    figure.update(
        {
            "seconds": seconds,
            "factor": SLOW_DECODE_FACTOR,
            "canary_timeouts": timeouts,
            "generation_tokens_during": tokens_after - tokens_before,
            "hang_detections": _metric(metrics, "sentinel_hang_detections_total"),
            "hangs_at_end": status["verdict"]["hangs"],
            "load_average": _loadavg(),
        }
    )
    report.figures["slow_decode"] = figure
    report.check(
        "slow_decode",
        f"/livez non-200 over {seconds:.0f} s (polled every {WINDOW_POLL_S} s)",
        f"{figure['livez_non_200']} of {figure['livez_polls']}",
        "0",
        figure["livez_non_200"] == 0 and figure["livez_polls"] > 0,
    )
    report.check(
        "slow_decode",
        'canary timeouts (sentinel_canary_total{reason="timeout"})',
        f"{timeouts:.0f}",
        f">= {MIN_CANARY_TIMEOUTS}",
        timeouts >= MIN_CANARY_TIMEOUTS,
    )
    report.check(
        "slow_decode",
        "generation tokens produced meanwhile (progress)",
        f"{tokens_after - tokens_before:.0f}",
        "> 0",
        tokens_after > tokens_before,
    )


async def figure_saturation(report: Report, policy: str, quick: bool, workdir: Path) -> None:
    name = f"saturation_{policy}"
    seconds = 45.0 if quick else 180.0
    async with (
        SimProcess(scheduling_policy=policy, max_num_seqs=4) as sim,
        running_sidecar(sim.base_url, workdir) as sidecar,
    ):
        await wait_green(sidecar)
        done_before = await sim_counter(sim, "vllm:request_success_total")
        async with background_load(
            sim.base_url,
            concurrency=200,
            duration=seconds + 30,
            max_tokens=512,
            request_timeout=300,
        ):
            window = await watch(sidecar, seconds)
            status = await sidecar.json("/status")
            metrics = await sidecar.text("/metrics")
            done_after = await sim_counter(sim, "vllm:request_success_total")
    figure = _window_figure(window)
    figure.update(
        {
            "seconds": seconds,
            "scheduling_policy": policy,
            "priority": status["priority"],
            "load_completions": done_after - done_before,
            "canary_timeouts": _metric(metrics, "sentinel_canary_total", reason="timeout"),
            "canaries_skipped": {
                reason: _metric(metrics, "sentinel_canaries_skipped_total", reason=reason)
                for reason in ("busy", "disabled")
            },
            "hangs_at_end": status["verdict"]["hangs"],
            "load_average": _loadavg(),
        }
    )
    report.figures[name] = figure
    report.check(
        name,
        f"/livez non-200 over {seconds:.0f} s (polled every {WINDOW_POLL_S} s)",
        f"{figure['livez_non_200']} of {figure['livez_polls']}",
        "0",
        figure["livez_non_200"] == 0 and figure["livez_polls"] > 0,
    )
    expected = policy == "priority"
    report.check(
        name,
        "/status priority.effective",
        str(status["priority"]["effective"]),
        str(expected),
        status["priority"]["effective"] is expected,
    )
    for kind, entry in figure["canaries"].items():
        d = entry["duration_s"]
        report.check(
            name,
            f"{kind} canary duration p50 / p90 / p99 / max (n={entry['count']}, "
            f"{json.dumps(entry['reasons'], sort_keys=True)})",
            " / ".join(_seconds(d[k]) for k in ("p50", "p90", "p99", "max")),
            "reported",
            True,
        )


# -- driver ------------------------------------------------------------------------


def _selected(only: Sequence[str] | None) -> list[str]:
    if not only:
        return list(FIGURES)
    chosen: list[str] = []
    for name in only:
        for figure in ALIASES.get(name, (name,)):
            if figure not in FIGURES:
                raise SystemExit(f"unknown figure {name!r}; choose from {', '.join(FIGURES)}")
            if figure not in chosen:
                chosen.append(figure)
    return chosen


async def bench(figures: Sequence[str], quick: bool, workdir: Path) -> Report:
    report = Report(quick=quick, workdir=str(workdir))
    report.load_average["start"] = _loadavg()
    for figure in figures:
        print(f"{figure}: running (load average {_loadavg()})", flush=True)
        began = time.monotonic()
        try:
            if figure == "hang":
                await figure_hang(report, figure, "engine_hang", workdir)
            elif figure == "sigstop":
                await figure_hang(report, figure, "sigstop", workdir)
            elif figure == "livez":
                await figure_livez(report, quick, workdir)
            elif figure == "livez_capture":
                await figure_livez(report, quick, workdir, during_capture=True)
            elif figure == "slow_decode":
                await figure_slow_decode(report, quick, workdir)
            else:
                await figure_saturation(report, figure.removeprefix("saturation_"), quick, workdir)
        except Exception as exc:  # one figure's failure must not hide the others
            error = f"{type(exc).__name__}: {exc}"
            report.figures[figure] = {"error": error}
            report.check(figure, "measurement", f"error: {error}", "completes", False)
        report.load_average[figure] = _loadavg()
        print(f"{figure}: done in {time.monotonic() - began:.0f} s", flush=True)
    report.load_average["end"] = _loadavg()
    return report


def render(report: Report, console: Console) -> None:
    table = Table(title="sentinel, default timings, against the simulated vLLM")
    table.add_column("figure")
    table.add_column("measurement")
    table.add_column("value", justify="right")
    table.add_column("budget")
    table.add_column("result")
    for c in report.checks:
        verdict = "PASS" if c.passed else "FAIL"
        if c.budget == "reported":
            verdict = "-"
        table.add_row(c.figure, c.name, c.value, c.budget, verdict)
    console.print(table)
    for name in ("slow_decode", "saturation_priority", "saturation_fcfs"):
        figure = report.figures.get(name)
        if figure and "error" not in figure:
            console.print(
                f"{name}: /readyz non-200 {figure['readyz_non_200']} of "
                f"{figure['readyz_polls']}, max progress age "
                f"{figure['progress_age_max_s']} s, canaries "
                f"{json.dumps({k: v['reasons'] for k, v in figure['canaries'].items()})}"
            )
    livez = report.figures.get("livez")
    if livez and "error" not in livez:
        lag = livez["client_send_lag_s"]
        loop = livez["daemon_loop_lag_s"]
        console.print(
            f"livez: client send lag p99 {_ms(lag['p99'])} max {_ms(lag['max'])}; latency "
            f"from scheduled send p99 {_ms(livez['latency_from_schedule_s']['p99'])}; "
            f"daemon loop lag p99 {_ms(loop['p99'])} max {_ms(loop['max'])}; daemon process "
            f"CPU {livez['daemon_process_cpu_s']} s in {livez['seconds']:.0f} s; slowest at "
            + ", ".join(
                f"{r['at_s']:.1f}s ({r['latency_s'] * 1000:.1f} ms)" for r in livez["slowest"][:5]
            )
        )
    console.print(
        f"cpus {report.cpu_count}, load average {json.dumps(report.load_average)}; "
        f"daemon log and diagnostics in {report.workdir}"
    )
    console.print("PASS" if report.passed else "FAIL: a budget was missed")


def _log_stream(workdir: Path) -> TextIO:
    return (workdir / "sentinel.log").open("a", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.bench_sentinel")
    parser.add_argument("--quick", action="store_true", help="short measurement windows")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write every figure as JSON")
    parser.add_argument("--only", nargs="+", metavar="NAME", help=f"any of {', '.join(FIGURES)}")
    parser.add_argument("--livez-client", nargs=3, metavar=("URL", "RATE", "SECONDS"))
    args = parser.parse_args(argv)
    if args.livez_client:
        url, rate, seconds = args.livez_client
        print(json.dumps(asyncio.run(livez_client(url, float(rate), float(seconds)))))
        return 0
    figures = _selected(args.only)
    workdir = Path(tempfile.mkdtemp(prefix="sentinel-bench-"))
    with _log_stream(workdir) as log:
        configure_logging("info", renderer="json", stream=log)
        report = asyncio.run(bench(figures, args.quick, workdir))
    render(report, Console(width=160))
    if args.json is not None:
        args.json.write_text(json.dumps(report.to_json(), indent=2) + "\n", encoding="utf-8")
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
