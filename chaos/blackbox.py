"""blackbox_exporter as a baseline: what an operator probing vLLM from Prometheus would see.

This module owns the fourth baseline of a chaos run: the real
``prometheus-blackbox-exporter`` (Debian's name; upstream's ``blackbox_exporter``
is found too) running ``chaos/blackbox.yml``, scraped the way Prometheus would
scrape it, and the arithmetic that says when an alert on it would have had
vLLM restarted. Nothing is ever restarted; the times are recorded.

Cadence and thresholds, and why:

- **Every 15 s, 10 s scrape timeout.** 15 s is the ``scrape_interval`` of
  Prometheus's shipped configuration and of the common Kubernetes stacks; 10 s
  is Prometheus's default ``scrape_timeout``. Prometheus sends it as
  ``X-Prometheus-Scrape-Timeout-Seconds`` and the exporter bounds each probe by
  the smaller of the module's timeout and that value less half a second, so the
  ``/health`` probe gives up after 5 s and the completion probe after 9.5 s.
  The simulator scenarios shorten every timing (the kubelet's probe period is
  1 s instead of the manifest's 5 s); these two scale by the same factor.
- **Three consecutive failed scrapes of one module** would restart vLLM. The
  alert an operator writes on a probe is ``probe_success == 0`` with
  ``for: 30s``: with rules evaluated at the scrape interval it fires on the
  third failing scrape in a row, the same count as the kubelet's default
  ``failureThreshold``. A scrape that itself fails (no answer from the exporter
  within the timeout) counts as a failure too, as ``up == 0`` alerts do. Each
  module is its own series, so each keeps its own streak; a restart, whichever
  module caused it, resets both and no scrape counts until the restarted
  container's grace period is over (the scenario's kubelet grace).
- The would-be kill is the end of the third failing scrape: the earliest an
  alert could fire. A real alert comes later (up to one rule evaluation
  interval, then Alertmanager's ``group_wait``, 30 s by default), so the figure
  favours the baseline.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from chaos.ports import free_port
from chaos.prober import Kill, KillArithmetic, ProbeSettings
from chaos.scenario import BlackboxSpec

CONFIG = Path(__file__).resolve().parent / "blackbox.yml"
#: the exporter's executable: Debian's package name first, then upstream's
EXECUTABLES = ("prometheus-blackbox-exporter", "blackbox_exporter")
INSTALL_HINT = "run `make prometheus-tools` (Debian: apt-get install prometheus-blackbox-exporter)"
#: the modules of ``chaos/blackbox.yml`` and the vLLM path each probes
MODULES: Mapping[str, str] = {
    "vllm_health": "/health",
    "vllm_completion": "/v1/completions",
}
SCRAPE_INTERVAL = 15.0
SCRAPE_TIMEOUT = 10.0
START_TIMEOUT = 20.0  # seconds for the exporter to answer /metrics after it starts


class ExporterUnavailable(RuntimeError):
    """blackbox_exporter is not installed or did not start; the message says which and why."""


@dataclass(frozen=True, slots=True)
class BlackboxSettings:
    """How Prometheus scrapes the exporter, and how many failures would restart vLLM."""

    interval: float = SCRAPE_INTERVAL
    scrape_timeout: float = SCRAPE_TIMEOUT
    failure_threshold: int = 3
    grace: float = 10.0

    @classmethod
    def for_scenario(
        cls, spec: BlackboxSpec, probe: ProbeSettings, manifest_period: float
    ) -> BlackboxSettings:
        """The scenario's settings: Prometheus's usual ones, on the scenario's time scale."""
        scale = probe.period / manifest_period if manifest_period > 0 else 1.0
        return cls(
            interval=spec.interval if spec.interval is not None else SCRAPE_INTERVAL * scale,
            scrape_timeout=(
                spec.scrape_timeout if spec.scrape_timeout is not None else SCRAPE_TIMEOUT * scale
            ),
            failure_threshold=spec.failure_threshold,
            grace=probe.grace,
        )

    def as_probe(self) -> ProbeSettings:
        return ProbeSettings(self.interval, self.scrape_timeout, self.failure_threshold, self.grace)


@dataclass(frozen=True, slots=True)
class Scrape:
    """One scrape of ``/probe`` for one module; times on the caller's clock."""

    module: str
    started: float
    finished: float
    ok: bool
    detail: str


@dataclass(slots=True)
class BlackboxArithmetic:
    """Per-module streaks, one shared restart; pure (times are passed in)."""

    settings: BlackboxSettings
    modules: dict[str, KillArithmetic] = field(default_factory=dict)
    kills: list[Kill] = field(default_factory=list)

    def feed(self, module: str, at: float, ok: bool) -> Kill | None:
        """Account one scrape's ``probe_success`` at ``at``; the restart it causes, if any."""
        arithmetic = self.modules.get(module)
        if arithmetic is None:
            arithmetic = self.modules[module] = KillArithmetic(self.settings.as_probe())
        found = arithmetic.feed(at, ok)
        if found is None:
            return None
        kill = Kill(found.at, found.sigkill_at, found.streak_started, module)
        for name, other in self.modules.items():
            if name != module:
                other.restarted(kill.sigkill_at)
        self.kills.append(kill)
        return kill


def find_exporter() -> str:
    """The exporter's path; :class:`ExporterUnavailable` naming what to install otherwise."""
    for name in EXECUTABLES:
        path = shutil.which(name)
        if path is not None:
            return path
    raise ExporterUnavailable(f"{' or '.join(EXECUTABLES)} not found on PATH: {INSTALL_HINT}")


def probe_outcome(text: str) -> tuple[bool, str]:
    """``probe_success`` from a ``/probe`` answer, and a word on why a probe failed."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values.setdefault(sample.name, float(sample.value))
    success = values.get("probe_success")
    if success is None:
        return False, "no probe_success"
    if success == 1:
        return True, "ok"
    if values.get("probe_failed_due_to_regex") == 1:
        return False, "body regexp"
    status = int(values.get("probe_http_status_code", 0))
    return False, f"http {status}" if status else "no answer"


class Exporter:
    """The real exporter as a subprocess on a free loopback port; always stopped on exit."""

    def __init__(self, log_path: Path, config: Path = CONFIG) -> None:
        self.executable = find_exporter()
        self.config = config
        self.log_path = log_path
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._process: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> Exporter:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._process = await asyncio.create_subprocess_exec(
                self.executable,
                f"--config.file={self.config}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
            )
        try:
            await self._wait_ready()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _wait_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + START_TIMEOUT
        async with httpx.AsyncClient(timeout=2.0) as client:
            while True:
                if self._process.returncode is not None:
                    tail = self.log_path.read_text(errors="replace")[-1000:]
                    raise ExporterUnavailable(
                        f"blackbox_exporter exited with {self._process.returncode}: {tail}"
                    )
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get(self.url + "/metrics")).status_code == 200:
                        return
                if time.monotonic() > deadline:
                    raise ExporterUnavailable(
                        f"blackbox_exporter did not answer at {self.url} within {START_TIMEOUT:g}s"
                    )
                await asyncio.sleep(0.1)

    async def stop(self) -> None:
        process = self._process
        if process is None or process.returncode is not None:
            return
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()


class BlackboxScraper:
    """Scrapes every module on the interval, as Prometheus would; ``scrapes`` grows as it runs."""

    def __init__(
        self,
        exporter_url: str,
        target: str,
        settings: BlackboxSettings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.exporter_url = exporter_url
        self.target = target.rstrip("/")
        self.settings = settings
        self.clock = clock
        self.arithmetic = BlackboxArithmetic(settings)
        self.scrapes: list[Scrape] = []

    @property
    def kills(self) -> list[Kill]:
        return self.arithmetic.kills

    def failing(self) -> bool | None:
        """Whether the latest scrape of any module failed (None before the first)."""
        latest: dict[str, bool] = {}
        for scrape in self.scrapes:
            latest[scrape.module] = scrape.ok
        return None if not latest else not all(latest.values())

    async def scrape(self, client: httpx.AsyncClient, module: str) -> Scrape:
        """One ``/probe`` scrape, bounded by the scrape timeout as Prometheus bounds it."""
        started = self.clock()
        timeout = self.settings.scrape_timeout
        try:
            response = await client.get(
                self.exporter_url + "/probe",
                params={"module": module, "target": self.target + MODULES[module]},
                headers={"X-Prometheus-Scrape-Timeout-Seconds": f"{timeout:g}"},
                timeout=timeout,
            )
        except httpx.HTTPError as exc:
            return Scrape(module, started, self.clock(), False, f"scrape {type(exc).__name__}")
        if response.status_code != 200:
            return Scrape(
                module, started, self.clock(), False, f"scrape http {response.status_code}"
            )
        ok, detail = probe_outcome(response.text)
        return Scrape(module, started, self.clock(), ok, detail)

    async def _one(self, client: httpx.AsyncClient, module: str) -> None:
        scrape = await self.scrape(client, module)
        self.scrapes.append(scrape)
        self.arithmetic.feed(module, scrape.finished, scrape.ok)

    async def run(self) -> None:
        """Scrape on the interval until cancelled; a slow scrape does not delay the next."""
        pending: set[asyncio.Task[None]] = set()
        next_at = self.clock()
        loop = asyncio.get_running_loop()
        async with httpx.AsyncClient() as client:
            try:
                while True:
                    for module in MODULES:
                        task = loop.create_task(self._one(client, module))
                        pending.add(task)
                        task.add_done_callback(pending.discard)
                    next_at += self.settings.interval
                    await asyncio.sleep(max(0.0, next_at - self.clock()))
            finally:
                for task in list(pending):
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
