"""The ``/status`` document, built by one pure function.

:func:`status_document` reads nothing but its :class:`StatusInputs`: no clock,
no I/O, no event loop. Every age in the document is ``now`` minus a time it was
given, so a table-driven test can pin the whole document at one instant. The evaluator
calls it once per evaluation and publishes the result inside the health
snapshot; the HTTP view only serves what was published.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sentinel import __version__
from sentinel.canary.result import CanaryResult, Reason
from sentinel.diagnostics.sections import ProbeTransition
from sentinel.diagnostics.store import IncidentRecord
from sentinel.evaluation.incidents import OpenIncident
from sentinel.evidence.process_model import ProcessInfo, ProcessSnapshot, SchedulingPolicy
from sentinel.progress.tracker import STEP_COUNTER
from sentinel.record.departures import Departure, departures_json, not_answering
from sentinel.verdict import Evidence, Verdict
from sentinel.verdict.stall import COMPILE, CompileSection

RECENT_RESULTS = 10  # canary results shown per kind
RECENT_INCIDENTS = 5
# One change of a kubelet-facing answer, kept for the document's history (and each bundle's).
Transition = ProbeTransition


@dataclass(frozen=True, slots=True)
class PriorityReport:
    """Which scheduling policy the engine runs with, and how sentinel knows."""

    policy: str | None = None  # None: unknown (no process visible, none configured)
    source: str = "unknown"

    @property
    def effective(self) -> bool | None:
        """Whether vLLM honours the canaries' priority (None while unknown)."""
        return None if self.policy is None else self.policy == SchedulingPolicy.PRIORITY.value


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusInputs:
    """Everything the ``/status`` document is built from, gathered by the evaluator.

    ``now`` is monotonic seconds, like every time held by the evidence and given
    here; the document's ages are ``now`` minus those times. No live record is
    among them: what the document shows of the server is what the verdict judged.
    """

    now: float
    target: str
    enforce: bool
    config: Mapping[str, Any]
    # The evidence the verdict judged: what it shows of the server is shown
    # from here, so /status never tells what the verdict did not see.
    evidence: Evidence
    verdict: Verdict
    episodes: Iterable[float]  # the brake's memory: real restarts that followed a red episode
    brake_window: float
    priority: PriorityReport
    stalls: int
    last_scrape_error: str
    incident: OpenIncident | None
    recent_incidents: Sequence[IncidentRecord]
    transitions: Iterable[Transition]
    evidence_errors: Mapping[str, Any] | None = None
    restart_budget: Mapping[str, Any] | None = None
    # Each evidence provider's fragment (sentinel.record.provider), from the sections judged.
    sections: Mapping[str, Any] | None = None
    # The verdict's pace (sentinel.evaluation.pace): seconds between judgements, and why.
    pace: Mapping[str, Any] | None = None


def status_document(inputs: StatusInputs) -> dict[str, Any]:
    """The JSON-able ``/status`` body at ``inputs.now``."""
    return {
        "version": __version__,
        "target": inputs.target,
        "model": inputs.evidence.model,
        "enforce": inputs.enforce,
        "server": _server(inputs),
        # Asleep, paused (or a weight update, or a maintenance window): since
        # when, who said so, and when the server last resumed.
        "lifecycle": _lifecycle(inputs),
        # The latest run of each deliberate refusal (a 503 with a body), its body quoted.
        "refusals": _refusals(inputs),
        "priority": _priority(inputs.priority),
        "evidence": _evidence(inputs),
        "canaries": _canaries(inputs),
        "verdict": _verdict(inputs),
        # The pool's restart budget (sentinel.fleet.lease.PoolBudget.status).
        "restart_budget": dict(inputs.restart_budget or {"mode": "off"}),
        # Every other evidence provider's own fragment, by its name.
        "sections": dict(inputs.sections or {}),
        "incidents": _incidents(inputs),
        "history": _history(inputs),
        "config": inputs.config,
    }


def _age(now: float, t: float | None) -> float | None:
    """Seconds since ``t`` at ``now``, so the document holds no clock of its own."""
    return None if t is None else round(now - t, 3)


def _server(inputs: StatusInputs) -> dict[str, Any]:
    judged, now = inputs.evidence, inputs.now
    departed = tuple(Departure(at, reason) for at, reason in judged.departures)
    return {
        "epoch": judged.epoch,
        "epoch_age": _age(now, judged.epoch_started),
        "epoch_reason": judged.epoch_reason,
        "reachable": judged.reachable,
        "vllm_health_status": judged.health_status,
        # While connections are refused: for how long, how often the server
        # went away lately (a crash loop at load) and that sentinel adds no
        # restart of its own (sentinel.record.departures).
        "not_answering": not_answering(
            now,
            refused_since=judged.refused_since,
            answered=judged.answered,
            epoch=judged.epoch,
            api_alive=judged.api_alive,
            departures=departed,
            liveness_ok=inputs.verdict.liveness.ok,
        ),
        "departures": departures_json(departed, now),
    }


def _lifecycle(inputs: StatusInputs) -> dict[str, Any]:
    now, lifecycle = inputs.now, inputs.evidence.lifecycle
    return {
        "phase": lifecycle.phase.value,
        "for": _age(now, lifecycle.since) if lifecycle.stalled else None,
        # Monotonic, like every answer's since: /status's summary dates it (serve.status_view).
        "since": lifecycle.since if lifecycle.stalled else None,
        "why": lifecycle.why or None,
        "resumed_age": _age(now, lifecycle.resumed_at),
        # A lifecycle source that stopped answering (its last word kept a while: record.lifecycle).
        "cannot_tell": lifecycle.cannot_tell or None,
        "cannot_tell_for": _age(now, lifecycle.cannot_tell_since),
    }


def _refusals(inputs: StatusInputs) -> dict[str, Any]:
    now = inputs.now
    return {
        refusal.value: {
            "for": round(max(0.0, seen.at - seen.since), 3),
            "last_ago": _age(now, seen.at),
            "count": seen.count,
            "status": seen.status,
            "message": seen.message,
            "source": seen.source,
            "engine": seen.engine,
        }
        for refusal, seen in sorted(inputs.evidence.refusals.items())
    }


def _priority(priority: PriorityReport) -> dict[str, Any]:
    return {
        "policy": priority.policy,
        "source": priority.source,
        "effective": priority.effective,
    }


def _evidence(inputs: StatusInputs) -> dict[str, Any]:
    now, judged = inputs.now, inputs.evidence
    processes, signals = judged.processes, judged.progress_signals
    compiler = judged.section(COMPILE) or CompileSection()
    return {
        "progress_signals": list(signals),
        "progress_available": bool(signals),
        "progress_age": _age(now, judged.last_progress_at),
        "real_completion_age": _age(now, judged.last_real_completion_at),
        "last_scrape_age": _age(now, judged.sampled_at),
        "evidence_age": _age(now, judged.last_evidence_at),
        # The engine loop's heartbeat: any work counter moving at all
        # (sentinel's own canaries included), read by the still-engine rule.
        "steps_available": STEP_COUNTER in signals,
        "step_age": _age(now, judged.last_step_at),
        # Which work counters moved, by how much, and how much of it was
        # sentinel's own canaries (discounted at all times).
        "progress": dict(judged.progress_report),
        "refused_age": _age(now, judged.refused_since),
        # Real requests waiting (by reason capacity where told, less
        # sentinel's canaries) and for how long: the starvation rule.
        "waiting_real": judged.waiting_real,
        "waiting_for": _age(now, judged.waiting_seen_since),
        # Work that moves no counter: a prompt prefilled in chunks (KV-cache
        # highs) and a compiler busy under the engine (a long compile step).
        "prefill_age": _age(now, judged.prefill_seen_at),
        "compiling_for": _age(now, compiler.since),
        "compiling": compiler.detail or None,
        "compiler_seen_age": _age(now, compiler.seen_at),  # a storm: the last one seen
        "last_scrape_error": inputs.last_scrape_error or None,
        # Why the last /health poll gave no evidence, and what each loop
        # survived (loop name -> errors, last, ago): failed reads and
        # parses are recorded, never fatal.
        "errors": dict(inputs.evidence_errors or {}),
        "engine_down": judged.engine_down_detail or None,
        # How the API server was found (the socket's owner, or its command line
        # and the socket's uid where the owner is unreadable), what could not
        # be read, and each piece of process evidence on or off and why.
        "process_attribution": None if processes is None else _process_attribution(processes),
        "processes": None if processes is None else _processes(processes),
    }


def _process_attribution(processes: ProcessSnapshot) -> dict[str, Any]:
    return {
        "by": processes.attribution.value,
        "detail": processes.attribution_detail or None,
        "unreadable": list(processes.unreadable),
        "evidence": None if processes.access is None else processes.access.to_json(),
    }


def _processes(processes: ProcessSnapshot) -> dict[str, Any]:
    return {
        "api": None
        if processes.api is None
        else {"pid": processes.api.pid, "state": processes.api.state.value},
        # Engine side, workers and a data-parallel coordinator: ``name`` is
        # the whole title (its rank suffix included), ``engine`` the
        # data-parallel engine (a worker's taken from its parent engine),
        # ``tp_rank`` the tensor-parallel rank; None where none applies.
        "engines": [
            process_json(p) for p in (*processes.engine_processes, *processes.coordinators)
        ],
        # The API-server processes of --api-server-count sharing the socket.
        "api_processes": [{"pid": p.pid, "state": p.state.value} for p in processes.api_processes],
    }


def _canaries(inputs: StatusInputs) -> dict[str, Any]:
    now = inputs.now
    canaries: dict[str, Any] = {}
    for kind, record in inputs.evidence.kinds.items():
        results = list(record.results)
        canaries[str(kind)] = {
            "enabled": record.enabled,
            "disabled_reason": record.disabled_reason or None,
            "fallback": record.fallback or None,  # how it is sent instead (a base model)
            # "refused 2 of 5 before it is set aside": startup waits on it, and says so.
            "set_aside_waiting": record.set_aside_waiting or None,
            "action": record.action.value,
            "outstanding_for": [_age(now, t) for t in record.outstanding],
            "last": [result_json(r, now) for r in results[-RECENT_RESULTS:]],
            "passing": bool(results) and results[-1].ok,
        }
    return canaries


def _verdict(inputs: StatusInputs) -> dict[str, Any]:
    now, verdict = inputs.now, inputs.verdict
    return {
        "hangs": [
            {
                "kind": str(h.kind),
                "action": h.action.value,
                "reason": h.reason,
                "for": _age(now, h.since),
                "since": h.since,  # monotonic: the summary's age and wall-clock time
                # Where it is stuck: the data-parallel engine(s) and
                # tensor-parallel rank(s); None and [] for the whole server.
                "engine": h.engines[0] if len(h.engines) == 1 else None,
                "engines": list(h.engines),
                "ranks": list(h.ranks),
            }
            for h in verdict.hangs
        ],
        "brake_engaged": verdict.brake_engaged,
        # The cause restarts did not fix and the node to look at (sentinel.verdict.cause).
        "restart_ineffective": None if (i := verdict.ineffective) is None else asdict(i),
        "would_restart": verdict.would_restart,
        "sentinel_stalls": inputs.stalls,
        "pace": inputs.pace,
        "hang_episodes_last_hour": len(
            [t for t in inputs.episodes if now - t < inputs.brake_window]
        ),
        "restart_wanted": verdict.restart_wanted,
        "budget_held": verdict.budget_held,
        # The kubelet answers with their reasons now (e.g. "scaling (elastic EP) for 12s").
        "liveness": {"ok": verdict.liveness.ok, "reason": verdict.liveness.reason},
        "readiness": {"ok": verdict.readiness.ok, "reason": verdict.readiness.reason},
    }


def _incidents(inputs: StatusInputs) -> dict[str, Any]:
    incident = inputs.incident
    return {
        "open": None
        if incident is None
        else {
            "trigger": incident.trigger.kind,
            "reason": incident.trigger.reason,
            "for": _age(inputs.now, incident.opened),
            "bundle": None if incident.record is None else incident.record.path,
        },
        "recent": [r.to_json() for r in inputs.recent_incidents[:RECENT_INCIDENTS]],
    }


def _history(inputs: StatusInputs) -> list[dict[str, Any]]:
    return [
        {"ago": _age(inputs.now, t.at), "probe": t.probe, "ok": t.ok, "reason": t.reason}
        for t in inputs.transitions
    ]


def process_json(p: ProcessInfo) -> dict[str, Any]:
    """One engine-side process as the document shows it, named by its whole title."""
    return {
        "pid": p.pid,
        "name": p.title or p.name,
        "role": p.role.value,
        "state": p.state.value,
        "engine": p.placement.engine,
        "tp_rank": p.placement.tp_rank,
    }


def result_json(result: CanaryResult, now: float) -> dict[str, Any]:
    """One canary result as the document shows it: ages, not timestamps."""
    out: dict[str, Any] = {
        "name": result.name,
        "ok": result.ok,
        "reason": result.reason.value,
        "ago": round(now - result.finished, 3),
        "duration": round(result.duration, 4),
    }
    if result.ttft is not None:
        out["ttft"] = round(result.ttft, 4)
    if result.detail:
        out["detail"] = result.detail
    if result.reason is not Reason.OK and result.http_status is not None:
        out["http_status"] = result.http_status
    if result.refusal is not None:
        out["refusal"] = result.refusal.value
    return out
