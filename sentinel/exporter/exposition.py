"""A probe's outcome as the series of one ``/probe`` answer.

A fresh :class:`CollectorRegistry` per answer, rendered by prometheus-client's
own ``generate_latest``. No series carries the target: Prometheus adds
``instance`` by relabelling, as with blackbox_exporter. A value that is not
known (no TTFT, unreadable ``/metrics``) is an absent series, never a zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from sentinel.canary.outcome import outcome
from sentinel.canary.result import CanaryResult
from sentinel.canary.spec import CanaryKind
from sentinel.exporter.prober import ProbeOutcome, TargetEvidence


class _GaugeFactory(Protocol):
    def __call__(self, name: str, doc: str, labels: Sequence[str] = ()) -> Gauge: ...


def tokens_per_second(result: CanaryResult) -> float | None:
    """The decode rate of a streamed reply: tokens after the first over the time after it."""
    tokens = result.completion_tokens or result.tokens_received
    if result.ttft is None or tokens is None or tokens < 2:
        return None
    decoding = result.duration - result.ttft
    return (tokens - 1) / decoding if decoding > 0 else None


def kind_success(results: Sequence[CanaryResult], *, strict: bool = False) -> float | None:
    """1 when no canary of the kind failed and one passed; None when all were skipped."""
    outcomes = [outcome(r, strict=strict) for r in results]
    if "fail" in outcomes:
        return 0.0
    return 1.0 if "ok" in outcomes else None


def render(probe: ProbeOutcome, duration: float) -> bytes:
    registry = CollectorRegistry(auto_describe=True)

    def gauge(name: str, doc: str, labels: Sequence[str] = ()) -> Gauge:
        return Gauge(name, doc, labelnames=labels, registry=registry)

    gauge("probe_success", "1 if every canary of the module passed").set(
        1.0 if probe.success else 0.0
    )
    gauge("probe_duration_seconds", "Seconds the whole probe took").set(duration)
    success = gauge("probe_sentinel_canary_success", "1 if the kind's canaries passed", ("kind",))
    took = gauge(
        "probe_sentinel_canary_duration_seconds", "Seconds the kind's canaries took", ("kind",)
    )
    kinds: dict[CanaryKind, list[CanaryResult]] = {}
    for result in probe.results:
        kinds.setdefault(result.kind, []).append(result)
    for kind, results in kinds.items():
        value = kind_success(results, strict=probe.strict)
        if value is not None:
            success.labels(str(kind)).set(value)
        took.labels(str(kind)).set(sum(r.duration for r in results))
    text = probe.text_result()
    if text is not None and text.ttft is not None:
        gauge("probe_sentinel_ttft_seconds", "Text canary's time to first token").set(text.ttft)
    rate = tokens_per_second(text) if text is not None else None
    if rate is not None:
        gauge("probe_sentinel_tokens_per_second", "Text canary's decode rate").set(rate)
    if probe.failure is not None:
        gauge("probe_sentinel_failure", "The reason the probe failed", ("reason",)).labels(
            probe.failure
        ).set(1.0)
    if probe.evidence is not None and probe.evidence.error is None:
        _target_series(probe.evidence, gauge)
    return generate_latest(registry)


def _target_series(evidence: TargetEvidence, gauge: _GaugeFactory) -> None:
    if evidence.running is not None:
        gauge("probe_sentinel_target_requests_running", "Target's running requests").set(
            evidence.running
        )
    if evidence.waiting is not None:
        gauge("probe_sentinel_target_requests_waiting", "Target's waiting requests").set(
            evidence.waiting
        )
    gauge("probe_sentinel_target_phase", "Target's lifecycle phase", ("phase",)).labels(
        evidence.phase
    ).set(1.0)
    if evidence.progress is not None:
        gauge(
            "probe_sentinel_target_progress",
            "1 if the target's real work moved since the previous probe",
        ).set(1.0 if evidence.progress else 0.0)
    if evidence.stalled_seconds is not None:
        gauge(
            "probe_sentinel_target_stalled_seconds",
            "Seconds since progress last moved while requests ran or waited",
        ).set(evidence.stalled_seconds)
