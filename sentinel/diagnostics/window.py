"""The window of an incident: the recent ``/metrics`` samples a bundle keeps, bounded.

The daemon keeps only the last few raw expositions (each can run to
megabytes), but the flat progress that confirmed a hang lasts the hang window
and more: a bundle that held only those would show two or three points and
never the flatness itself. So the daemon also keeps the few numbers each scrape
yielded (the progress counters and queue gauges the timeline draws, summed
over the server), for the last :data:`WINDOW_S` seconds and never more than
:data:`MAX_SAMPLES` of them: a few tens of kilobytes of JSON at most.

Samples are on the daemon's monotonic clock, as the canaries' times and the
answers' flips are, so a bundle places all three with its one ``clock`` anchor.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from sentinel.evidence.metrics import MetricsSample

WINDOW_S = 300.0
"""Seconds of samples kept before the newest: the last minutes of an incident."""
MAX_SAMPLES = 600
"""At most this many samples, whatever the scrape interval (0.5 s still fills the window)."""
# What each sample keeps (MetricsSample's names): the work the timeline draws as
# rates, and the queue it draws as gauges.
COUNTERS = ("generation_tokens", "prompt_tokens", "completions")
GAUGES = ("running", "waiting")

Sample = Mapping[str, Any]  # {"at": monotonic seconds, "counters": {...}, "gauges": {...}}


class SampleWindow:
    """The recent samples, oldest first; fed by the observers, read when a capture starts."""

    def __init__(self, window_s: float = WINDOW_S, max_samples: int = MAX_SAMPLES) -> None:
        self.window_s = window_s
        self._samples: deque[Sample] = deque(maxlen=max_samples)

    def observe(self, sample: MetricsSample) -> None:
        """Keep what the timeline draws of ``sample``; forget what fell out of the window."""
        self._samples.append(
            {
                "at": sample.at,
                "counters": {k: sample.counters[k] for k in COUNTERS if k in sample.counters},
                "gauges": {k: sample.gauges[k] for k in GAUGES if k in sample.gauges},
            }
        )
        while self._samples and sample.at - self._samples[0]["at"] > self.window_s:
            self._samples.popleft()

    def recent(self) -> tuple[Sample, ...]:
        """The kept samples as plain JSON-able data (a capture's child reads them as they are)."""
        return tuple(self._samples)


def rates(samples: Sequence[Any], name: str) -> list[tuple[float, float]]:
    """Counter ``name`` as (time of the later sample, per-second rate) between successive samples.

    A counter that went down (a server restart) or is absent on either side
    gives no point: no evidence is never drawn as zero.
    """
    points: list[tuple[float, float]] = []
    previous: tuple[float, float] | None = None
    for at, value in _values(samples, "counters", name):
        if previous is not None and at > previous[0] and value >= previous[1]:
            points.append((at, (value - previous[1]) / (at - previous[0])))
        previous = (at, value)
    return points


def gauge(samples: Sequence[Any], name: str) -> list[tuple[float, float]]:
    """Gauge ``name`` as (time, value), where the sample carried it."""
    return list(_values(samples, "gauges", name))


def _values(samples: Sequence[Any], group: str, name: str) -> list[tuple[float, float]]:
    """(at, value) of one signal in a bundle's samples; anything malformed is skipped."""
    out: list[tuple[float, float]] = []
    for sample in samples if isinstance(samples, list | tuple) else ():
        if not isinstance(sample, Mapping):
            continue
        values = sample.get(group)
        at = sample.get("at")
        if not isinstance(values, Mapping) or not isinstance(at, int | float):
            continue
        value = values.get(name)
        if isinstance(value, int | float) and value == value:  # NaN is no value
            out.append((float(at), float(value)))
    return sorted(out)
