"""The observers: the periodic loops that feed evidence into the ledger.

Each observer step asks one evidence adapter (the ``/metrics`` scraper, the
``/health`` poller, the process watcher) for a sample and hands it to the
ledger; none of them judges anything. :func:`every` runs a step on a cadence
and beats its heartbeat, so a wedged observer turns ``/healthz`` red.

What the observers keep beside the ledger (the last raw ``/metrics`` texts for
diagnostics bundles, the last scrape error for ``/status``) lives in
:class:`Observations`, which the evaluator and the diagnostics context read.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from sentinel.config.settings import Settings
from sentinel.diagnostics.stacks import find_py_spy
from sentinel.evidence.elastic_ep import ElasticEpPoller
from sentinel.evidence.failure import EvidenceFailure
from sentinel.evidence.lifecycle_poll import LifecyclePoller
from sentinel.evidence.metrics import MetricsSample, MetricsScraper, ScrapeError, ScrapeLimits
from sentinel.evidence.process_model import ProcessSnapshot
from sentinel.evidence.processes import ProcessWatcher
from sentinel.evidence.vllm_health import VllmHealthPoller
from sentinel.record.elastic_ep import gate_of_scrape, observe_gate, status_step
from sentinel.record.ledger import Ledger
from sentinel.record.lifecycle import heard, keeps_word
from sentinel.telemetry.logging import get_logger

log = get_logger("sentinel.observers")

METRICS_KEPT = 5  # recent raw /metrics texts kept for diagnostics bundles
LOG_EVERY = 30.0  # seconds between two log lines about the same failing loop
MAX_ERROR_DETAIL = 300
HELD_SAMPLES = 5  # process samples between two socket-table reads while nothing is held

Step = Callable[[], Awaitable[None]]
Sleep = Callable[[float], Awaitable[None]]


@dataclass(slots=True)
class Observations:
    """What the observers saw that the ledger does not keep."""

    metrics_texts: deque[tuple[float, str]] = field(
        default_factory=lambda: deque(maxlen=METRICS_KEPT)
    )  # (wall-clock time, exposition text)
    last_scrape_error: str = ""
    last_health_error: str = ""  # why the last /health poll gave no evidence
    failures: LoopFailures | None = None

    def errors_json(self, now: float) -> dict[str, Any]:
        """The evidence and loop errors as ``/status`` shows them."""
        return {
            "health": self.last_health_error or None,
            "loops": {} if self.failures is None else self.failures.to_json(now),
        }


@dataclass(slots=True)
class LoopFailure:
    """What one loop has survived so far."""

    count: int = 0
    last: str = ""
    last_at: float = 0.0
    logged_at: float = float("-inf")
    unlogged: int = 0  # failures since the last log line


class LoopFailures:
    """The failures every supervised loop caught: counted, kept, logged sparingly.

    ``on_failure`` is told the loop's name for each one (the daemon counts
    them in ``sentinel_loop_errors_total``).
    """

    def __init__(
        self,
        clock: Callable[[], float],
        on_failure: Callable[[str], None] | None = None,
        *,
        log_every: float = LOG_EVERY,
    ) -> None:
        self._clock = clock
        self._on_failure = on_failure
        self._log_every = log_every
        self.loops: dict[str, LoopFailure] = {}

    def record(self, loop: str, exc: BaseException) -> None:
        """Note ``exc`` caught in ``loop``; never raises."""
        now = self._clock()
        entry = self.loops.setdefault(loop, LoopFailure())
        entry.count += 1
        entry.last = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_DETAIL]
        entry.last_at = now
        entry.unlogged += 1
        if self._on_failure is not None:
            with contextlib.suppress(Exception):  # a broken counter must not break supervision
                self._on_failure(loop)
        if now - entry.logged_at >= self._log_every:
            log.error(
                "loop_error",
                loop=loop,
                error=entry.last,
                since_last_log=entry.unlogged,
                total=entry.count,
                exc_info=exc,
            )
            entry.logged_at = now
            entry.unlogged = 0

    def to_json(self, now: float) -> dict[str, Any]:
        return {
            name: {"errors": f.count, "last": f.last, "ago": round(now - f.last_at, 3)}
            for name, f in self.loops.items()
        }


async def every(
    name: str,
    interval: float,
    step: Step,
    *,
    beat: Callable[[str, float], None],
    clock: Callable[[], float],
    sleep: Sleep = asyncio.sleep,
    failures: LoopFailures | None = None,
    sooner: Callable[[float], float] | None = None,
) -> None:
    """Run ``step`` every ``interval`` seconds, beating the ``name`` heartbeat.

    A step that overruns delays the next one instead of stacking up; a loop
    that stops beating for several intervals turns ``/healthz`` red. With
    ``failures`` given, an exception from ``step`` is recorded there and the
    loop carries on (cancellation still ends it). ``sooner``, given the
    interval, says the one to wait before the next step (a scrape while a
    canary waits: :mod:`sentinel.scheduling.suspicion`).
    """
    while True:
        beat(name, interval * 4 + 5)
        started = clock()
        if failures is None:
            await step()
        else:
            try:
                await step()
            except Exception as exc:
                failures.record(name, exc)
        wait = interval if sooner is None else min(interval, sooner(interval))
        await sleep(max(0.0, started + wait - clock()))


async def supervised(
    name: str,
    run: Callable[[], Awaitable[None]],
    failures: LoopFailures,
    *,
    backoff: float = 1.0,
    sleep: Sleep = asyncio.sleep,
) -> None:
    """Run ``run()`` until cancelled, starting it again after any exception.

    For the long-running loops that are not a simple periodic step (the
    canary scheduler, the incident loops, the gRPC publisher): one that
    raises is recorded and restarted after ``backoff`` seconds, so only a
    signal ends the daemon. Its failures show in ``/status`` and
    ``sentinel_loop_errors_total``; one that wedges stops beating, which
    ``/healthz`` reports.
    """
    while True:
        try:
            await run()
        except Exception as exc:
            failures.record(name, exc)
        await sleep(backoff)


class Observers:
    """Builds the observer steps around one ledger and one clock."""

    def __init__(
        self,
        ledger: Ledger,
        clock: Callable[[], float],
        *,
        wall_clock: Callable[[], float] = time.time,
        scrape_failed: Callable[[EvidenceFailure], None] | None = None,
    ) -> None:
        self.ledger = ledger
        self.clock = clock
        self.wall_clock = wall_clock  # bundles show when a /metrics text was taken
        self.observations = Observations()
        # Told every /metrics sample after the ledger (the correctness fingerprint's counters).
        self.sample_listeners: list[Callable[[MetricsSample], None]] = []
        # Told every process sample (with its time) before the ledger: the readings
        # that provide their own sections (sentinel.record.process_readings).
        self.process_listeners: list[Callable[[ProcessSnapshot, float], None]] = []
        # Told why each /metrics scrape gave no sample (sentinel's failure metric).
        self.scrape_failed = scrape_failed

    def evidence_steps(
        self, settings: Settings, client: httpx.AsyncClient, *, listen_port: int | None
    ) -> list[tuple[str, float, Step]]:
        """(heartbeat name, interval, step) of every evidence loop ``settings`` asks for."""
        limits = ScrapeLimits(
            max_bytes=settings.metrics_max_bytes,
            max_lines=settings.metrics_max_lines,
            max_line_bytes=settings.metrics_max_line_bytes,
            max_series=settings.metrics_max_series,
            series_per_engine=settings.metrics_series_per_engine,
        )
        target, clock, timeout = settings.target, self.clock, settings.health_timeout
        scraper = MetricsScraper(
            client, target, clock, timeout=settings.scrape_timeout, limits=limits
        )
        health = VllmHealthPoller(client, target, clock, timeout=timeout)
        lifecycle = LifecyclePoller(client, target, clock, timeout=timeout)
        scale = ElasticEpPoller(client, target, clock, timeout=timeout)
        steps: list[tuple[str, float, Step]] = [
            ("scrape", settings.scrape_interval, self.scrape_step(scraper)),
            ("vllm-health", settings.health_interval, self.health_step(health)),
            ("lifecycle", settings.lifecycle_interval, self.lifecycle_step(lifecycle)),
            # Asks nothing unless a scale shows (record.elastic_ep): no idle footprint.
            ("elastic-ep", settings.lifecycle_interval, status_step(self.ledger, scale, clock)),
        ]
        if settings.watch_processes:
            watcher = ProcessWatcher(
                clock,
                listen_port=listen_port,
                stack_tool=find_py_spy(),
                held_every=HELD_SAMPLES * settings.process_interval,
            )
            steps.append(("processes", settings.process_interval, self.process_step(watcher)))
        return steps

    def scrape_step(self, scraper: MetricsScraper) -> Step:
        """One ``/metrics`` sample into the progress tracker; a counter going down is a restart."""
        ledger, seen = self.ledger, self.observations

        async def step() -> None:
            started = self.clock()  # a scrape sent before the gate went up is no word on it
            try:
                sample = await scraper.scrape()
            except ScrapeError as exc:
                seen.last_scrape_error = f"{exc.reason.value}: {exc.detail}"
                if self.scrape_failed is not None:
                    self.scrape_failed(exc.reason)
                if exc.reason is EvidenceFailure.CONNECT:
                    ledger.saw_refusal(self.clock())
                now = self.clock()
                observe_gate(ledger, gate_of_scrape(exc.status, exc.body), now, now)
                return
            seen.last_scrape_error = ""
            ledger.saw_answer()
            observe_gate(ledger, gate_of_scrape(200, ""), started, self.clock())
            if scraper.last_text is not None:
                seen.metrics_texts.append((self.wall_clock(), scraper.last_text))
            update = ledger.progress.observe(sample)
            ledger.observe_lifecycle(self.clock(), gauges=sample.gauges)
            ledger.observe_traffic(sample)
            for listener in self.sample_listeners:
                listener(sample)
            if update.restarted and ledger.lifecycle.counters_reset_by_scale(self.clock()):
                # An elastic EP scale-up re-creates vLLM's stat loggers: every counter
                # restarts at 0 on the same server (the tracker rebased on this sample).
                log.info("counters_reset_by_scale", epoch=ledger.epoch)
            elif update.restarted:
                ledger.new_epoch("a vLLM counter went down", self.clock())

        return step

    def health_step(self, poller: VllmHealthPoller) -> Step:
        """One ``/health`` poll; a refused connection may open a new epoch."""

        seen = self.observations

        async def step() -> None:
            poll = await poller.poll()
            if poll.failure is not None:
                status = "" if poll.status is None else f" (HTTP {poll.status})"
                seen.last_health_error = f"{poll.failure.value}{status}: {poll.detail}"
                if poll.failure is EvidenceFailure.CONNECT:
                    self.ledger.saw_refusal(self.clock())
            if poll.status is not None:
                # An elastic EP scale answers 503 on every path: a lifecycle state, not death.
                self.ledger.observe_lifecycle(self.clock(), scaling=poll.scaling)
            if poll.scaling:
                self.ledger.observe_health(None, self.clock())
            elif poll.no_endpoint:
                # 404, a redirect, 401/403: a server without vLLM's /health.
                seen.last_health_error = (
                    f"no health endpoint (HTTP {poll.status}): no evidence either way"
                )
                self.ledger.observe_health(None, self.clock())
            elif poll.status is not None:
                # The status line is vLLM's word even when the body misbehaved.
                if poll.failure is None:
                    seen.last_health_error = ""
                self.ledger.observe_health(poll.status, self.clock())

        return step

    def lifecycle_step(self, poller: LifecyclePoller) -> Step:
        """``/is_sleeping`` and ``/is_paused``, where the server has them."""
        ledger = self.ledger
        epoch = ledger.epoch

        async def step() -> None:
            nonlocal epoch
            if ledger.epoch != epoch:
                epoch = ledger.epoch
                poller.forget()
            poll = await poller.poll()
            # An endpoint that stopped answering keeps its last word a while (record.lifecycle).
            now, last, silent = self.clock(), ledger.lifecycle.readings, poll.unanswered
            keep = keeps_word(ledger.lifecycle.current.cannot_tell_since, now)
            ledger.observe_lifecycle(
                now,
                is_sleeping=heard("/is_sleeping", poll.is_sleeping, last.is_sleeping, silent, keep),
                is_paused=heard("/is_paused", poll.is_paused, last.is_paused, silent, keep),
                unanswered=silent,
            )

        return step

    def process_step(self, watcher: ProcessWatcher) -> Step:
        """One process-table sample: engine processes stopped or gone, API server PID changes.

        A refusal the evidence loops saw since the last sample sends the
        watcher to look at the target's socket at once.
        """
        ledger = self.ledger
        told: float | None = None  # the refusal episode the watcher was told of
        said: object = None  # the process evidence last logged

        async def step() -> None:
            nonlocal told, said
            if ledger.refused_since is not None and ledger.refused_since != told:
                watcher.port_refused()
            told = ledger.refused_since
            snapshot = await watcher.sample_async()
            now = self.clock()
            for listener in self.process_listeners:
                listener(snapshot, now)
            ledger.observe_processes(snapshot, now)
            said = log_process_evidence(snapshot, said)

        return step


def log_process_evidence(snapshot: ProcessSnapshot, said: object) -> object:
    """One log line when sentinel first knows which process evidence it has, one per change.

    ``said`` is what the last line said (returned, for the next call). A piece
    that is off is logged with why, the permission it needs and what grants it.
    """
    access = snapshot.access
    if access is None:
        return said
    now = (snapshot.attribution.value, tuple(sorted(access.available().items())))
    if now == said:
        return said
    off = {
        item.evidence.value: "; ".join(
            part
            for part in (
                item.why,
                item.needs and f"needs {item.needs}",
                item.grant and f"granted by {item.grant}",
            )
            if part
        )
        for item in access.off
    }
    (log.warning if off else log.info)(
        "process_evidence",
        attribution=snapshot.attribution.value,
        detail=snapshot.attribution_detail or None,
        unreadable=list(snapshot.unreadable) or None,
        on=[item.evidence.value for item in access.items if item.on],
        off=off or None,
    )
    return now
