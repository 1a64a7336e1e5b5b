"""Chaos scenarios under the harness's kubelet: fault, detection, a real restart, serving again.

:mod:`chaos.runner` measures when a kubelet *would* kill; here
:class:`chaos.kubelet.Kubelet` really kills and restarts the server, with the
shipped manifest's probe settings (on the scenario's time scale), so what is
measured is the whole promise: fault, detection, the kill, the new server's
model load, and the new server ready and serving a real request, with no
second restart in the watch after it.

Each scenario runs once per *checker*, the thing the kubelet's liveness
follows, under the same kubelet:

- ``sentinel``: the shipped manifest, the vllm container's probes on
  sentinel's ``/startupz``, ``/livez`` and ``/readyz`` (sentinel runs on
  across the server's restarts, as the sidecar does);
- ``vllm_health``: all three probes on vLLM's own ``/health``;
- ``naive``: startup and readiness on ``/health``, liveness on the naive
  canary (:mod:`chaos.naive`);
- ``blackbox``: startup and readiness on ``/health``, no liveness probe; the
  container is killed when an alert on blackbox_exporter's probes would fire
  (:mod:`chaos.blackbox`), for a container that had started.

A crash (the engine killed, the server exits) is restarted by the kubelet
whatever the checker; what differs is whether the new one is let live.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from chaos import answers
from chaos.blackbox import BlackboxScraper, BlackboxSettings, Exporter, ExporterUnavailable
from chaos.containers import Container
from chaos.group import make_container
from chaos.kubelet import Check, Kubelet
from chaos.kubelet_state import Event, KubeletSettings, ProbeSpec
from chaos.naive import NaiveCanary
from chaos.runner import load_command
from chaos.scenario import Scenario, sentinel_settings
from chaos.sentinel_thread import SentinelThread
from sentinel.canary.catalog import apply_overrides, load_catalog
from sentinel.canary.spec import CanaryKind

CHECKERS = ("sentinel", "vllm_health", "naive", "blackbox")
SIM_LOAD = 8.0  # the simulator's model load on each start: longer than any dead grace
SERVE_WITHIN = 60.0  # seconds for the recovered server to answer a real request

#: a task a checker runs beside the kubelet (the naive canary's loop, the alert on blackbox)
Job = Callable[[Kubelet], Coroutine[Any, Any, None]]


@dataclass(frozen=True, slots=True)
class Options:
    """How supervised runs are made (the CLI's flags)."""

    checkers: tuple[str, ...] = CHECKERS
    load_time: float = SIM_LOAD  # the simulator's model load; a real vLLM loads for real
    #: seconds from a fault to serving again (None: the promise's five minutes, on the
    #: scenario's time scale); a hang not recovered by then is ``never``
    recover_within: float | None = None
    #: seconds watched after recovery for a second restart (None: ten minutes, scaled)
    watch_after: float | None = None
    #: sentinel settings over the scenario's (``watch_processes: false``: no attribution)
    sentinel: dict[str, Any] = field(default_factory=dict)
    runs: int = 1  # runs of each scenario per checker (the report gives medians and spreads)

    def recover_limit(self, scale: float) -> float:
        return self.recover_within if self.recover_within is not None else 300.0 * scale

    def watch(self, scale: float) -> float:
        return self.watch_after if self.watch_after is not None else 600.0 * scale


@dataclass(slots=True)
class SupervisedRecord:
    """One scenario under one checker; times in seconds since the first container started."""

    scenario: str
    checker: str
    target: str
    fault: str
    harmful: bool
    run: int = 0  # which of the scenario's runs under this checker
    fault_at: float | None = None
    fault_container: int | None = None
    served_at: float | None = None
    end: float = 0.0
    figures: dict[str, float] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    load: dict[str, Any] | None = None  # the load's summary (``python -m chaos.load --json``)
    bundles: list[str] = field(default_factory=list)  # sentinel's incident bundles, by name
    error: str | None = None

    @property
    def restarts(self) -> int:
        return sum(e.kind == "restart" for e in self.events)

    @property
    def false_restarts(self) -> int:
        """Restarts a working server did not need: all of them for a harmless fault,
        every one after the first for a harmful one (the restarted server killed again)."""
        return self.restarts if not self.harmful else max(0, self.restarts - 1)

    @property
    def passed(self) -> bool:
        if self.error is not None:
            return False
        if not self.harmful:
            return self.restarts == 0
        return self.restarts == 1 and self.served_at is not None

    def as_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.update(restarts=self.restarts, false_restarts=self.false_restarts, passed=self.passed)
        return data


def time_scale(scenario: Scenario) -> float:
    """The scenario's prober period over the manifest's liveness period (sim: 0.2, vLLM: 1)."""
    manifest = KubeletSettings.from_manifest(scenario.prober.manifest)
    assert manifest.liveness is not None
    period = scenario.prober.period
    return 1.0 if period is None else period / manifest.liveness.period


def kubelet_settings(scenario: Scenario, checker: str) -> KubeletSettings:
    """The shipped manifest's vllm probes on the scenario's time scale, aimed for ``checker``."""
    manifest = KubeletSettings.from_manifest(scenario.prober.manifest)
    scale = time_scale(scenario)
    settings = manifest if scale == 1.0 else manifest.scaled(scale, timeout_floor=1.0)
    if checker == "sentinel":
        return settings

    def health(spec: ProbeSpec | None) -> ProbeSpec | None:
        return None if spec is None else dataclasses.replace(spec, path="/health")

    liveness = None if checker == "blackbox" else health(settings.liveness)
    return dataclasses.replace(
        settings,
        startup=health(settings.startup),
        liveness=liveness,
        readiness=health(settings.readiness),
    )


def fault_time(earliest: float, grid: float, period: float, phase: float) -> float:
    """The first moment from ``earliest`` that lies ``phase`` of a ``period`` past a tick.

    The kubelet's liveness probes tick every period from the pod's start
    (``grid``), so a detection waits for the next tick: where in the period a
    fault lands moves detection by up to a period. Run i of N of every
    checker puts its fault at the same place, (i + 1/2)/N of a period past a
    tick: checkers compare like with like, and the spread shows the period.
    """
    offset = phase * period
    ticks = math.ceil((earliest - grid - offset) / period - 1e-9)
    return grid + ticks * period + offset


class SupervisedRun:
    """One scenario under the kubelet, its liveness following one checker."""

    def __init__(
        self,
        scenario: Scenario,
        checker: str,
        workdir: Path,
        console: Console,
        options: Options,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if checker not in CHECKERS:
            raise ValueError(f"checker: one of {', '.join(CHECKERS)}, not {checker!r}")
        self.scenario, self.checker, self.workdir = scenario, checker, workdir
        self.console, self.options, self.clock = console, options, clock
        fault = scenario.fault
        self.record = SupervisedRecord(
            scenario.name,
            checker,
            scenario.target.kind,
            fault.kind + (f" ({fault.process})" if fault.process else ""),
            fault.harmful,
        )
        self.kubelet: Kubelet | None = None

    def log(self, what: str) -> None:
        self.console.log(f"[bold]{self.scenario.name}[/] under {self.checker}: {what}")

    async def run(self) -> SupervisedRecord:
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            container = await asyncio.to_thread(
                make_container, self.scenario.target, self.workdir, self.options.load_time
            )
            async with contextlib.AsyncExitStack() as stack:
                if (close := getattr(container, "close", None)) is not None:
                    stack.callback(close)  # a group's worker ranks, after the kubelet's stop
                await self._supervise(stack, container)
        except Exception as exc:
            self.record.error = f"{type(exc).__name__}: {exc}"[:2000]
            self.log(f"[red]error[/]: {self.record.error}")
        return self.record

    async def _supervise(self, stack: contextlib.AsyncExitStack, container: Container) -> None:
        scenario = self.scenario
        probe_url, checks, background = await self._checker(stack, container)
        kubelet = Kubelet(
            container.command,
            probe_url,
            kubelet_settings(scenario, self.checker),
            env=container.env,
            log_path=self.workdir / "server.log",
            checks=checks,
            before_start=container.before_start,
            popen=container.popen,
            clock=self.clock,
        )
        self.kubelet = kubelet
        stack.push_async_callback(self._finish, kubelet)
        await stack.enter_async_context(kubelet)
        background.append(answers.watch(container.base_url))  # where the checker's share starts
        tasks: list[asyncio.Task[None]] = [asyncio.create_task(j(kubelet)) for j in background]
        stack.push_async_callback(_cancel, tasks)
        within = scenario.startup_timeout + self.options.load_time
        ready = await kubelet.wait_for("ready", container=0, within=within)
        self.log(f"ready {ready.at - kubelet.events[0].at:.1f}s after the first start")
        if scenario.load is not None:
            load = await asyncio.create_subprocess_exec(
                *load_command(container.base_url, scenario.load),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
            stack.push_async_callback(_reap, load)
            summary = asyncio.create_task(self._load_summary(load))
            stack.push_async_callback(_cancel, [summary])
        liveness = kubelet_settings(scenario, "sentinel").liveness  # every checker's grid
        period = liveness.period if liveness is not None else 1.0
        phase = (self.record.run + 0.5) / self.options.runs
        at = fault_time(ready.at + scenario.fault.start, kubelet.pod_start, period, phase)
        await asyncio.sleep(max(0.0, at - self.clock()))
        if scenario.fault.kind != "none":
            await self._fault(kubelet, container)
        await self._watch(kubelet, container)

    async def _load_summary(self, load: asyncio.subprocess.Process) -> None:
        out, err = await load.communicate()
        lines = out.decode(errors="replace").strip().splitlines()
        try:
            self.record.load = json.loads(lines[-1])
        except (IndexError, ValueError):
            self.record.load = {"error": err.decode(errors="replace")[-2000:]}

    async def _fault(self, kubelet: Kubelet, container: Container) -> None:
        scenario, record = self.scenario, self.record
        group = kubelet.pid
        if group is None:
            raise RuntimeError("no container runs at the fault's time")
        record.fault_container = kubelet.state.container
        if scenario.fault.harmful and scenario.fault.duration is not None:
            # A silent hang does not end by itself: it lasts as long as its container.
            lasting = scenario.fault.model_copy(update={"duration": 24 * 3600.0})
            scenario = scenario.model_copy(update={"fault": lasting})
        held = getattr(container, "held_by_wedged", None)
        connections = None if held is None else held(scenario, group)
        what = await container.inject(scenario, group)
        if connections is not None:
            what += f"; it holds {connections} of the load's connections"
            if connections == 0:
                # Nobody waits on it: a working server, judged as one (no restart).
                record.harmful = False
                record.fault += " (holding no connection)"
        record.fault_at = kubelet.note("fault", what).at
        self.log(f"inject: {what}")
        if scenario.fault.duration is None or scenario.fault.harmful:
            return
        end = record.fault_at + scenario.fault.duration
        with contextlib.suppress(TimeoutError):  # the fault ends with its container
            await kubelet.wait_for(
                "start", container=record.fault_container + 1, within=end - self.clock()
            )
        if kubelet.state.container == record.fault_container and kubelet.pid is not None:
            self.log("clear: " + await container.clear(scenario, kubelet.pid))
            kubelet.note("clear")

    async def _watch(self, kubelet: Kubelet, container: Container) -> None:
        """Harmful: until the restarted server serves, then the watch; else the scenario's watch."""
        record, options = self.record, self.options
        if not record.harmful or record.fault_at is None:
            await asyncio.sleep(max(0.0, self._planned_end() - self.clock()))
            return
        after = (record.fault_container or 0) + 1
        scale = time_scale(self.scenario)
        limit = record.fault_at + options.recover_limit(scale) - self.clock()
        try:
            await kubelet.wait_for("ready", container=after, within=limit)
        except TimeoutError:
            self.log(f"not recovered within {options.recover_limit(scale):g}s of the fault")
            return
        if await answers.served(container.base_url, SERVE_WITHIN, self.clock):
            record.served_at = kubelet.note("served").at
            self.log(f"serving again {record.served_at - record.fault_at:.1f}s after the fault")
        await asyncio.sleep(options.watch(scale))  # the watch: a second restart would show

    def _planned_end(self) -> float:
        kubelet = self.kubelet
        assert kubelet is not None
        start = self.record.fault_at if self.record.fault_at is not None else self.clock()
        duration = self.scenario.fault.duration or 0.0
        load = self.scenario.load.duration if self.scenario.load is not None else 0.0
        return start + max(duration, load) + self.scenario.observe_after

    async def _finish(self, kubelet: Kubelet) -> None:
        await kubelet.stop()
        zero = kubelet.events[0].at if kubelet.events else 0.0
        shift = [dataclasses.replace(e, at=e.at - zero) for e in kubelet.events]
        record = self.record
        record.events = shift
        record.end = self.clock() - zero
        if record.fault_at is not None:
            record.fault_at -= zero
            if record.served_at is not None:
                record.served_at -= zero
            at = record.fault_at
            record.figures = answers.figures(shift, at, record.fault_container, record.served_at)
        diagnostics = self.workdir / "diagnostics"
        if diagnostics.is_dir():
            record.bundles = sorted(p.name for p in diagnostics.iterdir() if p.is_dir())
        (self.workdir / "timeline.txt").write_text(kubelet.timeline() + "\n", encoding="utf-8")

    # -- the checkers ---------------------------------------------------------------

    async def _checker(
        self, stack: contextlib.AsyncExitStack, container: Container
    ) -> tuple[str, dict[str, Check], list[Job]]:
        """The probe URL, the probes replaced, and the tasks that run beside the kubelet."""
        if self.checker == "sentinel":
            diagnostics = self.workdir / "diagnostics"
            # Under a probe timeout, as the shipped 1 s hold is under the shipped 3 s.
            timeout = min(
                spec.timeout for _, spec in kubelet_settings(self.scenario, "sentinel").probes()
            )
            hold = {"probe_hold": min(1.0, timeout / 2)}
            given = {**hold, **self.scenario.sentinel, **self.options.sentinel}
            scenario = self.scenario.model_copy(update={"sentinel": given})
            thread = SentinelThread(sentinel_settings(scenario, container.base_url, diagnostics))
            daemon = await thread.start()
            stack.push_async_callback(thread.stop)
            assert daemon.http is not None
            return daemon.http.url, {}, []
        if self.checker == "vllm_health":
            return container.base_url, {}, []
        if self.checker == "naive":
            return container.base_url, *self._naive(container)
        return container.base_url, {}, [await self._blackbox(stack, container)]

    def _naive(self, container: Container) -> tuple[dict[str, Check], list[Job]]:
        settings = sentinel_settings(self.scenario, container.base_url, self.workdir)
        specs = apply_overrides(load_catalog(settings.catalog).enabled(), settings.canaries)
        spec = next(s for s in specs if s.kind == CanaryKind.TEXT)
        naive = NaiveCanary(
            container.base_url,
            "",
            spec,
            hang_window=settings.hang_window,
            priority=self.scenario.naive.priority,
            clock=self.clock,
        )

        async def check(probe: ProbeSpec) -> tuple[bool, str]:
            return await naive.check()

        async def run(kubelet: Kubelet) -> None:
            await kubelet.wait_for("ready", container=0, within=3600)
            naive.body["model"] = await answers.model(container.base_url)
            await naive.run()

        return {"liveness": check}, [run]

    async def _blackbox(self, stack: contextlib.AsyncExitStack, container: Container) -> Job:
        try:
            exporter = await stack.enter_async_context(Exporter(self.workdir / "blackbox.log"))
        except (ExporterUnavailable, OSError) as exc:
            raise RuntimeError(f"blackbox_exporter baseline not run: {exc}") from exc
        manifest = KubeletSettings.from_manifest(self.scenario.prober.manifest)
        assert manifest.liveness is not None
        scale = (self.scenario.prober.period or manifest.liveness.period) / manifest.liveness.period
        base = BlackboxSettings()
        settings = BlackboxSettings(
            interval=base.interval * scale,
            scrape_timeout=base.scrape_timeout * scale,
            failure_threshold=self.scenario.blackbox.failure_threshold,
            grace=kubelet_settings(self.scenario, "blackbox").grace,
        )
        scraper = BlackboxScraper(exporter.url, container.base_url, settings, self.clock)

        async def alert(kubelet: Kubelet) -> None:
            scraping = asyncio.create_task(scraper.run())
            seen = 0
            try:
                while True:
                    await asyncio.sleep(0.2)
                    for kill in scraper.kills[seen:]:
                        started = [
                            e.at for e in kubelet.of("started", container=kubelet.state.container)
                        ]
                        if (
                            kubelet.phase == "running"
                            and started
                            and kill.streak_started >= started[0]
                        ):
                            kubelet.kill(f"blackbox alert on {kill.by}", "blackbox")
                    seen = len(scraper.kills)
            finally:
                scraping.cancel()
                await asyncio.gather(scraping, return_exceptions=True)

        return alert


async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for result in results:
        if isinstance(result, Exception):
            raise result


async def _reap(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()


async def run_supervised(
    scenarios: list[Scenario],
    workdir: Path,
    console: Console,
    options: Options,
    on_result: Callable[[SupervisedRecord], None] | None = None,
) -> list[SupervisedRecord]:
    """Every scenario under every checker of ``options``, ``options.runs`` times, in turn."""
    records = []
    for scenario in scenarios:
        for index, checker in ((i, c) for i in range(options.runs) for c in options.checkers):
            where = workdir / scenario.name / checker / (f"run-{index}" if options.runs > 1 else "")
            run = SupervisedRun(scenario, checker, where, console, options)
            run.record.run = index
            record = await run.run()
            records.append(record)
            if on_result is not None:
                on_result(record)
            verdict = "[green]passed[/]" if record.passed else "[red]FAILED[/]"
            if checker != "sentinel":
                verdict = "baseline " + ("held" if record.passed else "failed")
            console.log(f"{scenario.name} under {checker}: {verdict} ({record.restarts} restarts)")
    return records
