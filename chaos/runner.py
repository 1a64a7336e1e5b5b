"""Runs chaos scenarios: target, sentinel, load, fault, probers, samples.

For each scenario the runner starts (or reuses) the target (:mod:`chaos.targets`),
runs sentinel in-process with the scenario's settings (:mod:`chaos.sentinel_thread`;
only ports and the diagnostics directory are the runner's), waits for sentinel's
startup to pass, then starts the load (``python -m chaos.load`` in a subprocess,
so the load's client cannot slow sentinel's event loop), injects the fault at its
time and clears it at its end. Throughout, it samples sentinel and vLLM every
second (:mod:`chaos.sampling`), takes sentinel's canary results as sentinel hands
them over, runs three kubelet-like probers (sentinel's ``/livez``, vLLM's
``/health``, the naive canary) and has the real blackbox_exporter scraped as
Prometheus would (:mod:`chaos.blackbox`; where it is not installed the run goes
on without it and says so). Nothing is ever killed by a prober; the figures
(:mod:`chaos.analysis`) say when the kubelet, or an alert, would have.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.live import Live
from rich.text import Text

from chaos.analysis import Summary, summarize
from chaos.blackbox import (
    BlackboxScraper,
    BlackboxSettings,
    Exporter,
    ExporterUnavailable,
    find_exporter,
)
from chaos.naive import NaiveCanary
from chaos.prober import Kill, Prober, ProbeSettings, http_check
from chaos.records import CanaryPoint, Event, ResultInbox, RunRecord, Sample, ScrapePoint
from chaos.sampling import changes, status_line, take_sample
from chaos.scenario import LoadSpec, Scenario, sentinel_settings
from chaos.sentinel_thread import SentinelThread
from chaos.targets import Target, make_target
from sentinel.canary.spec import CanaryKind
from sentinel.daemon import Daemon

SAMPLE_PERIOD = 1.0
SETTLE = 5.0  # seconds watched after green-again, so a relapse would show


def load_command(target: str, load: LoadSpec) -> list[str]:
    """``python -m chaos.load`` for ``load`` against ``target``, its summary printed as JSON."""
    mix = ",".join(f"{k}={v}" for k, v in load.mix.items())
    args = [
        sys.executable,
        "-m",
        "chaos.load",
        *("--target", target),
        *("--concurrency", str(load.concurrency)),
        *("--duration", str(load.duration)),
        *("--prompt-tokens", str(load.prompt_tokens)),
        *("--max-tokens", str(load.max_tokens)),
        *("--mix", mix),
        *("--timeout", str(load.timeout)),
        *("--endpoint", load.endpoint),
        "--json",
    ]
    if load.priority is not None:
        args += ["--priority", str(load.priority)]
    return args


class RunnerError(RuntimeError):
    """A scenario could not be run (target did not start, sentinel never became ready)."""


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
        manifest = ProbeSettings.from_manifest(spec.manifest)
        self.probe_settings = manifest.override(
            spec.period, spec.timeout, spec.failure_threshold, spec.grace
        )
        self.blackbox_settings = BlackboxSettings.for_scenario(
            scenario.blackbox, self.probe_settings, manifest.period
        )
        self.record = RunRecord(
            scenario, self.probe_settings, blackbox_settings=self.blackbox_settings
        )
        self.t0 = clock()
        self.phase = "starting sentinel"
        self._last: Sample | None = None
        self._naive_canary: NaiveCanary | None = None

    def now(self) -> float:
        return self.clock() - self.t0

    def shifted(self, kill: Kill) -> Kill:
        """A kill on the run's time axis (seconds since sentinel started)."""
        return Kill(
            kill.at - self.t0, kill.sigkill_at - self.t0, kill.streak_started - self.t0, kill.by
        )

    def event(self, what: str) -> None:
        at = self.now()
        self.record.events.append(Event(at, what))
        self.console.log(f"[bold]{self.scenario.name}[/] {at:6.1f}s {what}")

    # -- sampling -----------------------------------------------------------------------

    async def _sampler(self, daemon: Daemon, inbox: ResultInbox, live: Live) -> None:
        async with httpx.AsyncClient(timeout=2.0) as client:
            next_at = self.clock()
            while True:
                sample, priority = await take_sample(
                    client, daemon, self.target.base_url, self.now()
                )
                self.record.priority_effective = priority
                self.record.canaries += inbox.take()
                if self._naive_canary is not None:
                    sample.naive_ok = not self._naive_canary.tripped
                self.record.samples.append(sample)
                if self._last is not None:
                    for what in changes(self._last, sample):
                        self.event(what)
                self._last = sample
                live.update(status_line(self.scenario.name, self.phase, sample, self.record.kills))
                next_at += SAMPLE_PERIOD
                await asyncio.sleep(max(0.0, next_at - self.clock()))

    # -- the load ------------------------------------------------------------------------

    async def _load(self) -> None:
        load = self.scenario.load
        assert load is not None
        args = load_command(self.target.base_url, load)
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
        inbox = ResultInbox(self.t0)
        sentinel = SentinelThread(settings, on_result=inbox.put)
        background: list[asyncio.Task[Any]] = []
        live = Live(Text(""), console=self.console, refresh_per_second=2, transient=True)
        try:
            daemon = await sentinel.start()
            assert daemon.http is not None
            self.event(f"sentinel listening on {daemon.http.url}; target {self.target.base_url}")
            async with contextlib.AsyncExitStack() as stack:
                probe_client = await stack.enter_async_context(
                    httpx.AsyncClient(timeout=self.probe_settings.timeout)
                )
                scraper = await self._blackbox(stack)
                stack.enter_context(live)
                background.append(asyncio.create_task(self._sampler(daemon, inbox, live)))
                probers = self._probers(probe_client, daemon)
                for prober in probers.values():
                    background.append(asyncio.create_task(prober.run()))
                scraping = None if scraper is None else asyncio.create_task(scraper.run())
                try:
                    await self._script(daemon, probers, background)
                finally:
                    for name, prober in probers.items():
                        self.record.kills[name] = [self.shifted(k) for k in prober.kills]
                        self.record.probes[name] = [(p.at - self.t0, p.ok) for p in prober.probes]
                    if scraper is not None and scraping is not None:
                        # stopped before the exporter is, so no scrape fails for its exit
                        scraping.cancel()
                        await asyncio.gather(scraping, return_exceptions=True)
                        self.record.kills["blackbox"] = [self.shifted(k) for k in scraper.kills]
                        self.record.blackbox = [
                            ScrapePoint(
                                s.module,
                                s.started - self.t0,
                                s.finished - s.started,
                                s.ok,
                                s.detail,
                            )
                            for s in scraper.scrapes
                        ]
        except Exception as exc:
            self.record.error = f"{type(exc).__name__}: {exc}"
            self.event(f"error: {self.record.error}")
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await sentinel.stop()
            self.record.canaries += inbox.take()  # sentinel's loop has ended: the last ones
            self.record.end = self.now()
        return self.record

    async def _blackbox(self, stack: contextlib.AsyncExitStack) -> BlackboxScraper | None:
        """The exporter started and a scraper for it; None (and why, recorded) where it cannot."""
        if not self.scenario.blackbox.enabled:
            self.record.blackbox_not_run = "disabled in the scenario"
            return None
        try:
            exporter = await stack.enter_async_context(Exporter(self.workdir / "blackbox.log"))
        except (ExporterUnavailable, OSError) as exc:
            self.record.blackbox_not_run = str(exc)
            self.event(f"blackbox_exporter baseline not run: {exc}")
            return None
        settings = self.blackbox_settings
        self.event(
            f"blackbox_exporter at {exporter.url}: scraped every {settings.interval:g}s, "
            f"timeout {settings.scrape_timeout:g}s, {settings.failure_threshold} failures restart"
        )
        return BlackboxScraper(exporter.url, self.target.base_url, settings, self.clock)

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
        spec = next(s for s in daemon.specs if s.kind == CanaryKind.TEXT and s.enabled)
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
    on_result: Callable[[Summary, RunRecord], None] | None = None,
) -> list[tuple[Summary, RunRecord]]:
    """Run ``scenarios`` in order, reusing one server while the target does not change."""
    results: list[tuple[Summary, RunRecord]] = []
    target: Target | None = None
    try:
        find_exporter()
    except ExporterUnavailable as exc:
        console.log(f"[yellow]the blackbox_exporter baseline will show 'not run'[/]: {exc}")
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
            verdict = "[green]passed[/]" if summary.passed else "[red]FAILED[/]"
            console.log(f"{scenario.name}: {verdict}")
    finally:
        if target is not None:
            await target.stop()
    return results
