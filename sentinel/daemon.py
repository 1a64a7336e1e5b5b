"""The daemon: wires evidence, canaries, the evaluator and the views under one TaskGroup.

Long-running loops (canaries, the observers, evaluation, diagnostics, gRPC publishing)
all run in one ``asyncio.TaskGroup``, each supervised: an exception from a read, a parse,
a canary, a bundle or an Event is recorded (``sentinel_loop_errors_total{loop}``,
``/status``, a rate-limited log line) and the loop carries on or is started again. A
sidecar that exits restarts the healthy server it guards (its liveness probe points
here), so only a signal ends the daemon; a loop that stops ticking turns ``/healthz`` red.

Shutdown is ordered and bounded: readiness red first (``/readyz`` answers 503
while everything else still runs, so the pod leaves its Service before its
probes go away), then the loops stop, then each server is stopped once (gRPC
marks every service NOT_SERVING on its way down), then the clients close.

Elsewhere: judging and publishing health in :mod:`sentinel.evaluation.evaluator` (the
single writer of :class:`HealthState`), the loops in :mod:`sentinel.record.observers`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import httpx
from prometheus_client import CollectorRegistry

from sentinel import __version__
from sentinel.auto_sleep import AutoSleepWatch, CanaryHold
from sentinel.canary.catalog import Catalog, apply_overrides, load_catalog
from sentinel.canary.result import CanaryResult
from sentinel.canary.runner import CanaryRunner
from sentinel.canary.spec import CanaryKind
from sentinel.config.loader import effective_config, read_api_key
from sentinel.config.settings import Settings, split_host_port
from sentinel.diagnostics.bundle import DiagnosticsContext, Trigger
from sentinel.evaluation.evaluator import Evaluator
from sentinel.evaluation.health import HealthState
from sentinel.evaluation.incidents import IncidentRecorder
from sentinel.evaluation.views import bundle_context
from sentinel.fingerprint.book import CorrectnessProvider, build_book, bundle_section, weights_steps
from sentinel.fingerprint.endpoint import fingerprint_routes
from sentinel.fleet.brake_memory import BrakeMemory
from sentinel.fleet.gate import BudgetGate
from sentinel.fleet.lease import PoolBudget
from sentinel.maintenance.endpoint import MaintenanceHook
from sentinel.record.fault_tolerance import FaultToleranceWatch
from sentinel.record.kv_transfer import KvTransferWatch
from sentinel.record.ledger import Ledger
from sentinel.record.observers import LoopFailures, Observers, Step, every, supervised
from sentinel.record.planner import Planner
from sentinel.record.process_readings import process_readings
from sentinel.record.provider import Provider
from sentinel.record.reachability import Reachability
from sentinel.record.sink import ResultSink
from sentinel.scheduling.departure import Departure
from sentinel.scheduling.scheduler import Scheduler
from sentinel.scheduling.suspicion import Suspicion
from sentinel.serve.probe_thread import ThreadedHttpServer
from sentinel.serve.state_metrics import daemon_metrics
from sentinel.target import target_port, tls_context
from sentinel.telemetry.logging import get_logger
from sentinel.telemetry.redact import redact_url
from sentinel.verdict import Action

if TYPE_CHECKING:  # grpc (about 8 MB) is imported only when its listener is on
    from sentinel.serve.grpc import GrpcHealthServer

log = get_logger("sentinel.daemon")

ResultListener = Callable[[CanaryResult], None]
Sleep = Callable[[float], Awaitable[None]]


class Daemon:
    """``sentinel run``: one target, one health state, one TaskGroup."""

    def __init__(
        self,
        settings: Settings,
        *,
        catalog: Catalog | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        api_key: str | None = None,
        budget: PoolBudget | None = None,
        providers: Sequence[Provider[Any]] = (),
        brake: BrakeMemory | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.sleep = sleep
        self.catalog = catalog if catalog is not None else load_catalog(settings.catalog)
        self.specs = apply_overrides(self.catalog.enabled(), settings.canaries)
        self.api_key = api_key if api_key is not None else read_api_key(settings)
        self.config_json = effective_config(settings)  # settings are frozen: dump once
        self.registry = CollectorRegistry()
        self.state = HealthState(enforce=settings.enforce, clock=clock)
        self.metrics = daemon_metrics(self.registry, self.state, clock=clock)
        # "Paused until", set through /maintenance; evidence asks self.maintenance.active(now).
        self.maintenance_hook = MaintenanceHook.build(settings, clock, self.metrics)
        self.maintenance = self.maintenance_hook.window
        self.departure = Departure()  # the server stopped listening: let go of our requests
        self.ledger = Ledger(self._kinds(), clock(), on_refused=self.departure.left)
        # The one place kinds are set aside or fall back; the evaluator and the scheduler
        # each tell it when, and scheduling reads the plan it publishes.
        self.planner = Planner(self.ledger, self.specs)
        self.fingerprints = build_book(settings, self.specs)
        self.started = asyncio.Event()
        self.http: ThreadedHttpServer | None = None
        self.grpc: GrpcHealthServer | None = None
        self.runner: CanaryRunner | None = None
        self._listeners: list[ResultListener] = [self.fingerprints.observe_result]
        self.observers = Observers(self.ledger, clock, scrape_failed=self.metrics.scrape_failed)
        self.observers.sample_listeners.append(self.fingerprints.observe_sample)
        self.suspicion = Suspicion(self.ledger, clock)
        self.observers.sample_listeners.append(self.suspicion.observe)
        self.auto_sleep = AutoSleepWatch.listening(self.observers, settings)
        self.fault_tolerance = FaultToleranceWatch.for_settings(self.observers, settings)
        self.failures = LoopFailures(clock, self.metrics.loop_failed)
        self.observers.observations.failures = self.failures
        self.incidents = IncidentRecorder.for_settings(
            settings, self.metrics, self._diagnostics_context
        )
        self.observers.sample_listeners.append(self.incidents.samples.observe)
        self.budget = budget or PoolBudget.in_pod(settings.restart_budget)
        self.reachability = Reachability.for_settings(self.observers, settings)  # warns a minute
        self.evaluator = Evaluator(
            settings,
            ledger=self.ledger,
            state=self.state,
            metrics=self.metrics,
            incidents=self.incidents,
            observations=self.observers.observations,
            config=self.config_json,
            on_server_restart=self._forget_baselines,
            specs=self.specs,
            maintenance=self._maintenance_reason,
            providers=(
                CorrectnessProvider(self.fingerprints),
                *BudgetGate.of(self.budget),
                self.reachability,
                *process_readings(self.observers),
                KvTransferWatch.listening(self.observers, settings),
                self.auto_sleep,
                self.fault_tolerance,
                *providers,
            ),
            budget=self.budget,
            brake=brake or BrakeMemory.in_pod(settings),
            planner=self.planner,
        )

    def _maintenance_reason(self, now: float) -> str | None:
        window = self.maintenance.active(now)
        return None if window is None else window.reason or "no reason given"

    def _kinds(self) -> list[tuple[CanaryKind, Action, float | None]]:
        kinds: dict[CanaryKind, tuple[CanaryKind, Action, float | None]] = {}
        for spec in self.specs:
            if spec.enabled and spec.kind not in kinds:
                kinds[spec.kind] = (spec.kind, Action(spec.policy), spec.latency_slo)
        return list(kinds.values())

    def add_result_listener(self, listener: ResultListener) -> None:
        """Call ``listener`` with every canary result, right after the ledger recorded it.

        Listeners run on the daemon's event loop, synchronously, so they must
        be quick; one that raises is logged and skipped, never stops a canary
        loop. This is the way to follow results from outside: the ledger
        itself is mutated by the loop and is not safe to read from a thread.
        """
        self._listeners.append(listener)

    # -- lifecycle ----------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set; raise if any loop dies."""
        settings = self.settings
        host, port = split_host_port(settings.listen)
        self.http = ThreadedHttpServer(
            self.state,
            self.registry,
            host,
            port,
            extra_routes=[*self.incidents.routes(), *fingerprint_routes(self.fingerprints)],
            shutdown_timeout=settings.shutdown_timeout,
            maintenance=self.maintenance_hook,
            clock=self.clock,
            probe_hold=settings.probe_hold,
        )
        if settings.grpc_listen is not None:
            from sentinel.serve.grpc import GrpcHealthServer

            self.grpc = GrpcHealthServer(self.state, settings.grpc_listen)
        timeout = httpx.Timeout(10.0, connect=2.0)
        limits = httpx.Limits(max_connections=32, max_keepalive_connections=8)
        tls = tls_context(settings.target)
        async with (
            httpx.AsyncClient(timeout=timeout, limits=limits, verify=tls) as evidence_client,
            httpx.AsyncClient(timeout=timeout, limits=limits, verify=tls) as canary_client,
        ):
            self.runner = CanaryRunner(
                canary_client,
                settings.target,
                api_key=self.api_key,
                clock=self.clock,
                max_body_bytes=settings.canary_max_bytes,
            )
            periodic = self._observer_steps(evidence_client)
            await self.http.start()
            try:
                if self.grpc is not None:
                    await self.grpc.start()
            except BaseException:
                await self.http.stop()
                raise
            log.info(
                "sentinel_started",
                version=__version__,
                target=redact_url(settings.target),
                http_port=self.http.port,
                grpc_port=None if self.grpc is None else self.grpc.port,
                enforce=settings.enforce,
                canaries=[s.name for s in self.specs],
            )
            self.started.set()
            try:
                async with asyncio.TaskGroup() as group:
                    runner, grpc = self.runner, self.grpc
                    loops = [
                        group.create_task(
                            self._supervised("scheduler", lambda: self._scheduler(runner).run()),
                            name="scheduler",
                        ),
                        group.create_task(
                            self._supervised("incidents", self.incidents.run), name="incidents"
                        ),
                    ]
                    if self.budget.enabled:
                        keep_slot = self._supervised("restart-budget", self.budget.run)
                        loops.append(group.create_task(keep_slot, name="restart-budget"))
                    if grpc is not None:
                        publish = self._supervised("grpc-publish", grpc.publish)
                        loops.append(group.create_task(publish, name="grpc-publish"))
                    loops += [
                        group.create_task(self._every(name, interval, step), name=name)
                        for name, interval, step in periodic
                    ]
                    await stop.wait()
                    log.info("sentinel_stopping")
                    await self.evaluator.shut_down(self.clock())
                    for task in loops:
                        task.cancel()
            finally:
                await self._shutdown()
                self.incidents.close()
                self.budget.close()
                self.evaluator.brake.close()

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
        """Ordered, bounded: readiness red, then gRPC (NOT_SERVING, closed), then HTTP.

        Each server is stopped here and only here. Readiness is already red
        after a requested stop; after a loop failure it turns red now, before
        the listeners close.
        """
        bound = self.settings.shutdown_timeout
        await self.evaluator.shut_down(self.clock())
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

    # -- wiring -------------------------------------------------------------
    def _scheduler(self, runner: CanaryRunner) -> Scheduler:
        return Scheduler(
            self.specs,
            runner,
            self.ledger,
            self.metrics,
            idle_window=self.settings.idle_window,
            configured_model=self.settings.model,
            clock=self.clock,
            sleep=self.sleep,
            beat=self.state.beat,
            sink=ResultSink(self.ledger, self.metrics, clock=self.clock, listener=self._on_result),
            planner=self.planner,
            on_error=self.failures.record,
            late_wait=self.settings.late_wait,
            suspicion=self.suspicion,
            hold=CanaryHold(self.auto_sleep, self.ledger, clock=self.clock),
            departure=self.departure,
        )

    def _observer_steps(self, client: httpx.AsyncClient) -> list[tuple[str, float, Step]]:
        """(heartbeat name, interval, step) of every periodic loop besides the canaries."""
        steps = self.observers.evidence_steps(
            self.settings, client, listen_port=target_port(self.settings.target)
        )
        book, key = self.fingerprints, self.api_key
        steps += weights_steps(book, self.settings, client, self.clock, key)
        steps.append(self.fault_tolerance.observer_step(client, self.settings, key))
        steps += self.evaluator.brake.steps()  # the brake's memory to its Lease, off the verdict
        return [*steps, ("evaluate", self.settings.eval_interval, self._evaluate_step)]

    async def _every(self, name: str, interval: float, step: Step) -> None:
        sooner = self.suspicion.scrape_interval if name == "scrape" else None
        # A comeback's results are judged as they land (sentinel.scheduling.comeback).
        judge = name == "evaluate"
        await every(
            name,
            interval,
            step,
            beat=self.state.beat,
            clock=self.clock,
            sleep=self.suspicion.comeback.judge_sleeper(self.sleep) if judge else self.sleep,
            failures=self.failures,
            sooner=sooner,
        )

    async def _supervised(self, name: str, run: Callable[[], Awaitable[None]]) -> None:
        await supervised(name, run, self.failures, sleep=self.sleep)

    async def _evaluate_step(self) -> None:
        if self.evaluator.due(self.clock()):
            await self.evaluator.evaluate(self.clock())
        self.reachability.warn(self.clock())

    def _forget_baselines(self) -> None:
        if self.runner is not None:
            self.runner.forget_baselines()

    def _on_result(self, result: CanaryResult) -> None:
        _log_result(result)
        self.suspicion.comeback.judge_soon()
        for listener in tuple(self._listeners):
            try:
                listener(result)
            except Exception:
                log.exception("result_listener_failed", listener=repr(listener))

    def _diagnostics_context(self, trigger: Trigger) -> DiagnosticsContext:
        # What the last verdict judged (sentinel.evaluation.views), never the live ledger.
        return bundle_context(
            trigger,
            self.evaluator.evidence,
            metrics_text=self.observers.observations.metrics_texts,
            config=self.config_json,
            section_max_bytes=self.settings.diagnostics_section_max_bytes,
            bundle_max_bytes=self.settings.diagnostics_bundle_max_bytes,
            correctness=bundle_section(self.fingerprints),
        )


def _log_result(result: CanaryResult) -> None:
    (log.info if result.ok else log.warning)("canary", **result.log_fields())
