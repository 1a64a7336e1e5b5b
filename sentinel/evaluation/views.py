"""What the views draw from one judgement: the state metrics' snapshot and the bundle's context.

Pure functions of the judged :class:`~sentinel.verdict.Evidence`, the
:class:`~sentinel.verdict.Verdict` and what the daemon's providers hand over:
no live record is read, so ``/metrics``, ``/status`` and a diagnostics bundle
cannot tell a different story from the verdict's, and a test builds each one
from an ``Evidence`` alone. ``/status``'s document is
:func:`sentinel.evaluation.status.status_document`, built the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sentinel.diagnostics.bundle import (
    DEFAULT_BUNDLE_MAX_BYTES,
    DEFAULT_SECTION_MAX_BYTES,
    DiagnosticsContext,
    Trigger,
)
from sentinel.diagnostics.procs import ProcessMatch
from sentinel.evaluation.health import HealthSnapshot
from sentinel.evaluation.status import PriorityReport
from sentinel.verdict import Evidence, ProbeAnswer, Verdict


def priority_of(configured: str, evidence: Evidence) -> PriorityReport:
    """The scheduling policy in force: configured, or read off the judged engine command line."""
    if configured != "auto":
        return PriorityReport(configured, "config")
    processes = evidence.processes
    found = None if processes is None else processes.scheduling_policy
    return PriorityReport() if found is None else PriorityReport(found.value, "engine command line")


def health_snapshot(
    verdict: Verdict,
    evidence: Evidence,
    *,
    enforce: bool,
    priority: PriorityReport,
    status: Mapping[str, Any],
    readiness: ProbeAnswer | None = None,
    budget_mode: str = "off",
    budget_slot: bool = False,
) -> HealthSnapshot:
    """The snapshot the endpoints and the state metrics read, from what was judged.

    ``readiness`` overrides the verdict's (sentinel shutting down); ``budget_mode``
    and ``budget_slot`` are the restart budget's own word (sentinel.fleet.lease).
    """
    processes = evidence.processes
    return HealthSnapshot(
        liveness=verdict.liveness,
        readiness=verdict.readiness if readiness is None else readiness,
        startup=verdict.startup,
        enforce=enforce,
        priority_effective=priority.effective,
        progress_at=evidence.last_progress_at,
        brake_engaged=verdict.brake_engaged,
        restart_ineffective=verdict.ineffective,
        budget_held=verdict.budget_held,
        budget_mode=budget_mode,
        budget_slot=budget_slot,
        phase=evidence.lifecycle.phase.value,
        process_evidence=processes.access.available()
        if processes is not None and processes.access is not None
        else {},
        status=status,
    )


def bundle_context(
    trigger: Trigger,
    evidence: Evidence,
    *,
    metrics_text: Sequence[tuple[float, str]] = (),
    config: Mapping[str, Any] | None = None,
    section_max_bytes: int = DEFAULT_SECTION_MAX_BYTES,
    bundle_max_bytes: int = DEFAULT_BUNDLE_MAX_BYTES,
    correctness: Mapping[str, Any] | None = None,
) -> DiagnosticsContext:
    """A capture's context from the last judged evidence: the canaries and processes it saw.

    Only the attributed server and its descendants are examined: a shared
    host's other vLLM is not blamed. The rest is the providers' own word (the
    raw scrapes, the fingerprint's section) and the daemon's settings.
    """
    processes = evidence.processes
    roots = () if processes is None or processes.api is None else (processes.api.pid,)
    kinds = evidence.kinds.items()
    return DiagnosticsContext(
        trigger=trigger,
        process_match=ProcessMatch(roots=roots),
        metrics_text=tuple(metrics_text),
        canary_history={str(kind): judged.results for kind, judged in kinds},
        outstanding={str(kind): list(judged.outstanding) for kind, judged in kinds},
        config=dict(config or {}),
        section_max_bytes=section_max_bytes,
        bundle_max_bytes=bundle_max_bytes,
        correctness=dict(correctness or {}),
    )
