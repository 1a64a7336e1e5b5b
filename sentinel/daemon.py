"""The daemon: wires evidence, canaries, verdict and views under one TaskGroup.

Long-running loops (canaries, ``/metrics`` scrape, ``/health`` poll, process
watch, evaluation, diagnostics, gRPC publishing) all run in one
``asyncio.TaskGroup``: if one dies, the group cancels the rest and ``run``
raises, so the process exits non-zero and Kubernetes restarts the sidecar.
Shutdown is ordered and bounded: every service NOT_SERVING, loops cancelled,
servers stopped, clients closed.

The evaluation loop is the single writer of :class:`HealthState`.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client import CollectorRegistry

from sentinel import __version__
from sentinel.canary.result import CanaryKind, CanaryResult, Reason
from sentinel.canary.runner import CanaryRunner
from sentinel.catalog import Catalog, load_catalog
from sentinel.config import Settings, effective_config, read_api_key, split_host_port
from sentinel.diagnostics.bundle import DiagnosticsContext, Trigger
from sentinel.evidence.failure import EvidenceFailure
from sentinel.evidence.metrics import MetricsScraper, ScrapeError
from sentinel.evidence.processes import ProcessWatcher, SchedulingPolicy
from sentinel.evidence.vllm_health import VllmHealthPoller
from sentinel.health import HealthSnapshot, HealthState
from sentinel.incidents import IncidentRecorder
from sentinel.ledger import Ledger
from sentinel.scheduler import Scheduler, apply_overrides
from sentinel.serve.grpc import GrpcHealthServer
from sentinel.serve.http import HttpServer
from sentinel.telemetry.logging import get_logger
from sentinel.telemetry.metrics import SentinelMetrics
from sentinel.verdict import Action, Evidence, Hang, Verdict, VerdictState, evaluate

log = get_logger("sentinel.daemon")

METRICS_KEPT = 5  # recent raw /metrics texts kept for diagnostics bundles


@dataclass(slots=True)
class Transition:
    at: float
    probe: str
    ok: bool
    reason: str


@dataclass(slots=True)
class DaemonStatus:
    """Mutable bits the daemon reports in ``/status`` beside the verdict."""

    priority_policy: str | None = None
    priority_source: str = "unknown"
    transitions: deque[Transition] = field(default_factory=lambda: deque(maxlen=100))
    metrics_texts: deque[tuple[float, str]] = field(
        default_factory=lambda: deque(maxlen=METRICS_KEPT)
    )
    last_scrape_error: str = ""
    hangs_confirmed: int = 0
    stalls: int = 0


class Daemon:
    """``sentinel run``: one target, one health state, one TaskGroup."""

    def __init__(
        self,
        settings: Settings,
        *,
        catalog: Catalog | None = None,
        clock: Callable[[], float] = time.monotonic,
        api_key: str | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.catalog = catalog if catalog is not None else load_catalog(settings.probes)
        self.specs = apply_overrides(self.catalog.enabled(), settings.canaries)
        self.api_key = api_key if api_key is not None else read_api_key(settings)
        self.policy = settings.policy()
        self.config_json = effective_config(settings)  # settings are frozen: dump once
        self.registry = CollectorRegistry()
        self.state = HealthState(enforce=settings.enforce, clock=clock)
        self.metrics = SentinelMetrics(self.registry, self.state, clock=clock)
        self.ledger = Ledger(self._kinds(), clock())
        self.verdict_state = VerdictState()
        self.verdict: Verdict | None = None
        self.status = DaemonStatus()
        self.started = asyncio.Event()
        self.http: HttpServer | None = None
        self.grpc: GrpcHealthServer | None = None
        self.runner: CanaryRunner | None = None
        self._seen_epoch = self.ledger.epoch
        self._last_evaluation: float | None = None
        self.observed_since = float("-inf")
        self.stall_threshold = max(2.0, settings.eval_interval * 4)
        self.incidents = IncidentRecorder.build(
            settings.diagnostics_dir,
            enabled=settings.diagnostics,
            max_incidents=settings.diagnostics_max_incidents,
            max_bytes=settings.diagnostics_max_bytes,
            metrics=self.metrics,
            context=self._diagnostics_context,
        )

    def _kinds(self) -> list[tuple[CanaryKind, Action, float | None]]:
        kinds: dict[CanaryKind, tuple[CanaryKind, Action, float | None]] = {}
        for spec in self.specs:
            if spec.enabled and spec.kind not in kinds:
                kinds[spec.kind] = (spec.kind, Action(spec.policy), spec.latency_slo)
        return list(kinds.values())

    # -- lifecycle ----------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set; raise if any loop dies."""
        settings = self.settings
        host, port = split_host_port(settings.listen)
        self.http = HttpServer(
            self.state,
            self.registry,
            host,
            port,
            extra_routes=self.incidents.routes(),
            shutdown_timeout=settings.shutdown_timeout,
        )
        self.grpc = GrpcHealthServer(self.state, settings.grpc_listen)
        timeout = httpx.Timeout(10.0, connect=2.0)
        limits = httpx.Limits(max_connections=32, max_keepalive_connections=8)
        async with (
            httpx.AsyncClient(timeout=timeout, limits=limits) as evidence_client,
            httpx.AsyncClient(timeout=timeout, limits=limits) as canary_client,
        ):
            runner = CanaryRunner(
                canary_client, settings.target, api_key=self.api_key, clock=self.clock
            )
            self.runner = runner
            scheduler = Scheduler(
                self.specs,
                runner,
                self.ledger,
                self.metrics,
                idle_window=settings.idle_window,
                configured_model=settings.model,
                clock=self.clock,
                beat=self.state.beat,
                on_result=self._log_result,
            )
            scraper = MetricsScraper(
                evidence_client, settings.target, self.clock, timeout=settings.scrape_timeout
            )
            health = VllmHealthPoller(evidence_client, settings.target, self.clock)
            watcher = (
                ProcessWatcher(self.clock, listen_port=httpx.URL(settings.target).port)
                if settings.watch_processes
                else None
            )
            await self.http.start()
            try:
                await self.grpc.start()
            except BaseException:
                await self.http.stop()
                raise
            log.info(
                "sentinel_started",
                version=__version__,
                target=settings.target,
                http_port=self.http.port,
                grpc_port=self.grpc.port,
                enforce=settings.enforce,
                canaries=[s.name for s in self.specs],
            )
            self.started.set()
            try:
                async with asyncio.TaskGroup() as group:
                    periodic = [
                        ("scrape", settings.scrape_interval, self._scrape_step(scraper)),
                        ("vllm-health", settings.health_interval, self._health_step(health)),
                        ("evaluate", settings.eval_interval, self._evaluate_step),
                    ]
                    if watcher is not None:
                        periodic.append(
                            ("processes", settings.process_interval, self._process_step(watcher))
                        )
                    loops = [
                        group.create_task(scheduler.run(), name="scheduler"),
                        group.create_task(self.grpc.publish(), name="grpc-publish"),
                        group.create_task(self.incidents.run(), name="incidents"),
                    ]
                    loops += [
                        group.create_task(self._every(name, interval, step), name=name)
                        for name, interval, step in periodic
                    ]
                    await stop.wait()
                    log.info("sentinel_stopping")
                    await self.grpc.stop(grace=min(1.0, settings.shutdown_timeout))
                    for task in loops:
                        task.cancel()
            finally:
                await self._shutdown()
                self.incidents.close()

    @asynccontextmanager
    async def serving(self, start_timeout: float = 15.0) -> AsyncIterator[Daemon]:
        """Run in the background of the caller's event loop until the block exits.

        For embedding (``sentinel demo``, tests): yields once the HTTP and gRPC
        listeners are bound; on exit it stops the daemon the same ordered way
        SIGTERM does, and re-raises a loop failure.
        """
        stop = asyncio.Event()
        task = asyncio.create_task(self.run(stop), name="sentinel")
        started = asyncio.create_task(self.started.wait())
        try:
            done, _ = await asyncio.wait(
                {task, started}, timeout=start_timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if task in done:
                task.result()  # run() ended before listening: raise its error
            if started not in done:
                raise TimeoutError(f"sentinel did not start within {start_timeout:g}s")
            yield self
        finally:
            started.cancel()
            stop.set()
            await asyncio.wait_for(task, self.settings.shutdown_timeout * 3)

    async def _shutdown(self) -> None:
        """Ordered, bounded: gRPC NOT_SERVING and closed, then the HTTP listener."""
        bound = self.settings.shutdown_timeout
        if self.grpc is not None:
            try:
                async with asyncio.timeout(bound):
                    await self.grpc.stop(grace=min(1.0, bound))
            except TimeoutError:
                log.warning("grpc_stop_timed_out")
        if self.http is not None:
            try:
                async with asyncio.timeout(bound):
                    await self.http.stop()
            except TimeoutError:
                log.warning("http_stop_timed_out")
        log.info("sentinel_stopped")

    # -- evidence loops -----------------------------------------------------
    async def _every(self, name: str, interval: float, step: Callable[[], Awaitable[None]]) -> None:
        """Run ``step`` every ``interval`` seconds, beating the ``name`` heartbeat.

        A step that overruns delays the next one instead of stacking up; a loop
        that stops beating for several intervals turns ``/healthz`` red.
        """
        while True:
            self.state.beat(name, interval * 4 + 5)
            started = self.clock()
            await step()
            await asyncio.sleep(max(0.0, started + interval - self.clock()))

    def _scrape_step(self, scraper: MetricsScraper) -> Callable[[], Awaitable[None]]:
        interval = self.settings.scrape_interval
        previous_at = float("-inf")

        async def step() -> None:
            nonlocal previous_at
            try:
                sample = await scraper.scrape()
            except ScrapeError as exc:
                self.status.last_scrape_error = f"{exc.reason.value}: {exc.detail}"
                if exc.reason is EvidenceFailure.CONNECT:
                    self.ledger.saw_refusal(self.clock())
                return
            self.status.last_scrape_error = ""
            self.ledger.saw_answer()
            if scraper.last_text is not None:
                self.status.metrics_texts.append((time.time(), scraper.last_text))
            update = self.ledger.progress.observe(
                sample,
                canaries_moving=self.ledger.last_canary_activity > previous_at,
                # A canary sent just before the previous sample may show its
                # first work in this interval: look back one more interval.
                sent_budget=self.ledger.budget_sent_between(previous_at - interval, sample.at),
                own_in_flight=self.ledger.in_flight(),
            )
            previous_at = sample.at
            if update.restarted:
                self.ledger.new_epoch("a vLLM counter went down", self.clock())

        return step

    def _health_step(self, poller: VllmHealthPoller) -> Callable[[], Awaitable[None]]:
        async def step() -> None:
            poll = await poller.poll()
            if poll.failure is EvidenceFailure.CONNECT:
                self.ledger.saw_refusal(self.clock())
            elif poll.status is not None:
                self.ledger.observe_health(poll.status, self.clock())

        return step

    def _process_step(self, watcher: ProcessWatcher) -> Callable[[], Awaitable[None]]:
        async def step() -> None:
            self.ledger.observe_processes(await watcher.sample_async(), self.clock())

        return step

    # -- the single writer --------------------------------------------------
    async def _evaluate_step(self) -> None:
        await self.evaluate_once(self.clock())

    async def evaluate_once(self, now: float) -> Verdict:
        """Judge the ledger at ``now`` and publish the result."""
        ledger = self.ledger
        if ledger.epoch != self._seen_epoch:
            self._seen_epoch = ledger.epoch
            self.metrics.server_restarted()
            if self.runner is not None:
                self.runner.forget_baselines()
            log.warning("server_restart_seen", epoch=ledger.epoch, reason=ledger.epoch_reason)
        self._check_own_stall(now)
        evidence = ledger.evidence(
            now, freshness=self.settings.evidence_freshness, observed_since=self.observed_since
        )
        previous = self.verdict
        self.verdict_state, verdict = evaluate(self.verdict_state, evidence, self.policy, now)
        self.verdict = verdict
        ledger.startup_passed = verdict.startup.ok
        for hang in verdict.new_hangs:
            self._hang_confirmed(hang, verdict)
        suspicion = _suspicion(evidence, verdict)
        if suspicion is not None:
            self.incidents.suspect(*suspicion)
        elif not verdict.hangs:
            self.incidents.all_clear()
        self._log_transitions(previous, verdict, now)
        self._update_priority()
        await self.state.publish(self._snapshot(verdict, now))
        return verdict

    def _check_own_stall(self, now: float) -> None:
        """Notice when sentinel's own loop did not run for a while (CPU starvation, a pause).

        Whatever timed out meanwhile may be sentinel's fault, not the server's:
        the verdict then counts its windows from now on.
        """
        last, self._last_evaluation = self._last_evaluation, now
        if last is None:
            return
        gap = now - last
        if gap > self.stall_threshold:
            self.observed_since = now
            self.status.stalls += 1
            log.warning(
                "sentinel_stalled",
                seconds=round(gap, 3),
                why="sentinel's own loop did not run; hang windows restart from now",
            )

    def _hang_confirmed(self, hang: Hang, verdict: Verdict) -> None:
        self.metrics.hang_detected(hang.kind)
        self.status.hangs_confirmed += 1
        if verdict.brake_engaged:
            outcome = "brake engaged: unready, not restarting"
        elif hang.action is Action.RESTART and not self.settings.enforce:
            outcome = "would restart (observe-only)"
        else:
            outcome = {
                Action.RESTART: "liveness failing",
                Action.UNREADY: "readiness failing",
                Action.ALERT: "alert only",
            }[hang.action]
        self.incidents.hang_confirmed(
            hang, enforce=self.settings.enforce, braked=verdict.brake_engaged
        )
        log.warning(
            "hang_confirmed",
            kind=hang.kind.value,
            action=hang.action.value,
            outcome=outcome,
            reason=hang.reason,
        )

    def _log_transitions(self, previous: Verdict | None, verdict: Verdict, now: float) -> None:
        for probe in ("liveness", "readiness", "startup"):
            answer = getattr(verdict, probe)
            before = None if previous is None else getattr(previous, probe)
            if before is None or before.ok != answer.ok:
                self.status.transitions.append(Transition(now, probe, answer.ok, answer.reason))
                log.info("verdict_changed", probe=probe, ok=answer.ok, reason=answer.reason)

    def _update_priority(self) -> None:
        configured = self.settings.scheduling_policy
        policy: str | None
        if configured != "auto":
            policy, source = configured, "config"
        else:
            snapshot = self.ledger.processes
            found = None if snapshot is None else snapshot.scheduling_policy
            policy = None if found is None else found.value
            source = "engine command line" if found is not None else "unknown"
        if policy != self.status.priority_policy:
            self.status.priority_policy, self.status.priority_source = policy, source
            effective = policy == SchedulingPolicy.PRIORITY.value
            if policy is None:
                log.info("priority_unknown", why="no vLLM process visible and none configured")
            elif effective:
                log.info("priority_effective", policy=policy, source=source)
            else:
                log.warning(
                    "priority_not_effective",
                    policy=policy,
                    source=source,
                    why="vLLM ignores request priority unless run with "
                    "--scheduling-policy priority",
                )

    def _log_result(self, result: CanaryResult) -> None:
        fields: dict[str, Any] = {
            "canary": result.name,
            "kind": result.kind.value,
            "ok": result.ok,
            "reason": result.reason.value,
            "duration": round(result.duration, 4),
        }
        if result.ttft is not None:
            fields["ttft"] = round(result.ttft, 4)
        if result.detail:
            fields["detail"] = result.detail
        if result.ok:
            log.info("canary", **fields)
        else:
            log.warning("canary", **fields)

    def _diagnostics_context(self, trigger: Trigger) -> DiagnosticsContext:
        return DiagnosticsContext(
            trigger=trigger,
            metrics_text=tuple(self.status.metrics_texts),
            canary_history={
                kind.value: tuple(record.results) for kind, record in self.ledger.records.items()
            },
            config=self.config_json,
        )

    # -- the view -----------------------------------------------------------
    def _snapshot(self, verdict: Verdict, now: float) -> HealthSnapshot:
        policy = self.status.priority_policy
        effective = None if policy is None else policy == SchedulingPolicy.PRIORITY.value
        return HealthSnapshot(
            liveness=verdict.liveness,
            readiness=verdict.readiness,
            startup=verdict.startup,
            enforce=self.settings.enforce,
            priority_effective=effective,
            progress_at=self.ledger.progress.last_progress_at,
            brake_engaged=verdict.brake_engaged,
            status=self._status_document(verdict, now, effective),
        )

    def _status_document(
        self, verdict: Verdict, now: float, priority_effective: bool | None
    ) -> dict[str, Any]:
        ledger = self.ledger

        def age(t: float | None) -> float | None:
            return None if t is None else round(now - t, 3)

        canaries: dict[str, Any] = {}
        for kind, record in ledger.records.items():
            canaries[kind.value] = {
                "enabled": record.enabled,
                "disabled_reason": record.disabled_reason or None,
                "action": record.action.value,
                "outstanding_for": [age(t) for t in record.outstanding.values()],
                "last": [_result_json(r, now) for r in list(record.results)[-10:]],
                "passing": bool(record.results) and record.results[-1].ok,
            }
        processes = ledger.processes
        return {
            "version": __version__,
            "target": self.settings.target,
            "model": ledger.model,
            "enforce": self.settings.enforce,
            "server": {
                "epoch": ledger.epoch,
                "epoch_age": age(ledger.epoch_started),
                "epoch_reason": ledger.epoch_reason,
                "reachable": ledger.reachable,
                "vllm_health_status": ledger.health_status,
            },
            "priority": {
                "policy": self.status.priority_policy,
                "source": self.status.priority_source,
                "effective": priority_effective,
            },
            "evidence": {
                "progress_signals": list(ledger.progress.signals),
                "progress_available": bool(ledger.progress.signals),
                "progress_age": age(ledger.progress.last_progress_at),
                "real_completion_age": age(ledger.progress.last_real_completion_at),
                "last_scrape_age": age(ledger.progress.last_sample_at),
                "last_scrape_error": self.status.last_scrape_error or None,
                "engine_down": ledger.engine_down_detail or None,
                "processes": None
                if processes is None
                else {
                    "api": None
                    if processes.api is None
                    else {"pid": processes.api.pid, "state": processes.api.state.value},
                    "engines": [
                        {"pid": p.pid, "name": p.name, "role": p.role.value, "state": p.state.value}
                        for p in processes.engine_processes
                    ],
                },
            },
            "canaries": canaries,
            "verdict": {
                "hangs": [
                    {
                        "kind": h.kind.value,
                        "action": h.action.value,
                        "reason": h.reason,
                        "for": age(h.since),
                    }
                    for h in verdict.hangs
                ],
                "brake_engaged": verdict.brake_engaged,
                "would_restart": verdict.would_restart,
                "sentinel_stalls": self.status.stalls,
                "hang_episodes_last_hour": len(
                    [t for t in self.verdict_state.episodes if now - t < self.policy.brake_window]
                ),
            },
            "incidents": {
                "open": None
                if self.incidents.current is None
                else {
                    "trigger": self.incidents.current.trigger.kind,
                    "reason": self.incidents.current.trigger.reason,
                    "for": age(self.incidents.current.opened),
                    "bundle": None
                    if self.incidents.current.record is None
                    else self.incidents.current.record.path,
                },
                "recent": [r.to_json() for r in self.incidents.recent[:5]],
            },
            "history": [
                {"ago": age(t.at), "probe": t.probe, "ok": t.ok, "reason": t.reason}
                for t in self.status.transitions
            ],
            "config": self.config_json,
        }


def _suspicion(evidence: Evidence, verdict: Verdict) -> tuple[str, str] | None:
    """Why a hang is suspected now (a trigger for diagnostics), or None."""
    if verdict.hangs:
        hang = verdict.hangs[0]
        return f"{hang.kind.value}-hang", hang.reason
    if evidence.engine_down_since is not None:
        return "engine-down", evidence.engine_down_detail or "engine process down"
    if evidence.health_failing_since is not None:
        return "vllm-health-failing", "vLLM /health is failing"
    for kind in evidence.kinds.values():
        if kind.enabled and kind.results and kind.results[-1].reason is Reason.TIMEOUT:
            return "missed-deadline", f"a {kind.kind.value} canary missed its deadline"
    return None


def _result_json(result: CanaryResult, now: float) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": result.name,
        "ok": result.ok,
        "reason": result.reason.value,
        "ago": round(now - result.finished, 3),
        "duration": round(result.duration, 4),
    }
    if result.ttft is not None:
        out["ttft"] = round(result.ttft, 4)
    if result.detail:
        out["detail"] = result.detail
    if result.reason is not Reason.OK and result.http_status is not None:
        out["http_status"] = result.http_status
    return out
