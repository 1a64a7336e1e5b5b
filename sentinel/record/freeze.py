"""Freezing the ledger into the verdict's evidence at one instant.

Progress counts only from a fresh ``/metrics`` sample; everything else is
what the ledger holds now, the views' share included (``/status``, the
bundle's context and the state metrics read only what was judged). Kept
apart from :mod:`sentinel.record.ledger` so the ledger stays a list of small
writers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Protocol

from sentinel.canary.kinds import is_path
from sentinel.canary.result import CanaryResult
from sentinel.canary.spec import CanaryKind
from sentinel.evidence.process_model import ProcessSnapshot
from sentinel.progress.path_traffic import PathTraffic
from sentinel.progress.tracker import STEP_COUNTER, ProgressTracker
from sentinel.record.departures import Departures
from sentinel.record.lifecycle import LifecycleTracker
from sentinel.record.refusals import Refusals
from sentinel.verdict import Action, EngineProgress, Evidence, KindEvidence, RestartGate
from sentinel.verdict.model import CORRECTNESS, RESTART_GATE


class KindView(Protocol):
    """What freezing reads of one kind's history (:class:`~sentinel.record.ledger.KindRecord`)."""

    @property
    def action(self) -> Action: ...
    @property
    def enabled(self) -> bool: ...
    @property
    def disabled_reason(self) -> str: ...
    @property
    def fallback(self) -> str: ...
    @property
    def set_aside_waiting(self) -> str: ...
    @property
    def latency_slo(self) -> float | None: ...
    @property
    def results(self) -> Iterable[CanaryResult]: ...
    @property
    def controls(self) -> Iterable[CanaryResult | None]: ...
    @property
    def outstanding(self) -> Mapping[int, float]: ...  # token -> send time
    @property
    def aims(self) -> Mapping[int, int]: ...  # token -> engine it was aimed at


class LedgerView(Protocol):
    """What freezing reads of the ledger; :class:`~sentinel.record.ledger.Ledger` is one.

    Declared here rather than imported: the ledger freezes itself through this
    module, and this module needs only these readings, none of its writers.
    """

    @property
    def epoch(self) -> int: ...
    @property
    def epoch_started(self) -> float: ...
    @property
    def records(self) -> Mapping[CanaryKind, KindView]: ...
    @property
    def progress(self) -> ProgressTracker: ...
    @property
    def traffic(self) -> PathTraffic: ...
    @property
    def lifecycle(self) -> LifecycleTracker: ...
    @property
    def health_failing_since(self) -> float | None: ...
    @property
    def engine_down_since(self) -> float | None: ...
    @property
    def engine_down_detail(self) -> str: ...
    @property
    def engine_down_stopped(self) -> bool: ...
    @property
    def down_engines(self) -> tuple[int, ...]: ...
    @property
    def down_ranks(self) -> tuple[int, ...]: ...
    @property
    def refused_since(self) -> float | None: ...
    @property
    def refusals(self) -> Refusals: ...
    @property
    def waiting_since(self) -> float | None: ...
    @property
    def waiting_real(self) -> float: ...
    # What only the views show (the verdict's rules read none of it).
    @property
    def model(self) -> str | None: ...
    @property
    def epoch_reason(self) -> str: ...
    @property
    def reachable(self) -> bool | None: ...
    @property
    def answered(self) -> bool: ...
    @property
    def health_status(self) -> int | None: ...
    @property
    def departures(self) -> Departures: ...
    @property
    def processes(self) -> ProcessSnapshot | None: ...
    def api_alive(self) -> bool | None: ...


def freeze(
    ledger: LedgerView,
    now: float,
    freshness: float,
    unobserved: tuple[tuple[float, float], ...] = (),
    sections: Mapping[str, object] | None = None,
) -> Evidence:
    """Freeze what the verdict needs; progress counts only from a fresh sample.

    ``unobserved`` are the spans sentinel itself did not run (see the evaluator);
    ``sections`` the providers' (:mod:`sentinel.record.provider`), those keyed
    for a typed field of the evidence (``correctness``, ``restart_gate``) in it.
    """
    given = dict(sections or {})
    correctness, gate = CORRECTNESS.read(given), RESTART_GATE.read(given)
    for key in (CORRECTNESS, RESTART_GATE):
        given.pop(key.name, None)
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
                disabled_reason=record.disabled_reason,
                fallback=record.fallback,
                set_aside_waiting=record.set_aside_waiting,
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
        steps_seen=ledger.progress.last_beat_at is not None,
        sampled_at=sample_at,
        queue_empty=_queue_empty(ledger),
        last_evidence_at=ledger.progress.last_evidence_at,
        last_real_completion_at=ledger.progress.last_real_completion_at,
        health_failing_since=ledger.health_failing_since,
        engine_down_since=ledger.engine_down_since,
        engine_down_detail=ledger.engine_down_detail,
        engine_down_stopped=ledger.engine_down_stopped,
        down_engines=ledger.down_engines,
        down_ranks=ledger.down_ranks,
        engines=_engine_progress(ledger) if fresh else (),
        refused_since=ledger.refused_since,
        refusals=ledger.refusals.frozen(),
        api_alive=ledger.api_alive(),
        lifecycle=ledger.lifecycle.current,
        waiting_since=ledger.waiting_since if fresh else None,
        waiting_real=ledger.waiting_real,
        unobserved=unobserved,
        correctness=correctness,
        restart_gate=gate if gate is not None else RestartGate(),
        sections=MappingProxyType(given),
        model=ledger.model,
        epoch_reason=ledger.epoch_reason,
        reachable=ledger.reachable,
        answered=ledger.answered,
        health_status=ledger.health_status,
        departures=tuple((d.at, d.reason) for d in ledger.departures.within(now)),
        processes=ledger.processes,
        progress_signals=tuple(ledger.progress.signals),
        progress_report=MappingProxyType(ledger.progress.report(now)),
        waiting_seen_since=ledger.waiting_since,
        prefill_seen_at=ledger.progress.last_prefill_at,
    )


def _queue_empty(ledger: LedgerView) -> bool:
    """Whether the engine's running and waiting gauges are both 0 (absent: unknown)."""
    gauges = ledger.progress.gauges
    return gauges.get("running") == 0.0 and gauges.get("waiting") == 0.0


def _engine_progress(ledger: LedgerView) -> tuple[EngineProgress, ...]:
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
