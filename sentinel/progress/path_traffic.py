"""Real traffic on a path: a canary queued behind working requests is slow, not hung.

A path kind's canary can wait far longer than the text control for reasons
that are no hang: vLLM preprocesses images on one worker per API server, and
``priority`` does not reach that queue, so under image load a multimodal
canary waits its turn while real image requests complete. Where the server
counts a path's own traffic (the kind's ``traffic_counter``, e.g.
``vllm:mm_cache_queries_total``, counted once an image's preprocessing ran),
a rise beyond what sentinel's own canaries of the kind can explain vouches
for the path at that sample; the path rule then counts only misses sent
after it. Each canary moves the counter once, when its image is through:
rises are charged to the canaries sent before them, oldest first (one
worker preprocesses in order), each at most once, and what is left is real
traffic. A canary never charged within :data:`FORGET` seconds of its send is
forgotten. Pure bookkeeping, fed by the ledger.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from sentinel.canary.kinds import traffic_counters
from sentinel.canary.spec import CanaryKind

FORGET = 300.0


class PathTraffic:
    """When each path's own real traffic last moved its counter."""

    def __init__(self) -> None:
        self._previous: dict[str, float] = {}
        self._uncharged: dict[CanaryKind, deque[float]] = {}  # send times, oldest first
        self.last_at: dict[CanaryKind, float] = {}

    def reset(self) -> None:
        self._previous, self.last_at = {}, {}

    def canary_sent(self, kind: CanaryKind, at: float) -> None:
        if kind in traffic_counters():
            self._uncharged.setdefault(kind, deque(maxlen=1024)).append(at)

    def observe(self, counters: Mapping[str, float], at: float) -> None:
        """One sample: each rise is charged to sentinel's canaries first, the rest is real."""
        current: dict[str, float] = {}
        for kind, counter in traffic_counters().items():
            value = counters.get(counter)
            if value is None:
                continue
            current[counter] = value
            before = self._previous.get(counter)
            sends = self._uncharged.setdefault(kind, deque(maxlen=1024))
            while sends and sends[0] < at - FORGET:
                sends.popleft()
            if before is None:
                continue
            rise = int(max(value - before, 0.0))
            while rise and sends and sends[0] <= at:
                sends.popleft()
                rise -= 1
            if rise > 0:
                self.last_at[kind] = at
        self._previous = current
