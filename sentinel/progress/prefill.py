"""Prefill as work: an engine working through one long prompt moves no counter.

vLLM records iteration statistics only for steps with outputs, so a prompt
prefilled in chunks over many steps moves no token, completion or
first-token counter until its first token, while every waiting request (the
priority canary included) waits behind it for the per-step token budget. What
moves is the KV cache: each chunk allocates blocks, so the
``vllm:kv_cache_usage_perc`` gauge sets a new high chunk by chunk while the
running gauge shows the prompt and nothing is admitted. Pure bookkeeping
here; the reasoning is in ``docs/design.md`` ("Prefill is work").

A new high counts only when

* the usage rose above every value seen since real progress last moved
  (the *mark*): preemption churn goes up and down and cannot keep setting
  new maxima; a hung engine with requests stuck in it keeps its usage frozen;
* the running gauge did not grow since the previous sample (an admission
  allocates blocks too: a leaked cache rises only with admissions), and
* a request that is not sentinel's runs: canaries that are not shown waiting
  may be running, so they are taken off the running gauge first.

The mark follows every value, counted or not, so a rise that came with an
admission is never counted later.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

KV_RISE = 1e-6
"""A rise below this is rounding in the exposition, not a chunk."""


@dataclass(slots=True)
class PrefillWatch:
    """New KV-cache highs while a real request runs and none is admitted (one gauge set)."""

    mark: float | None = None  # the highest usage since real progress last moved
    last_at: float | None = None  # the last sample that counted as prefill work
    _running: float | None = None  # the running gauge of the previous sample

    def reset(self) -> None:
        self.mark, self.last_at, self._running = None, None, None

    def observe(
        self, gauges: Mapping[str, float], at: float, *, canaries: int, progressed: bool
    ) -> bool:
        """Whether this sample shows prefill work; ``canaries``: sentinel's in flight."""
        kv, running = gauges.get("kv_cache_usage"), gauges.get("running")
        previous, self._running = self._running, running
        if kv is None or running is None:
            return False
        mark = self.mark
        # Real progress vouches by itself; the mark starts over from here.
        self.mark = kv if progressed or mark is None else max(mark, kv)
        if progressed or mark is None or previous is None:
            return False
        shown_waiting = gauges.get("waiting", 0.0)
        real_running = running - max(float(canaries) - shown_waiting, 0.0)
        if kv > mark + KV_RISE and running <= previous and real_running >= 1.0:
            self.last_at = at
            return True
        return False
