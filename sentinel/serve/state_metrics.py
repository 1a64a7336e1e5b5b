"""The state metrics: the health snapshot on ``/metrics``, read at scrape time.

A view of :class:`HealthState` like ``/livez`` and the gRPC health service,
so it lives beside them: no one sets these gauges, the collector reads the
snapshot the evaluator published when Prometheus scrapes, and ``/metrics``
cannot disagree with ``/livez``. That snapshot is drawn from the judged
evidence and the verdict alone
(:func:`sentinel.evaluation.views.health_snapshot`). The event metrics it is
registered beside (:class:`SentinelMetrics`) are recorded into by layers
below the health state, which is why this collector is not among them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sentinel.evaluation.health import HealthState
from sentinel.fleet.series import register_budget_series
from sentinel.telemetry.metrics import PROBES, SentinelMetrics
from sentinel.verdict import Phase

PHASES = tuple(p.value for p in Phase)


def daemon_metrics(
    registry: CollectorRegistry,
    state: HealthState,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> SentinelMetrics:
    """A daemon's metrics on ``registry``: the event metrics, the state, the restart budget's.

    The restart budget's series read the same published health state, at the same scrape.
    """
    metrics = SentinelMetrics(registry)
    registry.register(HealthCollector(state, clock))
    register_budget_series(registry, state.snapshot)
    return metrics


class HealthCollector(Collector):
    """State metrics read from the health snapshot at scrape time.

    ``sentinel_priority_effective`` is omitted while it is unknown (no vLLM
    process visible and no policy in config) rather than exported as NaN:
    an absent series is what ``absent()`` alerts are written for, and NaN
    breaks ``== 0`` comparisons silently. ``sentinel_progress_age_seconds`` is
    omitted until progress was seen once.
    """

    def __init__(self, state: HealthState, clock: Callable[[], float] = time.monotonic) -> None:
        self._state = state
        self._clock = clock

    def describe(self) -> Iterable[Metric]:
        # Declared without samples so registration does not read the state
        # and duplicate names are still caught.
        return self._families()

    def collect(self) -> Iterable[Metric]:
        snapshot = self._state.snapshot()
        verdict, priority, progress, enforce, brake, phase, evidence, stuck = self._families()
        for probe, answer in zip(
            PROBES, (snapshot.liveness, snapshot.readiness, snapshot.startup), strict=True
        ):
            verdict.add_metric([probe], 1.0 if answer.ok else 0.0)
        yield verdict
        if snapshot.priority_effective is not None:
            priority.add_metric([], 1.0 if snapshot.priority_effective else 0.0)
            yield priority
        if snapshot.progress_at is not None:
            progress.add_metric([], max(0.0, self._clock() - snapshot.progress_at))
            yield progress
        enforce.add_metric([], 1.0 if snapshot.enforce else 0.0)
        yield enforce
        brake.add_metric([], 1.0 if snapshot.brake_engaged else 0.0)
        yield brake
        # Declared always; a series only while the brake holds a cause restarts did not fix.
        if (ineffective := snapshot.restart_ineffective) is not None:
            stuck.add_metric([ineffective.node, ineffective.cause], float(ineffective.restarts))
        yield stuck
        for name in PHASES:
            phase.add_metric([name], 1.0 if snapshot.phase == name else 0.0)
        yield phase
        # Declared always; no series until the processes were sampled.
        for name, on in sorted(snapshot.process_evidence.items()):
            evidence.add_metric([name], 1.0 if on else 0.0)
        yield evidence

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, ...]:
        return (
            GaugeMetricFamily(
                "sentinel_verdict",
                "Current kubelet-facing answer per probe: 1 pass, 0 fail.",
                labels=["probe"],
            ),
            GaugeMetricFamily(
                "sentinel_priority_effective",
                "1 when the server honours canary priority (--scheduling-policy priority), "
                "0 when it ignores it; absent while unknown.",
            ),
            GaugeMetricFamily(
                "sentinel_progress_age_seconds",
                "Seconds since the inference server last showed real progress; "
                "absent until progress was seen.",
            ),
            GaugeMetricFamily(
                "sentinel_enforce",
                "1 when a confirmed hang fails liveness, 0 in observe-only mode.",
            ),
            GaugeMetricFamily(
                "sentinel_restart_brake_engaged",
                "1 while the restart-loop brake holds a repeated hang at unready "
                "instead of failing liveness again.",
            ),
            GaugeMetricFamily(
                "sentinel_server_phase",
                "The inference server's lifecycle phase: 1 on the current one "
                "(asleep and paused are legitimate stalls, never hangs).",
                labels=["phase"],
            ),
            GaugeMetricFamily(
                "sentinel_process_evidence",
                "1 when this piece of process evidence can be read (engine_state, api_alive, "
                "command_line, compilers, stacks, wait_channel, environment, descriptors), "
                "0 when it is off (/status says why); absent until the processes were sampled.",
                labels=["evidence"],
            ),
            GaugeMetricFamily(
                "sentinel_restart_ineffective",
                "While the restart-loop brake holds a hang that came back the same after each "
                "of its restarts: the restarts it survived, with the pod's node ('' when "
                "NODE_NAME is not set) and the cause (kind, engine, rank); absent otherwise.",
                labels=["node", "cause"],
            ),
        )
