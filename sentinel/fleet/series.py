"""The restart budget's own series on ``/metrics``: held, slot held and mode, read at scrape time.

The budget's modes are a closed label set that only this package defines
(:class:`sentinel.fleet.budget.Mode`), so its series are declared here, not
in the shared registry of event metrics (:mod:`sentinel.telemetry.metrics`),
which every layer records into and which therefore must know nothing of the
budget. The values are what the evaluator last published (whether the
verdict holds a restart for the budget, whether this pod holds a slot, how
the budget applies), read through a callable that returns any object with
those three fields: the budget sits below the health state that carries
them, so it never imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sentinel.fleet.budget import Mode

MODES = tuple(mode.value for mode in Mode)


class BudgetReading(Protocol):
    """What the budget's series show; the published health snapshot is one."""

    @property
    def budget_held(self) -> bool: ...

    @property
    def budget_slot(self) -> bool: ...

    @property
    def budget_mode(self) -> str: ...


class BudgetCollector(Collector):
    """The budget's three gauges, filled from one reading per scrape.

    Every mode's series is exported, 1 on the current one and 0 elsewhere,
    so a dashboard sees a change of mode as a change of value, never as a
    series appearing; a mode this module does not know is shown on none.
    """

    def __init__(self, read: Callable[[], BudgetReading]) -> None:
        self._read = read

    def describe(self) -> Iterable[Metric]:
        # Declared without samples so registration does not read the state
        # and duplicate names are still caught.
        return self._families()

    def collect(self) -> Iterable[Metric]:
        reading = self._read()
        held, slot, mode = self._families()
        held.add_metric([], 1.0 if reading.budget_held else 0.0)
        slot.add_metric([], 1.0 if reading.budget_slot else 0.0)
        for name in MODES:
            mode.add_metric([name], 1.0 if reading.budget_mode == name else 0.0)
        return (held, slot, mode)

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                "sentinel_restart_budget_held",
                "1 while the pool's restart budget holds a confirmed hang at unready "
                "(every restart slot held by other pods) instead of failing liveness.",
            ),
            GaugeMetricFamily(
                "sentinel_restart_budget_slot_held",
                "1 while this pod holds one of its pool's restart slots (a Lease).",
            ),
            GaugeMetricFamily(
                "sentinel_restart_budget_mode",
                "How the pool's restart budget applies: 1 on the current mode (off; pool: "
                "coordinated through Leases; alone: no API access, restarting as without one).",
                labels=["mode"],
            ),
        )


def register_budget_series(
    registry: CollectorRegistry, read: Callable[[], BudgetReading]
) -> BudgetCollector:
    """Register the budget's series on the daemon's registry, read through ``read``."""
    collector = BudgetCollector(read)
    registry.register(collector)
    return collector
