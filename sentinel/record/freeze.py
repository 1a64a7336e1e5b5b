"""Freezing the ledger into the verdict's evidence at one instant.

Progress counts only from a fresh ``/metrics`` sample; everything else is
what the ledger holds now. Kept apart from :mod:`sentinel.record.ledger` so the
ledger stays a list of small writers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sentinel.canary.kinds import is_path
from sentinel.progress.tracker import STEP_COUNTER
from sentinel.verdict import EngineProgress, Evidence, KindEvidence

if TYPE_CHECKING:
    from sentinel.record.ledger import Ledger


def freeze(
    ledger: Ledger,
    now: float,
    freshness: float,
    unobserved: tuple[tuple[float, float], ...] = (),
) -> Evidence:
    """Freeze what the verdict needs; progress counts only from a fresh sample.

    ``unobserved`` are the spans sentinel itself did not run (see the evaluator).
    """
    sample_at = ledger.progress.last_sample_at
    fresh = sample_at is not None and now - sample_at <= freshness
    return Evidence(
        epoch=ledger.epoch,
        epoch_started=ledger.epoch_started,
        kinds={
            kind: KindEvidence(
                kind=kind,
                action=record.action,
                enabled=record.enabled,
                results=tuple(record.results),
                outstanding=tuple(record.outstanding.values()),
                outstanding_engines=tuple(record.aims.get(t) for t in record.outstanding),
                controls=tuple(record.controls),
                latency_slo=record.latency_slo,
                traffic_at=ledger.traffic.last_at.get(kind),
                path=is_path(kind),
            )
            for kind, record in ledger.records.items()
        },
        progress_available=fresh and ledger.progress.available,
        last_progress_at=ledger.progress.last_progress_at,
        decode_available=fresh and ledger.progress.decode_available,
        last_decode_at=ledger.progress.last_decode_at,
        last_prefill_at=ledger.progress.last_prefill_at if fresh else None,
        steps_available=fresh and STEP_COUNTER in ledger.progress.signals,
        last_step_at=ledger.progress.last_step_at,
        sampled_at=sample_at,
        queue_empty=_queue_empty(ledger),
        last_evidence_at=ledger.progress.last_evidence_at,
        last_real_completion_at=ledger.progress.last_real_completion_at,
        health_failing_since=ledger.health_failing_since,
        engine_down_since=ledger.engine_down_since,
        engine_down_detail=ledger.engine_down_detail,
        down_engines=ledger.down_engines,
        down_ranks=ledger.down_ranks,
        engines=_engine_progress(ledger) if fresh else (),
        refused_since=ledger.refused_since,
        api_alive=ledger.api_alive(),
        lifecycle=ledger.lifecycle.current,
        waiting_since=ledger.waiting_since if fresh else None,
        waiting_real=ledger.waiting_real,
        compiling_since=ledger.compiling.since,
        compile_detail=ledger.compiling.detail,
        api_stuck_since=ledger.api.since,
        api_stuck_detail=ledger.api.detail,
        unobserved=unobserved,
    )


def _queue_empty(ledger: Ledger) -> bool:
    """Whether the engine's running and waiting gauges are both 0 (absent: unknown)."""
    gauges = ledger.progress.gauges
    return gauges.get("running") == 0.0 and gauges.get("waiting") == 0.0


def _engine_progress(ledger: Ledger) -> tuple[EngineProgress, ...]:
    """Each engine's own progress, when the server exposes more than one."""
    engines = ledger.progress.engines
    if len(engines) < 2:
        return ()
    return tuple(
        EngineProgress(
            engine,
            track.first_seen_at,
            track.last_progress_at,
            decode_available=track.decode_available,
            last_decode_at=track.last_decode_at,
            last_prefill_at=track.prefill.last_at,
        )
        for engine, track in sorted(engines.items())
    )
