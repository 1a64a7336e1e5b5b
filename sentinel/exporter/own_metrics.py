"""The exporter's own ``/metrics``: its process, its probes and the targets it remembers.

One registry built at start-up and passed to the server (no global registry);
the tracked-target count is read from the store at scrape time. The ``result``
label is a closed set (:data:`RESULTS`) and ``module`` takes only configured
module names, so cardinality stays bounded whatever ``/probe`` is asked.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, ProcessCollector

from sentinel.exporter.state import TargetStore

RESULTS = ("success", "failure", "refused", "bad_request", "overloaded")


class ExporterMetrics:
    def __init__(
        self,
        store: TargetStore,
        modules: Iterable[str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.registry)
        self._modules = frozenset(modules)
        self.probes = Counter(
            "sentinel_exporter_probes",
            "Probes answered, by module and result",
            ("module", "result"),
            registry=self.registry,
        )
        for module in sorted(self._modules):
            for result in RESULTS:
                self.probes.labels(module, result)
        targets = Gauge(
            "sentinel_exporter_targets",
            "Targets whose state the exporter keeps",
            registry=self.registry,
        )
        targets.set_function(lambda: float(store.live(clock())))

    def count(self, module: str | None, result: str) -> None:
        """One probe answered; an unknown module is counted under the empty name."""
        name = module if module in self._modules else ""
        self.probes.labels(name, result).inc()
