"""Real traffic on a path: a canary queued behind working requests is slow, not hung.

A path kind's canary can wait far longer than the text control for reasons
that are no hang: vLLM preprocesses images on one worker per API server, and
``priority`` does not reach that queue, so under image load a multimodal
canary waits its turn while real image requests complete. Where the server
counts a path's own traffic (the kind's ``traffic_counter``, e.g.
``vllm:mm_cache_queries_total``, counted once an image's preprocessing ran),
a rise beyond what sentinel's own canaries of the kind can explain vouches
for the path at that sample; the path rule then counts only misses sent
after it. Pure bookkeeping, fed by the ledger.
"""

from __future__ import annotations

from collections.abc import Mapping

from sentinel.canary.kinds import traffic_counters
from sentinel.canary.spec import CanaryKind


class PathTraffic:
    """When each path's own real traffic last moved its counter."""

    def __init__(self) -> None:
        self._previous: dict[str, float] = {}
        self.last_at: dict[CanaryKind, float] = {}

    def reset(self) -> None:
        self._previous, self.last_at = {}, {}

    def observe(
        self, counters: Mapping[str, float], at: float, own: Mapping[CanaryKind, int]
    ) -> None:
        """One sample; ``own``: sentinel's canaries of each kind that may have moved it."""
        current: dict[str, float] = {}
        for kind, counter in traffic_counters().items():
            value = counters.get(counter)
            if value is None:
                continue
            current[counter] = value
            before = self._previous.get(counter)
            if before is not None and value - before > own.get(kind, 0):
                self.last_at[kind] = at
        self._previous = current
