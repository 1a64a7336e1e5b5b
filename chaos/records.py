"""The record of one scenario run: samples, canary results, scrapes, events and fault times.

Times are seconds since sentinel started. The record is plain data: the runner
writes it, :mod:`chaos.analysis` turns it into figures, :mod:`chaos.report`
draws it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from chaos.blackbox import BlackboxSettings
from chaos.prober import Kill, ProbeSettings
from chaos.scenario import Scenario
from sentinel.canary.result import CanaryResult


@dataclass(slots=True)
class Sample:
    """One second's look at sentinel's probes, vLLM's ``/health`` and its load gauges."""

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


@dataclass(frozen=True, slots=True)
class CanaryPoint:
    """One canary request (sentinel's or the naive one) on the run's time axis."""

    kind: str
    started: float
    duration: float
    ok: bool
    reason: str


@dataclass(frozen=True, slots=True)
class ScrapePoint:
    """One blackbox_exporter scrape of one module on the run's time axis."""

    module: str
    started: float
    duration: float
    ok: bool
    detail: str


@dataclass(frozen=True, slots=True)
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
    #: the blackbox_exporter baseline: its settings, its scrapes, or why it did not run
    blackbox_settings: BlackboxSettings | None = None
    blackbox: list[ScrapePoint] = field(default_factory=list)
    blackbox_not_run: str | None = None
    ready_at: float | None = None
    fault_start: float | None = None
    fault_end: float | None = None
    load_window: tuple[float, float] | None = None
    # chaos.load's own JSON summary, passed through to the report as it came
    load_summary: Mapping[str, Any] | None = None
    server_exit_at: float | None = None
    server_restarted_at: float | None = None
    end: float = 0.0
    error: str | None = None
    priority_effective: bool | None = None


class ResultInbox:
    """Canary results handed over from sentinel's thread to the runner's.

    sentinel calls :meth:`put` on its own event loop for every result (it is a
    result listener); the runner takes what arrived with :meth:`take`. The lock
    is the only state both threads touch.
    """

    def __init__(self, origin: float) -> None:
        self._origin = origin  # sentinel's start on the monotonic clock both sides read
        self._lock = threading.Lock()
        self._points: list[CanaryPoint] = []

    def put(self, result: CanaryResult) -> None:
        point = CanaryPoint(
            str(result.kind),
            result.started - self._origin,
            result.duration,
            result.ok,
            str(result.reason),
        )
        with self._lock:
            self._points.append(point)

    def take(self) -> list[CanaryPoint]:
        """Every result that arrived since the last call, oldest first."""
        with self._lock:
            taken, self._points = self._points, []
        return taken


_GAUGES = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:request_success_total": "completed",
}


def metric_values(text: str) -> dict[str, float]:
    """vLLM's load figures from a ``/metrics`` page, summed over label sets."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = _GAUGES.get(sample.name)
            if key is not None:
                out[key] = out.get(key, 0.0) + float(sample.value)
    return out
