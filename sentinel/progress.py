"""Progress: turns successive ``/metrics`` samples into "did the engine do work?".

Pure bookkeeping (no I/O, no clock): the daemon feeds it metric samples and
the canaries it completed, and reads back when real progress was last seen,
when the last *real* (not sentinel's own) completion happened, and whether a
counter went down (the server restarted).

What sentinel's own canaries caused is subtracted: their completion and token
counts, reported in their usage, are removed from the next sample's deltas, so
idle gating is not fooled by sentinel's own traffic.

A canary still in flight has no usage yet. When the engine serves nothing but
sentinel's own canaries (vLLM's running + waiting gauges do not exceed the
canaries in flight), the work the canaries sent in the interval could have
caused (their usual reply length, their prompt, a step per token) is
discounted as well: a stream that stalls after its first token must not look
like progress. Whenever anyone else is being served, nothing is discounted, so
a busy server's progress is never explained away.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sentinel.canary.result import CanaryResult
from sentinel.evidence.metrics import MetricsSample


@dataclass(frozen=True, slots=True)
class ProgressUpdate:
    """What one new sample told."""

    progressed: bool = False
    real_completions: float = 0.0
    restarted: bool = False  # a counter went down: the server restarted
    changed: tuple[str, ...] = ()  # the signals that moved


class ProgressTracker:
    """Follows the progress signals across samples, minus sentinel's own canaries."""

    def __init__(self) -> None:
        self._previous: MetricsSample | None = None
        self._own: dict[str, float] = {}
        self.last_progress_at: float | None = None
        self.last_real_completion_at: float | None = None
        self.last_sample_at: float | None = None
        self.signals: tuple[str, ...] = ()

    def reset(self) -> None:
        """Forget everything (a new server epoch)."""
        self._previous = None
        self._own = {}
        self.last_progress_at = None
        self.last_real_completion_at = None
        self.last_sample_at = None
        self.signals = ()

    @property
    def available(self) -> bool:
        """Whether the last sample carried any progress counter at all."""
        return bool(self.signals)

    def observe_canary(self, result: CanaryResult) -> None:
        """Remember a finished canary's own work, to subtract from the next delta."""
        if not result.ok:
            return
        own = self._own
        own["completions"] = own.get("completions", 0.0) + 1
        if result.completion_tokens:
            own["generation_tokens"] = own.get("generation_tokens", 0.0) + result.completion_tokens
            # Each decoded token is one engine step when the engine is idle.
            own["engine_steps"] = own.get("engine_steps", 0.0) + result.completion_tokens
        if result.prompt_tokens:
            own["prompt_tokens"] = own.get("prompt_tokens", 0.0) + result.prompt_tokens

    def observe(
        self,
        sample: MetricsSample,
        *,
        canaries_moving: bool = False,
        sent_budget: Mapping[str, float] | None = None,
        own_in_flight: int = 0,
    ) -> ProgressUpdate:
        """Compare ``sample`` with the previous one.

        ``canaries_moving`` says a canary was sent or finished between the two
        samples, so gauge changes may be sentinel's own doing and do not count.
        ``sent_budget`` is the most work (per counter) the canaries sent between
        the two samples could have caused; it is discounted from the deltas
        only while the engine serves no more requests than ``own_in_flight``.
        """
        previous, self._previous = self._previous, sample
        self.last_sample_at = sample.at
        self.signals = tuple(sorted(sample.counters))
        if previous is None:
            self._own.clear()
            return ProgressUpdate()
        if any(
            sample.counters[k] < v for k, v in previous.counters.items() if k in sample.counters
        ):
            self._own.clear()
            self.last_progress_at = None
            self.last_real_completion_at = None
            return ProgressUpdate(restarted=True)

        deltas = _deltas(previous.counters, sample.counters)
        own, self._own = self._own, {}
        budget = sent_budget if sent_budget and _only_own(sample, own_in_flight) else {}
        real = {k: d - own.get(k, 0.0) - budget.get(k, 0.0) for k, d in deltas.items()}
        changed = [k for k, d in real.items() if d > 0]
        if not canaries_moving:
            changed += [
                k
                for k, v in sample.gauges.items()
                if k in previous.gauges and previous.gauges[k] != v
            ]
        # A canary sent in this interval cannot have completed unseen: its usage
        # is subtracted exactly, so completions carry no budget.
        real_completions = max(deltas.get("completions", 0.0) - own.get("completions", 0.0), 0.0)
        if changed:
            self.last_progress_at = sample.at
        if real_completions > 0:
            self.last_real_completion_at = sample.at
        return ProgressUpdate(
            progressed=bool(changed),
            real_completions=real_completions,
            changed=tuple(sorted(changed)),
        )


def _only_own(sample: MetricsSample, own_in_flight: int) -> bool:
    """Whether the gauges show nothing but sentinel's canaries (absent gauges: unknown, no)."""
    running, waiting = sample.gauges.get("running"), sample.gauges.get("waiting")
    if running is None or waiting is None:
        return False
    return running + waiting <= own_in_flight


def _deltas(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in after if k in before}
