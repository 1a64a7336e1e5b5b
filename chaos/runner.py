"""Runs chaos scenarios: target, sentinel, load, fault, probers, samples, and the figures.

For each scenario the runner starts (or reuses) the target (a simulated vLLM
or a real vLLM on a tiny generated model), runs sentinel in-process with the
scenario's settings (defaults unless stated; only ports and the diagnostics
directory are the runner's), waits for sentinel's startup to pass, then starts
the load (``python -m chaos.load`` in a subprocess, so the load's client
cannot slow sentinel's event loop), injects the fault at its time and clears
it at its end. Throughout, it samples sentinel's ``/livez`` ``/readyz``
``/startupz`` ``/status``, vLLM's ``/health`` and ``/metrics`` every second,
collects sentinel's canary results, and runs three kubelet-like probers
(sentinel's ``/livez``, vLLM's ``/health``, the naive canary). Nothing is ever
killed by a prober; the figures say when the kubelet would have.

:func:`summarize` turns one run's record into the report's figures and checks
the scenario's expectations.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.live import Live
from rich.text import Text

from chaos.load import percentiles
from chaos.naive import NaiveCanary
from chaos.prober import Kill, Prober, ProbeSettings, http_check
from chaos.scenario import Scenario, TargetSpec, sentinel_settings
from sentinel.canary.result import CanaryKind
from sentinel.config import Settings
from sentinel.daemon import Daemon

SAMPLE_PERIOD = 1.0
SETTLE = 5.0  # seconds watched after green-again, so a relapse would show


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RunnerError(RuntimeError):
    """A scenario could not be run (target did not start, sentinel never became ready)."""


# -- targets ---------------------------------------------------------------------------


class Target(Protocol):
    spec: TargetSpec
    base_url: str

    async def start(self) -> float: ...
    async def stop(self) -> None: ...
    async def healthy(self) -> bool: ...
    async def inject(self, scenario: Scenario) -> str: ...
    async def clear(self, scenario: Scenario) -> str: ...
    def alive(self) -> bool: ...
    async def restart(self) -> float: ...


class SimTarget:
    """The simulated vLLM on a fixed port, so a restarted one is the same target."""

    def __init__(self, spec: TargetSpec, workdir: Path) -> None:
        from sentinel_sim.launch import SimProcess

        self.spec = spec
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.workdir = workdir
        self._factory = SimProcess
        self.sim: Any = None

    def _new(self) -> Any:
        options: dict[str, Any] = dict(self.spec.sim_options)
        if self.spec.max_num_seqs is not None:
            options["max_num_seqs"] = self.spec.max_num_seqs
        return self._factory(
            scheduling_policy=self.spec.scheduling_policy,
            extra_args=["--port", str(self.port)],
            log_path=self.workdir / "sim.log",
            **options,
        )

    async def start(self) -> float:
        started = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.sim = self._new()
        await asyncio.to_thread(self.sim.start)
        return time.monotonic() - started

    async def stop(self) -> None:
        if self.sim is not None:
            await asyncio.to_thread(self.sim.stop)
            self.sim = None

    async def restart(self) -> float:
        await self.stop()
        return await self.start()

    def alive(self) -> bool:
        return self.sim is not None and self.sim.returncode() is None

    async def healthy(self) -> bool:
        if not self.alive():
            return False
        await asyncio.to_thread(self.sim.control.clear_all)
        with contextlib.suppress(OSError):
            os.kill(self.sim.engine_pid, signal.SIGCONT)
        return True

    async def inject(self, scenario: Scenario) -> str:
        fault = scenario.fault
        if fault.kind == "sigstop":
            os.kill(self.sim.engine_pid, signal.SIGSTOP)
            return f"SIGSTOP VLLM::EngineCore pid {self.sim.engine_pid}"
        if fault.kind == "sigkill":
            os.kill(self.sim.engine_pid, signal.SIGKILL)
            return f"SIGKILL VLLM::EngineCore pid {self.sim.engine_pid}"
        await asyncio.to_thread(self.sim.control.set_fault, fault.kind, **fault.params)
        return f"fault {fault.kind} {fault.params or ''}".strip()

    async def clear(self, scenario: Scenario) -> str:
        if scenario.fault.kind == "sigstop":
            os.kill(self.sim.engine_pid, signal.SIGCONT)
            return "SIGCONT VLLM::EngineCore"
        await asyncio.to_thread(self.sim.control.clear_all)
        return f"fault {scenario.fault.kind} cleared"


class VllmTarget:
    """A real vLLM (CPU build, tiny generated model) on a fixed port."""

    def __init__(self, spec: TargetSpec, workdir: Path) -> None:
        self.spec = spec
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        # absolute: vLLM runs in its log's folder and must find the same fault directory
        self.workdir = workdir.resolve()
        self.server: Any = None

    def _build(self) -> Any:
        from chaos.vllm_engine import env as engine_env
        from chaos.vllm_engine.server import VllmServer

        env = engine_env.ensure_env()
        model = engine_env.ensure_model(env, self.spec.model)
        port = self.port

        class FixedPortServer(VllmServer):
            def command(self) -> list[str]:
                self.port = port  # the same URL across restarts: sentinel's target is fixed
                return super().command()

        extra = list(self.spec.extra_args)
        if self.spec.max_num_seqs is not None:
            extra += ["--max-num-seqs", str(self.spec.max_num_seqs)]
        return FixedPortServer(
            env.python,
            model,
            served_model_name=f"tiny-{self.spec.model}",
            fault_dir=self.workdir / "faults",
            log_path=self.workdir / "vllm.log",
            scheduling_policy=self.spec.scheduling_policy,
            extra_args=extra,
        )

    async def start(self) -> float:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.server is None:
            self.server = await asyncio.to_thread(self._build)
        self.server.faults.clear_all()
        await asyncio.to_thread(self.server.start)
        return float(await asyncio.to_thread(self.server.wait_ready, self.spec.start_timeout))

    async def stop(self) -> None:
        if self.server is not None:
            await asyncio.to_thread(self.server.stop)

    async def restart(self) -> float:
        self.server.faults.clear_all()
        return float(await asyncio.to_thread(self.server.restart, self.spec.start_timeout))

    def alive(self) -> bool:
        return self.server is not None and bool(self.server.alive())

    async def healthy(self) -> bool:
        if not self.alive():
            return False
        self.server.faults.clear_all()
        await asyncio.to_thread(self.server.resume_all)

        def one() -> bool:
            with httpx.Client(base_url=self.base_url) as client:
                return self.server.complete(client, timeout=30.0) is not None

        return await asyncio.to_thread(one)

    def _title(self, scenario: Scenario) -> str:
        from chaos.vllm_engine.server import ENGINE_TITLE, WORKER_TITLE

        return WORKER_TITLE if scenario.fault.process == "worker" else ENGINE_TITLE

    async def inject(self, scenario: Scenario) -> str:
        fault = scenario.fault
        if fault.kind in ("sigstop", "sigkill"):
            signum = signal.SIGSTOP if fault.kind == "sigstop" else signal.SIGKILL
            title = self._title(scenario)
            pids = self.server.signal(title, signum)
            return f"{signum.name} {title} pid {', '.join(map(str, pids))}"
        self.server.faults.set(fault.kind, **fault.params)
        return f"plugin fault {fault.kind} {fault.params or ''}".strip()

    async def clear(self, scenario: Scenario) -> str:
        if scenario.fault.kind == "sigstop":
            title = self._title(scenario)
            self.server.signal(title, signal.SIGCONT)
            return f"SIGCONT {title}"
        self.server.faults.clear_all()
        return f"plugin fault {scenario.fault.kind} cleared"


def make_target(spec: TargetSpec, workdir: Path) -> Target:
    return SimTarget(spec, workdir) if spec.kind == "sim" else VllmTarget(spec, workdir)


# -- the record of one run --------------------------------------------------------------


@dataclass(slots=True)
class Sample:
    at: float
    livez: int | None
    readyz: int | None
    startupz: int | None
    vllm_health: int | None
    hangs: list[str] = field(default_factory=list)
    epoch: int | None = None
    running: float | None = None
    waiting: float | None = None
    completed: float | None = None
    naive_ok: bool | None = None


@dataclass(slots=True)
class CanaryPoint:
    kind: str
    started: float
    duration: float
    ok: bool
    reason: str


@dataclass(slots=True)
class Event:
    at: float
    what: str


@dataclass(slots=True)
class RunRecord:
    """Everything observed in one scenario; times are seconds since sentinel started."""

    scenario: Scenario
    probe_settings: ProbeSettings
    samples: list[Sample] = field(default_factory=list)
    canaries: list[CanaryPoint] = field(default_factory=list)
    naive: list[CanaryPoint] = field(default_factory=list)
    naive_trips: list[float] = field(default_factory=list)
    kills: dict[str, list[Kill]] = field(default_factory=dict)
    probes: dict[str, list[tuple[float, bool]]] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    ready_at: float | None = None
    fault_start: float | None = None
    fault_end: float | None = None
    load_window: tuple[float, float] | None = None
    load_summary: dict[str, Any] | None = None
    server_exit_at: float | None = None
    server_restarted_at: float | None = None
    end: float = 0.0
    error: str | None = None
    priority_effective: bool | None = None


def _metric_values(text: str) -> dict[str, float]:
    wanted = {
        "vllm:num_requests_running": "running",
        "vllm:num_requests_waiting": "waiting",
        "vllm:request_success_total": "completed",
    }
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = wanted.get(sample.name)
            if key is not None:
                out[key] = out.get(key, 0.0) + float(sample.value)
    return out


class SentinelThread:
    """sentinel's daemon on an event loop of its own, in a thread.

    The probers, the sampler and the naive canary run on the runner's loop, so
    a stall inside sentinel shows as slow ``/livez`` answers (as the kubelet
    would see it) and cannot delay the other baselines' probes.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.daemon: Daemon | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="sentinel", daemon=True)

    def _main(self) -> None:
        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self.daemon = Daemon(self.settings)
            task = asyncio.create_task(self.daemon.run(self._stop))
            started = asyncio.create_task(self.daemon.started.wait())
            await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
            self._started.set()
            await task

        try:
            asyncio.run(serve())
        except BaseException as exc:
            self._error = exc
        finally:
            self._started.set()

    async def start(self, within: float = 15.0) -> Daemon:
        self._thread.start()
        if not await asyncio.to_thread(self._started.wait, within):
            raise RunnerError(f"sentinel did not start within {within}s")
        if self._error is not None or self.daemon is None or self.daemon.http is None:
            raise RunnerError(f"sentinel did not start: {self._error!r}")
        return self.daemon

    async def stop(self, within: float = 30.0) -> None:
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # its loop has already ended
                self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread.is_alive():
            await asyncio.to_thread(self._thread.join, within)


class ScenarioRun:
    """One scenario against an already started target."""

    def __init__(
        self,
        scenario: Scenario,
        target: Target,
        workdir: Path,
        console: Console,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.scenario = scenario
        self.target = target
        self.workdir = workdir
        self.console = console
        self.clock = clock
        spec = scenario.prober
        self.probe_settings = ProbeSettings.from_manifest(spec.manifest).override(
            spec.period, spec.timeout, spec.failure_threshold, spec.grace
        )
        self.record = RunRecord(scenario, self.probe_settings)
        self.t0 = clock()
        self.phase = "starting sentinel"
        self._seen: set[tuple[str, float]] = set()
        self._last: Sample | None = None
        self._naive_canary: NaiveCanary | None = None

    def now(self) -> float:
        return self.clock() - self.t0

    def event(self, what: str) -> None:
        at = self.now()
        self.record.events.append(Event(at, what))
        self.console.log(f"[bold]{self.scenario.name}[/] {at:6.1f}s {what}")

    # -- sampling -----------------------------------------------------------------------

    async def _code(self, client: httpx.AsyncClient, url: str) -> int | None:
        try:
            return (await client.get(url)).status_code
        except httpx.HTTPError:
            return None

    async def _sample(self, client: httpx.AsyncClient, daemon: Daemon) -> Sample:
        assert daemon.http is not None
        base, vllm = daemon.http.url, self.target.base_url
        at = self.now()
        livez, readyz, startupz, health = await asyncio.gather(
            self._code(client, base + "/livez"),
            self._code(client, base + "/readyz"),
            self._code(client, base + "/startupz"),
            self._code(client, vllm + "/health"),
        )
        sample = Sample(at, livez, readyz, startupz, health)
        status = daemon.state.snapshot().status
        verdict = status.get("verdict") or {}
        sample.hangs = [str(h["kind"]) for h in verdict.get("hangs", [])]
        sample.epoch = (status.get("server") or {}).get("epoch")
        self.record.priority_effective = (status.get("priority") or {}).get("effective")
        with contextlib.suppress(httpx.HTTPError, ValueError):
            response = await client.get(vllm + "/metrics")
            if response.status_code == 200:
                values = _metric_values(response.text)
                sample.running = values.get("running")
                sample.waiting = values.get("waiting")
                sample.completed = values.get("completed")
        self._collect_canaries(daemon)
        if self._naive_canary is not None:
            sample.naive_ok = not self._naive_canary.tripped
        return sample

    def _collect_canaries(self, daemon: Daemon) -> None:
        for kind, record in list(daemon.ledger.records.items()):
            try:
                results = list(record.results)  # written by sentinel's thread meanwhile
            except RuntimeError:
                continue  # mutated while copied: the next sample takes them
            for result in results:
                key = (result.name, result.started)
                if key in self._seen:
                    continue
                self._seen.add(key)
                self.record.canaries.append(
                    CanaryPoint(
                        kind.value,
                        result.started - self.t0,
                        result.duration,
                        result.ok,
                        result.reason.value,
                    )
                )

    async def _sampler(self, daemon: Daemon, live: Live) -> None:
        async with httpx.AsyncClient(timeout=2.0) as client:
            next_at = self.clock()
            while True:
                sample = await self._sample(client, daemon)
                self.record.samples.append(sample)
                self._note_changes(sample)
                live.update(self._status_line(sample))
                next_at += SAMPLE_PERIOD
                await asyncio.sleep(max(0.0, next_at - self.clock()))

    def _note_changes(self, sample: Sample) -> None:
        last = self._last
        self._last = sample
        if last is None:
            return
        for name in ("livez", "readyz", "startupz", "vllm_health"):
            before, after = getattr(last, name), getattr(sample, name)
            if before != after:
                self.event(f"{name} {before} -> {after}")
        if sample.hangs != last.hangs:
            self.event(f"sentinel hangs: {', '.join(sample.hangs) or 'none'}")

    def _status_line(self, sample: Sample) -> Text:
        def mark(code: int | None) -> str:
            return "[green]200[/]" if code == 200 else f"[red]{code or '---'}[/]"

        load = "" if sample.running is None else f" running {sample.running:.0f}"
        if sample.waiting is not None:
            load += f" waiting {sample.waiting:.0f}"
        kills = " ".join(f"{k}:{len(v)}" for k, v in self.record.kills.items() if v)
        return Text.from_markup(
            f"[bold]{self.scenario.name}[/] {sample.at:6.1f}s [cyan]{self.phase}[/] | "
            f"livez {mark(sample.livez)} readyz {mark(sample.readyz)} "
            f"startupz {mark(sample.startupz)} | vLLM /health {mark(sample.vllm_health)}"
            f" |{load} | would-kill {kills or 'none'}"
        )

    # -- the load ------------------------------------------------------------------------

    async def _load(self) -> None:
        load = self.scenario.load
        assert load is not None
        mix = ",".join(f"{k}={v}" for k, v in load.mix.items())
        args = [
            sys.executable,
            "-m",
            "chaos.load",
            "--target",
            self.target.base_url,
            "--concurrency",
            str(load.concurrency),
            "--duration",
            str(load.duration),
            "--prompt-tokens",
            str(load.prompt_tokens),
            "--max-tokens",
            str(load.max_tokens),
            "--mix",
            mix,
            "--timeout",
            str(load.timeout),
            "--json",
        ]
        if load.priority is not None:
            args += ["--priority", str(load.priority)]
        process = await asyncio.create_subprocess_exec(
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        started = self.now()
        self.event(f"load started: {load.concurrency} concurrent, {load.duration:g}s")
        try:
            out, err = await process.communicate()
        finally:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        self.record.load_window = (started, self.now())
        lines = out.decode(errors="replace").strip().splitlines()
        try:
            self.record.load_summary = json.loads(lines[-1])
        except (IndexError, ValueError):
            self.record.load_summary = {"error": err.decode(errors="replace")[-2000:]}
        self.event("load finished")

    # -- the run -------------------------------------------------------------------------

    async def run(self) -> RunRecord:
        scenario = self.scenario
        diagnostics = self.workdir / "diagnostics"
        settings = sentinel_settings(scenario, self.target.base_url, diagnostics)
        self.t0 = self.clock()
        sentinel = SentinelThread(settings)
        background: list[asyncio.Task[Any]] = []
        live = Live(Text(""), console=self.console, refresh_per_second=2, transient=True)
        try:
            daemon = await sentinel.start()
            assert daemon.http is not None
            self.event(f"sentinel listening on {daemon.http.url}; target {self.target.base_url}")
            async with httpx.AsyncClient(timeout=self.probe_settings.timeout) as probe_client:
                with live:
                    background.append(asyncio.create_task(self._sampler(daemon, live)))
                    probers = self._probers(probe_client, daemon)
                    for prober in probers.values():
                        background.append(asyncio.create_task(prober.run()))
                    try:
                        await self._script(daemon, probers, background)
                    finally:
                        for name, prober in probers.items():
                            self.record.kills[name] = [
                                Kill(
                                    k.at - self.t0,
                                    k.sigkill_at - self.t0,
                                    k.streak_started - self.t0,
                                )
                                for k in prober.kills
                            ]
                            self.record.probes[name] = [
                                (p.at - self.t0, p.ok) for p in prober.probes
                            ]
        except Exception as exc:
            self.record.error = f"{type(exc).__name__}: {exc}"
            self.event(f"error: {self.record.error}")
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await sentinel.stop()
            self.record.end = self.now()
        return self.record

    def _probers(self, client: httpx.AsyncClient, daemon: Daemon) -> dict[str, Prober]:
        assert daemon.http is not None
        settings = self.probe_settings
        clock = self.clock
        probers = {
            "sentinel": Prober(
                "sentinel", http_check(client, daemon.http.url + "/livez"), settings, clock
            ),
            "vllm_health": Prober(
                "vllm_health", http_check(client, self.target.base_url + "/health"), settings, clock
            ),
        }
        return probers

    async def _script(
        self, daemon: Daemon, probers: dict[str, Prober], background: list[asyncio.Task[Any]]
    ) -> None:
        scenario = self.scenario
        self.phase = "startup"
        deadline = self.clock() + scenario.startup_timeout
        while not daemon.state.snapshot().startup.ok:
            if self.clock() > deadline:
                raise RunnerError(f"sentinel startup not passed within {scenario.startup_timeout}s")
            await asyncio.sleep(0.2)
        ready = self.now()
        self.record.ready_at = ready
        self.event("sentinel startup passed")
        naive: NaiveCanary | None = None
        if scenario.naive.enabled:
            naive = self._naive(daemon)
            self._naive_canary = naive
            background.append(asyncio.create_task(naive.run()))
            prober = Prober("naive", naive.check, self.probe_settings, self.clock)
            probers["naive"] = prober
            background.append(asyncio.create_task(prober.run()))
        load_task: asyncio.Task[None] | None = None
        try:
            self.phase = "baseline"
            if scenario.load is not None:
                load_task = asyncio.create_task(self._after(scenario.load.start, self._load()))
                background.append(load_task)
            await self._until(ready + scenario.fault.start)
            await self._fault(ready)
            self.phase = "observing"
            if self.record.fault_end is None and load_task is not None:
                self.phase = "load"
                await load_task
            await self._observe()
        finally:
            if naive is not None:
                self.record.naive = [
                    CanaryPoint("naive", r.started - self.t0, r.duration, r.ok, r.reason)
                    for r in naive.results
                ]
                self.record.naive_trips = [t.at - self.t0 for t in naive.trips]
            if self.record.fault_start is not None and self.record.fault_end is None:
                with contextlib.suppress(Exception):
                    await self.target.clear(scenario)

    def _naive(self, daemon: Daemon) -> NaiveCanary:
        spec = next(s for s in daemon.specs if s.kind is CanaryKind.TEXT and s.enabled)
        model = daemon.ledger.model or daemon.settings.model or ""
        return NaiveCanary(
            self.target.base_url,
            model,
            spec,
            hang_window=daemon.settings.hang_window,
            priority=self.scenario.naive.priority,
            clock=self.clock,
        )

    async def _after(self, delay: float, coro: Any) -> None:
        await asyncio.sleep(delay)
        await coro

    async def _until(self, at: float) -> None:
        await asyncio.sleep(max(0.0, at - self.now()))

    async def _fault(self, ready: float) -> None:
        scenario = self.scenario
        fault = scenario.fault
        if fault.kind == "none":
            return
        self.phase = f"fault {fault.kind}"
        self.record.fault_start = self.now()
        self.event("inject: " + await self.target.inject(scenario))
        if fault.kind == "sigkill":
            await self._sigkill_and_restart()
            return
        assert fault.duration is not None
        await self._until(self.record.fault_start + fault.duration)
        self.event("clear: " + await self.target.clear(scenario))
        self.record.fault_end = self.now()

    async def _sigkill_and_restart(self) -> None:
        deadline = self.clock() + 60
        while self.target.alive():
            if self.clock() > deadline:
                raise RunnerError("the server did not exit within 60 s of the engine's SIGKILL")
            await asyncio.sleep(0.2)
        self.record.server_exit_at = self.now()
        self.event("server exited")
        self.phase = "restarting server"
        # Let sentinel see the outage before the server comes back.
        await asyncio.sleep(5)
        seconds = await self.target.restart()
        self.record.server_restarted_at = self.now()
        self.record.fault_end = self.now()
        self.event(f"server restarted ({seconds:.1f}s to first answer)")

    async def _observe(self) -> None:
        """Watch until liveness and readiness are green (then ``SETTLE`` s), or the limit."""
        self.phase = "recovery"
        start = self.now()
        limit = start + self.scenario.observe_after
        green_since: float | None = None
        while self.now() < limit:
            sample = self._last
            green = (
                sample is not None
                and sample.at >= start
                and (sample.livez, sample.readyz, sample.startupz) == (200, 200, 200)
            )
            if green and green_since is None:
                green_since = self.now()
            elif not green:
                green_since = None
            if green_since is not None and self.now() - green_since >= SETTLE:
                return
            await asyncio.sleep(0.5)


# -- the figures -----------------------------------------------------------------------


def _in_windows(at: float, windows: Sequence[tuple[float, float]]) -> bool:
    return any(start <= at <= end for start, end in windows)


def _lat(points: Sequence[CanaryPoint]) -> dict[str, Any]:
    ok = [p.duration for p in points if p.ok]
    return {
        "count": len(points),
        "failed": sum(1 for p in points if not p.ok),
        **percentiles(ok),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def summarize(record: RunRecord) -> dict[str, Any]:
    """The report's figures for one run, and the verdict on its expectations."""
    scenario = record.scenario
    fault = scenario.fault
    start, end = record.fault_start, record.fault_end
    harmful: list[tuple[float, float]] = []
    if fault.harmful and start is not None:
        harmful.append((start, end if end is not None else record.end))
    samples = [s for s in record.samples if record.ready_at is None or s.at >= record.ready_at]
    after_fault = [s for s in samples if start is not None and s.at >= start]

    def first(points: Sequence[Any], test: Callable[[Any], bool]) -> Any:
        return next((p for p in points if test(p)), None)

    red = first(after_fault, lambda s: s.livez is not None and s.livez != 200)
    canaries_after = [c for c in record.canaries if start is not None and c.started >= start]
    failed = first(sorted(canaries_after, key=lambda c: c.started + c.duration), lambda c: not c.ok)

    def kills(name: str) -> dict[str, Any]:
        found = record.kills.get(name, [])
        false = [k for k in found if not _in_windows(k.streak_started, harmful)]
        true = [k for k in found if _in_windows(k.streak_started, harmful)]
        first_true = true[0].at if true else None
        return {
            "would_kill_at": [_round(k.at) for k in found],
            "detection_s": None
            if first_true is None or start is None
            else _round(first_true - start),
            "false_kills": len(false),
        }

    hangs_seen = sorted({h for s in after_fault for h in s.hangs})
    liveness_failures = sum(1 for s in samples if s.livez is not None and s.livez != 200)
    health_codes = sorted({str(s.vllm_health) for s in record.samples})
    non200 = first(after_fault, lambda s: s.vllm_health != 200)
    green_again: float | None = None
    if end is not None:
        green = first(
            [s for s in samples if s.at >= end],
            lambda s: (s.livez, s.readyz, s.startupz) == (200, 200, 200),
        )
        green_again = None if green is None else green.at - end
    fault_window = (start, end if end is not None else record.end) if start is not None else None

    def during_fault(points: Sequence[CanaryPoint]) -> list[CanaryPoint]:
        if fault_window is None:
            return []
        return [p for p in points if fault_window[0] <= p.started <= fault_window[1]]

    load_window = record.load_window

    def under_load(points: Sequence[CanaryPoint]) -> list[CanaryPoint]:
        if load_window is None:
            return []
        return [p for p in points if load_window[0] <= p.started <= load_window[1]]

    by_kind: dict[str, Any] = {}
    for kind in ("text", "structured", "multimodal"):
        points = [c for c in record.canaries if c.kind == kind]
        if points:
            by_kind[kind] = {
                "all": _lat(points),
                "during_fault": _lat(during_fault(points)),
                "under_load": _lat(under_load(points)),
            }
    naive_trips = [t for t in record.naive_trips if start is None or t >= start]
    restart: dict[str, Any] | None = None
    if fault.kind == "sigkill":
        startup_red = first(after_fault, lambda s: s.startupz is not None and s.startupz != 200)
        after_restart = [
            s
            for s in samples
            if record.server_restarted_at is not None and s.at >= record.server_restarted_at
        ]
        green_after = first(
            after_restart, lambda s: (s.livez, s.readyz, s.startupz) == (200, 200, 200)
        )
        restart = {
            "server_exit_s": None
            if record.server_exit_at is None or start is None
            else _round(record.server_exit_at - start),
            "startup_red_s": None
            if startup_red is None or start is None
            else _round(startup_red.at - start),
            "green_after_restart_s": None
            if green_after is None or record.server_restarted_at is None
            else _round(green_after.at - record.server_restarted_at),
            "stale_liveness_red_after_restart": any(
                s.livez != 200 or s.hangs for s in after_restart
            ),
            "epochs": sorted({s.epoch for s in samples if s.epoch is not None}),
        }
    result: dict[str, Any] = {
        "name": scenario.name,
        "description": scenario.description,
        "target": scenario.target.kind,
        "fault": fault.kind + (f" ({fault.process})" if fault.process else ""),
        "error": record.error,
        "prober": {
            "period": record.probe_settings.period,
            "timeout": record.probe_settings.timeout,
            "failure_threshold": record.probe_settings.failure_threshold,
            "grace": record.probe_settings.grace,
        },
        "ready_at_s": _round(record.ready_at),
        "fault_start_s": _round(start),
        "fault_end_s": _round(end),
        "priority_effective": record.priority_effective,
        "sentinel": {
            "first_failed_canary": None
            if failed is None or start is None
            else {
                "at_s": _round(failed.started + failed.duration - start),
                "kind": failed.kind,
                "reason": failed.reason,
            },
            "livez_red_s": None if red is None or start is None else _round(red.at - start),
            "hang_kinds": hangs_seen,
            "liveness_failed_samples": liveness_failures,
            "green_again_s": _round(green_again),
            **kills("sentinel"),
            "canary_latency": by_kind,
        },
        "vllm_health": {
            "codes_seen": health_codes,
            "non_200_s": None if non200 is None or start is None else _round(non200.at - start),
            "stayed_200_during_fault": all(
                s.vllm_health == 200
                for s in after_fault
                if fault_window is not None and s.at <= fault_window[1]
            ),
            **kills("vllm_health"),
        },
        "naive": {
            "tripped_s": None
            if not naive_trips or start is None
            else _round(naive_trips[0] - start),
            "trips": len(record.naive_trips),
            **kills("naive"),
            "latency": {
                "all": _lat(record.naive),
                "during_fault": _lat(during_fault(record.naive)),
                "under_load": _lat(under_load(record.naive)),
            },
        },
        "load": record.load_summary,
        "restart": restart,
        "events": [{"at_s": round(e.at, 2), "what": e.what} for e in record.events],
    }
    result["checks"] = _checks(scenario, result, record)
    result["passed"] = record.error is None and all(c["ok"] for c in result["checks"])
    return result


def _checks(scenario: Scenario, result: dict[str, Any], record: RunRecord) -> list[dict[str, Any]]:
    expect = scenario.expect
    out: list[dict[str, Any]] = []
    sentinel = result["sentinel"]

    def check(name: str, ok: bool, detail: str) -> None:
        out.append({"check": name, "ok": ok, "detail": detail})

    if expect.detect_within is not None:
        red = sentinel["livez_red_s"]
        check(
            f"/livez red within {expect.detect_within:g}s",
            red is not None and red <= expect.detect_within,
            f"red after {red}s" if red is not None else "never red",
        )
    if expect.hang_kinds is not None:
        check(
            "hang kinds " + ", ".join(expect.hang_kinds),
            sorted(expect.hang_kinds) == sentinel["hang_kinds"],
            f"seen {sentinel['hang_kinds']}",
        )
    if expect.vllm_health_stays_200:
        check(
            "vLLM /health stayed 200",
            result["vllm_health"]["stayed_200_during_fault"],
            f"codes seen {result['vllm_health']['codes_seen']}",
        )
    if expect.text_canaries_pass:
        text = sentinel["canary_latency"].get("text", {}).get("during_fault", {})
        check(
            "text canaries pass during the fault",
            bool(text.get("count")) and text.get("failed") == 0,
            f"{text.get('count', 0)} sent, {text.get('failed', 0)} failed",
        )
    if expect.no_liveness_failure:
        check(
            "no liveness failure",
            sentinel["liveness_failed_samples"] == 0 and not sentinel["would_kill_at"],
            f"{sentinel['liveness_failed_samples']} red samples, "
            f"{len(sentinel['would_kill_at'])} would-be kills",
        )
    if expect.green_again_within is not None:
        green = sentinel["green_again_s"]
        check(
            f"green again within {expect.green_again_within:g}s",
            green is not None and green <= expect.green_again_within,
            f"green after {green}s" if green is not None else "not green again",
        )
    if expect.reenters_startup:
        restart = result["restart"] or {}
        ok = (
            restart.get("startup_red_s") is not None
            and restart.get("green_after_restart_s") is not None
            and not restart.get("stale_liveness_red_after_restart")
        )
        check("re-enters startup, green after restart, no stale verdict", ok, json.dumps(restart))
    return out


# -- many scenarios ----------------------------------------------------------------------


def order(scenarios: Sequence[Scenario]) -> list[Scenario]:
    """Group scenarios by server (first appearance), SIGKILL last within each group."""
    groups: dict[tuple[Any, ...], list[Scenario]] = {}
    for scenario in scenarios:
        groups.setdefault(scenario.target.server_key(), []).append(scenario)
    out: list[Scenario] = []
    for members in groups.values():
        out += sorted(members, key=lambda s: s.fault.kind == "sigkill")
    return out


async def run_all(
    scenarios: Sequence[Scenario],
    workdir: Path,
    console: Console,
    on_result: Callable[[dict[str, Any], RunRecord], None] | None = None,
) -> list[tuple[dict[str, Any], RunRecord]]:
    """Run ``scenarios`` in order, reusing one server while the target does not change."""
    results: list[tuple[dict[str, Any], RunRecord]] = []
    target: Target | None = None
    try:
        for scenario in order(scenarios):
            scenario_dir = workdir / scenario.name
            scenario_dir.mkdir(parents=True, exist_ok=True)
            reuse = (
                target is not None
                and target.spec.server_key() == scenario.target.server_key()
                and await target.healthy()
            )
            if not reuse:
                if target is not None:
                    await target.stop()
                target = make_target(scenario.target, workdir / "servers" / scenario.name)
                console.log(f"starting target {scenario.target.kind} for {scenario.name}")
                try:
                    seconds = await target.start()
                except Exception as exc:
                    record = RunRecord(scenario, ProbeSettings())
                    record.error = f"target did not start: {exc}"[:4000]
                    summary = summarize(record)
                    results.append((summary, record))
                    if on_result is not None:
                        on_result(summary, record)
                    await target.stop()
                    target = None
                    continue
                console.log(f"target up in {seconds:.1f}s at {target.base_url}")
            assert target is not None
            record = await ScenarioRun(scenario, target, scenario_dir, console).run()
            summary = summarize(record)
            results.append((summary, record))
            if on_result is not None:
                on_result(summary, record)
            verdict = "[green]passed[/]" if summary["passed"] else "[red]FAILED[/]"
            console.log(f"{scenario.name}: {verdict}")
    finally:
        if target is not None:
            await target.stop()
    return results
