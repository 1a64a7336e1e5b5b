"""Benchmark: what sentinel costs its pod — memory, CPU and probe latency — with shipped defaults.

Run: ``make bench-footprint`` or ``python -m tests.bench.bench_footprint [--quick]
[--json PATH]``. The simulated vLLM runs as a subprocess, and so does
``sentinel run`` (a fresh interpreter, every setting at its default except the
listen port and the diagnostics directory, and no gRPC listener, as the base
manifests run it), so the figures are the ones a pod
would see: the imports a start pays, and nothing of the benchmark's own.

One timeline, about 12 minutes (``--quick``: about 2.5, every window shorter):

1. ``start``: seconds from starting ``sentinel run`` to ``/livez`` answering at
   all, and to all three probes answering 200 (the first canaries passed).
2. ``rss``: resident memory 60 s after start and 10 minutes after start.
3. ``cpu_idle``: the process's CPU time (its children included) over 5 minutes
   with the simulator idle, as a share of one core; ``cpu_busy``: the same over
   5 minutes with 64 streaming requests in flight (``python -m chaos.load``, in
   its own process). CPU time is what the kernel accounted to sentinel, so other
   work on the machine changes it little; wall-clock figures below are affected.
4. ``livez``: ``/livez`` latency at 200 requests/s, open loop, over 20
   keep-alive connections and over a fresh connection per request: with the
   target healthy, then from the moment the engine hangs (``engine_hang``)
   until after the incident bundle is written (the requests sent while the
   capture ran are also reported on their own), then with it confirmed hung.

The load generator runs in its own process. Open loop: request *i* is
started at ``start + i / rate`` whether or not earlier ones have answered, and
its latency is measured from that scheduled moment, so a stalled server (or a
full connection pool) shows as latency, not as fewer requests. The client's
own lateness (scheduled to actually sent) is reported next to it.

On two CPUs or more the sidecar is pinned to a CPU of its own (as a pod's CPU
request gives it) and the simulator, the load and the clients to the others.
A fresh connection is opened as the kubelet's HTTP prober opens one (raw, with
``Connection: close``), so the figure is the sidecar's, not a Python client's.

Budgets (issues 13 and 32): RSS at most 70 MB at 10 minutes and at most 2 MB
of growth after 60 s; CPU at most 1 % of a core idle and 2 % busy; ``/livez``
p99 under 5 ms over keep-alive connections, healthy and hung, capture
included, and over fresh connections with the target hung (the kubelet's
way); ``/livez`` answering within 1.5 s of start. The process exits 1 when one is
missed. The daemon's JSON log stays in the printed work folder.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import httpx
import psutil
from rich.console import Console
from rich.table import Table

from chaos.ports import free_port
from sentinel_sim.launch import SimProcess

MB = 1024 * 1024
RATE = 200.0
KEEPALIVE_CONNECTIONS = 20
BUSY_STREAMS = 64
BUSY_MAX_TOKENS = 256

RSS_BUDGET_MB = 70.0
RSS_GROWTH_BUDGET_MB = 2.0
CPU_IDLE_BUDGET = 0.01
CPU_BUSY_BUDGET = 0.02
LIVEZ_P99_BUDGET_S = 0.005
START_BUDGET_S = 1.5

GREEN_DEADLINE_S = 90.0
HANG_DEADLINE_S = 90.0
# From the hang to the bundle on disk takes one missed canary deadline plus the
# capture (about 15 s with the shipped defaults); the client runs well past it.
HANG_WINDOW_S = 45.0


@dataclass(frozen=True, slots=True)
class Durations:
    """Every window of the timeline, in seconds; ``--quick`` shortens all of them."""

    rss_early: float = 60.0
    rss_late: float = 600.0
    cpu_idle: float = 300.0
    cpu_busy: float = 300.0
    livez: float = 10.0

    @classmethod
    def quick(cls) -> Durations:
        return cls(rss_early=20.0, rss_late=80.0, cpu_idle=20.0, cpu_busy=20.0, livez=4.0)


@dataclass(slots=True)
class Check:
    name: str
    value: str
    budget: str
    passed: bool


@dataclass(slots=True)
class Report:
    quick: bool
    workdir: str
    cpu_count: int | None = os.cpu_count()
    pinned: str = ""
    load_average: list[list[float]] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)

    def check(self, name: str, value: str, budget: str, passed: bool) -> None:
        self.checks.append(Check(name, value, budget, passed))

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)


def _pcts(values: Sequence[float]) -> dict[str, float | None]:
    """p50/p99/max in seconds (inclusive quantiles); None when empty."""
    if not values:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    if len(values) == 1:
        return {"n": 1, "p50": values[0], "p99": values[0], "max": values[0]}
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {"n": len(values), "p50": cuts[49], "p99": cuts[98], "max": max(values)}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.2f} ms"


# -- the open-loop /livez client (its own process) --------------------------------


async def livez_client(url: str, rate: float, seconds: float, keepalive: bool) -> dict[str, Any]:
    """Requests on a fixed schedule; latency from the scheduled send, not from the actual one."""
    connector = aiohttp.TCPConnector(limit=KEEPALIVE_CONNECTIONS, force_close=False)
    timeout = aiohttp.ClientTimeout(total=5)
    records: list[tuple[float, float, float, int]] = []
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one(scheduled: float) -> None:
            sent = time.monotonic()
            status = 0
            try:
                if keepalive:
                    async with session.get(url) as response:
                        await response.read()
                        status = response.status
                else:
                    status = await asyncio.wait_for(kubelet_get(url), timeout=5)
            except (aiohttp.ClientError, OSError, ValueError, TimeoutError):
                status = 0
            records.append((scheduled, sent, time.monotonic(), status))

        if keepalive:  # open the pool before the clock starts (not recorded)
            await asyncio.gather(*(one(0.0) for _ in range(KEEPALIVE_CONNECTIONS)))
            records.clear()
        start = time.monotonic() + 0.05
        tasks: list[asyncio.Task[None]] = []
        for i in range(int(rate * seconds)):
            scheduled = start + i / rate
            delay = scheduled - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)  # pacing the schedule, not waiting on replies
            tasks.append(asyncio.create_task(one(scheduled)))
        await asyncio.gather(*tasks)
    # CLOCK_MONOTONIC is shared by every process, so the caller can place these in time.
    return {"records": [(s, sent - s, done - s, code) for s, sent, done, code in records]}


async def kubelet_get(url: str) -> int:
    """One GET as the kubelet's HTTP prober sends it: a new connection, ``Connection:
    close``, the answer read to the end; its status code. Raw, so the figure is the
    sidecar's and not a Python client's per-connection cost."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        request = (
            f"GET {parts.path or '/'} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            "User-Agent: kube-probe/1.30\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        )
        writer.write(request.encode())
        answer = await reader.read()
    finally:
        writer.close()
    status = answer.split(b" ", 2)
    if len(status) < 2:  # closed with no status line: a failed probe to the kubelet
        raise ValueError(f"no HTTP status line in {answer[:40]!r}")
    return int(status[1])


def pin(sidecar_pid: int) -> str:
    """The sidecar on a CPU of its own, as a pod's CPU request gives it; the
    simulator, the load and the clients (this process's children) on the others.
    Said in the report; nothing is pinned on a single CPU."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return "not pinned (one CPU)"
    os.sched_setaffinity(0, cpus[:-1])
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if child.pid != sidecar_pid:
                child.cpu_affinity(cpus[:-1])
    psutil.Process(sidecar_pid).cpu_affinity(cpus[-1:])
    return f"sentinel on CPU {cpus[-1]}; the simulator, load and clients on CPUs {cpus[:-1]}"


def _summarise(
    records: Sequence[Sequence[float]], window: tuple[float, float] | None = None
) -> dict[str, Any]:
    chosen = [r for r in records if window is None or window[0] <= r[0] <= window[1]]
    return {
        "latency_s": _pcts([r[2] for r in chosen]),
        "send_lag_s": _pcts([r[1] for r in chosen]),
        "non_200": sum(1 for r in chosen if r[3] != 200),
    }


async def run_livez(
    url: str, seconds: float, *, keepalive: bool, rate: float = RATE
) -> list[list[float]]:
    """One open-loop run in a child process; its records (scheduled, lag, latency, code)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.bench.bench_footprint",
        "--livez-client",
        url,
        str(rate),
        str(seconds),
        "keepalive" if keepalive else "fresh",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"the /livez client exited with {proc.returncode}")
    records: list[list[float]] = json.loads(out)["records"]
    return records


# -- the sidecar under test --------------------------------------------------------


@dataclass
class Sidecar:
    proc: subprocess.Popen[bytes]
    ps: psutil.Process
    url: str
    log_path: Path
    started: float

    def cpu_seconds(self) -> tuple[float, float]:
        """User + system time of sentinel with its reaped children, and of those children alone.

        The children are the capture processes a suspicion starts (and the
        py-spy dumps they run).
        """
        t = self.ps.cpu_times()
        children = float(t.children_user + t.children_system)
        return float(t.user + t.system) + children, children

    def rss_mb(self) -> float:
        return float(self.ps.memory_info().rss) / MB

    def events(self, name: str) -> list[float]:
        """Monotonic times of the log events called ``name`` (from their UTC timestamps)."""
        offset = time.time() - time.monotonic()
        found: list[float] = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict) and event.get("event") == name:
                    stamp = datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00"))
                    found.append(stamp.timestamp() - offset)
        return found


def start_sidecar(target: str, workdir: Path) -> Sidecar:
    port = free_port()
    log_path = workdir / "sentinel.log"
    command = [
        sys.executable,
        "-m",
        "sentinel",
        "run",
        "--target",
        target,
        "--listen",
        f"127.0.0.1:{port}",
        # As the shipped manifests run it: the gRPC listener only comes with
        # the grpc-probes component.
        "--grpc-listen",
        "off",
        "--diagnostics-dir",
        str(workdir / "diagnostics"),
        "--log-format",
        "json",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SENTINEL_")}
    with open(log_path, "wb") as log:
        started = time.monotonic()
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
    return Sidecar(proc, psutil.Process(proc.pid), f"http://127.0.0.1:{port}", log_path, started)


def stop_sidecar(sidecar: Sidecar) -> None:
    if sidecar.proc.poll() is None:
        sidecar.proc.terminate()
        try:
            sidecar.proc.wait(15)
        except subprocess.TimeoutExpired:
            sidecar.proc.kill()
            sidecar.proc.wait()


async def time_to_answer(sidecar: Sidecar) -> tuple[float, float]:
    """Seconds from the start to the first /livez answer, and to /startupz+/readyz+/livez 200."""
    answered: float | None = None
    async with httpx.AsyncClient(timeout=1.0) as client:
        while True:
            now = time.monotonic()
            if now - sidecar.started > GREEN_DEADLINE_S:
                raise RuntimeError(f"sentinel not green within {GREEN_DEADLINE_S:.0f} s")
            if sidecar.proc.poll() is not None:
                raise RuntimeError(f"sentinel exited with {sidecar.proc.returncode}")
            try:
                if answered is None:
                    await client.get(sidecar.url + "/livez")
                    answered = time.monotonic() - sidecar.started
                codes = [
                    (await client.get(sidecar.url + p)).status_code
                    for p in ("/startupz", "/readyz", "/livez")
                ]
                if codes == [200, 200, 200]:
                    return answered, time.monotonic() - sidecar.started
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.005 if answered is None else 0.25)


async def sleep_until(moment: float) -> None:
    await asyncio.sleep(max(0.0, moment - time.monotonic()))


async def cpu_share(sidecar: Sidecar, seconds: float) -> tuple[float, float]:
    """Share of a core: sentinel with its children, and the children alone."""
    (total, children), wall = sidecar.cpu_seconds(), time.monotonic()
    await asyncio.sleep(seconds)
    (total_after, children_after), elapsed = sidecar.cpu_seconds(), time.monotonic() - wall
    return (total_after - total) / elapsed, (children_after - children) / elapsed


async def busy_load(target: str, seconds: float) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "chaos.load",
        "--target",
        target,
        "--concurrency",
        str(BUSY_STREAMS),
        "--stream",
        "--duration",
        str(seconds),
        "--max-tokens",
        str(BUSY_MAX_TOKENS),
        "--timeout",
        str(seconds + 60),
        "--json",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )


async def stop_process(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


async def wait_for_event(sidecar: Sidecar, name: str, since: float, deadline: float) -> float:
    while time.monotonic() - since < deadline:
        found = [t for t in sidecar.events(name) if t >= since - 1.0]
        if found:
            return found[0]
        await asyncio.sleep(0.25)
    raise RuntimeError(f"no {name!r} in the log within {deadline:.0f} s")


# -- the timeline --------------------------------------------------------------------


async def measure(report: Report, d: Durations, workdir: Path) -> None:
    figures = report.figures
    async with SimProcess(log_path=workdir / "sim.log") as sim:
        sidecar = start_sidecar(sim.base_url, workdir)
        report.pinned = pin(sidecar.proc.pid)
        print(f"pinned: {report.pinned}")
        try:
            answered, green = await time_to_answer(sidecar)
            figures["start"] = {"livez_answer_s": round(answered, 3), "green_s": round(green, 3)}
            print(f"start: /livez answered after {answered:.3f} s, green after {green:.1f} s")

            await sleep_until(sidecar.started + d.rss_early)
            figures["rss"] = {"early_s": d.rss_early, "early_mb": round(sidecar.rss_mb(), 1)}
            print(f"rss after {d.rss_early:.0f} s: {figures['rss']['early_mb']} MB")

            report.load_average.append([round(x, 2) for x in os.getloadavg()])
            idle, idle_children = await cpu_share(sidecar, d.cpu_idle)
            figures["cpu_idle"] = {
                "seconds": d.cpu_idle,
                "share": round(idle, 5),
                "children_share": round(idle_children, 5),
            }
            print(f"cpu idle over {d.cpu_idle:.0f} s: {_cpu_line(idle, idle_children)}")

            load = await busy_load(sim.base_url, d.cpu_busy + 10)
            try:
                await asyncio.sleep(5)  # the load's ramp-up is not part of the window
                report.load_average.append([round(x, 2) for x in os.getloadavg()])
                late = asyncio.create_task(
                    _rss_at(sidecar, sidecar.started + d.rss_late), name="rss-late"
                )
                busy, busy_children = await cpu_share(sidecar, d.cpu_busy)
                busy_ended = time.monotonic()
            finally:
                await stop_process(load)
            figures["cpu_busy"] = {
                "seconds": d.cpu_busy,
                "share": round(busy, 5),
                "children_share": round(busy_children, 5),
                "captures": sum(
                    busy_ended - d.cpu_busy <= t <= busy_ended
                    for t in sidecar.events("diagnostics_written")
                ),
            }
            print(
                f"cpu busy over {d.cpu_busy:.0f} s: {_cpu_line(busy, busy_children)}; "
                f"{figures['cpu_busy']['captures']} bundles captured"
            )
            figures["rss"].update(late_s=d.rss_late, late_mb=round(await late, 1))
            print(f"rss after {d.rss_late:.0f} s: {figures['rss']['late_mb']} MB")

            await measure_livez(report, sidecar, sim, d)
        finally:
            stop_sidecar(sidecar)


def _cpu_line(share: float, children: float) -> str:
    return (
        f"{share * 100:.2f} % of a core, of which {children * 100:.2f} % in capture "
        f"processes and their stack dumps"
    )


async def _rss_at(sidecar: Sidecar, moment: float) -> float:
    await sleep_until(moment)
    return sidecar.rss_mb()


async def measure_livez(report: Report, sidecar: Sidecar, sim: SimProcess, d: Durations) -> None:
    url = sidecar.url + "/livez"
    livez: dict[str, Any] = {}
    report.figures["livez"] = livez
    for keepalive in (True, False):
        name = f"healthy_{'keepalive' if keepalive else 'fresh'}"
        livez[name] = _summarise(await run_livez(url, d.livez, keepalive=keepalive))
        print(f"livez {name}: {_line(livez[name])}")

    # From the hang on: the suspicion, the capture and the confirmation all fall inside.
    injected = time.monotonic()
    client = asyncio.create_task(run_livez(url, HANG_WINDOW_S, keepalive=True))
    await asyncio.to_thread(sim.control.set_fault, "engine_hang")
    opened = await wait_for_event(sidecar, "incident_opened", injected, HANG_DEADLINE_S)
    written = await wait_for_event(sidecar, "diagnostics_written", injected, HANG_DEADLINE_S)
    records = await client
    livez["hang_keepalive"] = _summarise(records)
    livez["capture_keepalive"] = _summarise(records, (opened, written))
    livez["capture_window_s"] = round(written - opened, 3)
    livez["capture_covered"] = bool(records) and records[-1][0] >= written
    livez["non_200_after_hang"] = livez["hang_keepalive"]["non_200"]
    print(f"livez hang_keepalive (capture included): {_line(livez['hang_keepalive'])}")
    print(f"livez during capture ({written - opened:.2f} s): {_line(livez['capture_keepalive'])}")
    for keepalive in (True, False):
        name = f"hung_{'keepalive' if keepalive else 'fresh'}"
        livez[name] = _summarise(await run_livez(url, d.livez, keepalive=keepalive))
        print(f"livez {name}: {_line(livez[name])}")
    await asyncio.to_thread(sim.control.clear_all)


def _line(summary: dict[str, Any]) -> str:
    lat, lag = summary["latency_s"], summary["send_lag_s"]
    return (
        f"n={lat['n']} p50 {_ms(lat['p50'])} p99 {_ms(lat['p99'])} max {_ms(lat['max'])} "
        f"(client send lag p99 {_ms(lag['p99'])}); non-200 {summary['non_200']}"
    )


def judge(report: Report) -> None:
    f = report.figures
    if "start" in f:
        answer = f["start"]["livez_answer_s"]
        report.check("/livez answers after start", f"{answer:.2f} s", "<= 1.5 s", answer <= 1.5)
    rss = f.get("rss", {})
    if "late_mb" in rss:
        late, growth = rss["late_mb"], rss["late_mb"] - rss["early_mb"]
        report.check(f"RSS at {rss['late_s']:.0f} s", f"{late:.1f} MB", "<= 70 MB", late <= 70)
        report.check(
            f"RSS growth {rss['early_s']:.0f} s -> {rss['late_s']:.0f} s",
            f"{growth:+.1f} MB",
            "<= 2 MB",
            growth <= RSS_GROWTH_BUDGET_MB,
        )
    for key, budget in (("cpu_idle", CPU_IDLE_BUDGET), ("cpu_busy", CPU_BUSY_BUDGET)):
        if key in f:
            share = f[key]["share"]
            report.check(
                f"CPU, {key[4:]} ({f[key]['seconds']:.0f} s)",
                f"{share * 100:.2f} % of a core",
                f"<= {budget * 100:.0f} %",
                share <= budget,
            )
    if "capture_covered" in f.get("livez", {}):
        covered = f["livez"]["capture_covered"]
        report.check("capture inside the hung window", str(covered), "True", covered)
    for name, summary in f.get("livez", {}).items():
        if not isinstance(summary, dict):
            continue
        lat = summary["latency_s"]
        value = f"p50 {_ms(lat['p50'])} p99 {_ms(lat['p99'])} max {_ms(lat['max'])}"
        kubelet = name.startswith("hung")  # the kubelet probes on a fresh connection each time
        if (name.endswith("keepalive") or kubelet) and lat["p99"] is not None:
            passed = lat["p99"] < LIVEZ_P99_BUDGET_S
            report.check(f"/livez {name} (n={lat['n']})", value, "p99 < 5 ms", passed)
        else:
            report.check(f"/livez {name} (n={lat['n']})", value, "reported", True)


def render(report: Report, console: Console) -> None:
    table = Table(title=f"sentinel footprint{' (quick)' if report.quick else ''}")
    for column in ("figure", "value", "budget", "ok"):
        table.add_column(column)
    for c in report.checks:
        table.add_row(c.name, c.value, c.budget, "yes" if c.passed else "NO")
    console.print(table)
    console.print(
        f"{report.cpu_count} CPUs, {report.pinned or 'not pinned'}; "
        f"load average at the CPU windows: {report.load_average}; "
        f"the machine may be shared, which moves the latency figures more than the CPU ones."
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="every window shortened (~2.5 min)")
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument("--livez-client", nargs=4, metavar=("URL", "RATE", "SECONDS", "MODE"))
    args = parser.parse_args(argv)
    if args.livez_client:
        url, rate, seconds, mode = args.livez_client
        result = asyncio.run(livez_client(url, float(rate), float(seconds), mode == "keepalive"))
        print(json.dumps(result))
        return 0
    workdir = Path(tempfile.mkdtemp(prefix="sentinel-footprint-"))
    report = Report(quick=args.quick, workdir=str(workdir))
    print(f"work folder (sentinel's log, the simulator's log, bundles): {workdir}")
    durations = Durations.quick() if args.quick else Durations()
    try:
        asyncio.run(measure(report, durations, workdir))
    finally:
        judge(report)
        render(report, Console())
        if args.json:
            payload = {**asdict(report), "passed": report.passed}
            args.json.write_text(json.dumps(payload, indent=2))
    return 0 if report.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
