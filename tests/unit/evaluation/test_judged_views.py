"""``/status``, the bundle's context and the state metrics, built from one judgement alone.

Each view is a pure function of the judged :class:`Evidence`, the verdict and
the providers' word: this module builds all three from a hand-made
``Evidence`` with no ledger in reach, and a fresh interpreter checks that
neither it nor the views load :mod:`sentinel.record.ledger`.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import TEXT
from sentinel.diagnostics.bundle import DiagnosticsContext, Trigger
from sentinel.evaluation.health import HealthSnapshot, HealthState
from sentinel.evaluation.status import StatusInputs, status_document
from sentinel.evaluation.views import bundle_context, health_snapshot, priority_of
from sentinel.evidence.process_access import EvidenceItem, ProcessAccess, ProcessEvidence
from sentinel.evidence.process_model import (
    ProcessInfo,
    ProcessRole,
    ProcessSnapshot,
    ProcessState,
    SchedulingPolicy,
)
from sentinel.serve.state_metrics import HealthCollector
from sentinel.verdict import (
    Action,
    Evidence,
    KindEvidence,
    Lifecycle,
    Phase,
    Policy,
    Verdict,
    VerdictState,
    evaluate,
)

NOW = 110.0
LEDGER = "sentinel.record.ledger"
API = ProcessInfo(41, ProcessRole.API_SERVER, "vllm", ProcessState.SLEEPING, 1.0)
ENGINE = ProcessInfo(42, ProcessRole.ENGINE_CORE, "VLLM::EngineCore", ProcessState.RUNNING, 2.0)
PASSED = CanaryResult("text", TEXT, Reason.OK, started=104.0, duration=0.5)


def judged() -> Evidence:
    """One judgement's evidence, written out by hand: what the views may show."""
    return Evidence(
        epoch=2,
        epoch_started=100.0,
        kinds={
            TEXT: KindEvidence(
                kind=TEXT, action=Action.RESTART, results=(PASSED,), outstanding=(108.0,)
            )
        },
        last_progress_at=107.5,
        lifecycle=Lifecycle(Phase.AWAKE),
        model="granite-3b",
        epoch_reason="api server replaced",
        reachable=True,
        answered=True,
        health_status=200,
        departures=((95.0, "api server replaced"),),
        processes=ProcessSnapshot(
            at=109.0,
            api=API,
            engines=(ENGINE,),
            scheduling_policy=SchedulingPolicy.PRIORITY,
            access=ProcessAccess(
                (
                    EvidenceItem(ProcessEvidence.ENGINE_STATE, True),
                    EvidenceItem(ProcessEvidence.STACKS, False, "no CAP_SYS_PTRACE"),
                )
            ),
        ),
        progress_signals=("generation_tokens",),
        progress_report={"signals": ["generation_tokens"], "moved": []},
        waiting_seen_since=106.0,
        prefill_seen_at=105.0,
    )


def render() -> tuple[dict[str, Any], DiagnosticsContext, CollectorRegistry]:
    """The three views of :func:`judged` at ``NOW``."""
    evidence = judged()
    _, verdict = evaluate(VerdictState(), evidence, Policy(), NOW)
    priority = priority_of("auto", evidence)
    doc = status_document(
        StatusInputs(
            now=NOW,
            target="http://vllm:8000",
            enforce=True,
            config={},
            evidence=evidence,
            verdict=verdict,
            episodes=(),
            brake_window=3600.0,
            priority=priority,
            stalls=0,
            last_scrape_error="",
            incident=None,
            recent_incidents=(),
            transitions=(),
        )
    )
    context = bundle_context(Trigger("engine-hang", "test"), evidence, config={"listen": ":8081"})
    snapshot = health_snapshot(verdict, evidence, enforce=True, priority=priority, status=doc)
    registry = CollectorRegistry()
    registry.register(HealthCollector(_holding(snapshot), clock=lambda: NOW))
    return doc, context, registry


def _holding(snapshot: HealthSnapshot) -> HealthState:
    state = HealthState()
    asyncio.run(state.publish(snapshot))
    return state


def test_status_shows_what_the_evidence_says() -> None:
    doc, _, _ = render()
    assert doc["model"] == "granite-3b"
    server = doc["server"]
    assert (server["epoch"], server["epoch_age"]) == (2, 10.0)
    assert server["epoch_reason"] == "api server replaced"
    assert (server["reachable"], server["vllm_health_status"]) == (True, 200)
    assert server["departures"]["count"] == 1
    assert server["departures"]["recent"] == [{"ago": 15.0, "reason": "api server replaced"}]
    evidence = doc["evidence"]
    assert evidence["progress_signals"] == ["generation_tokens"]
    assert evidence["progress"] == {"signals": ["generation_tokens"], "moved": []}
    assert (evidence["waiting_for"], evidence["prefill_age"]) == (4.0, 5.0)
    assert evidence["processes"]["api"] == {"pid": 41, "state": "sleeping"}
    assert [p["pid"] for p in evidence["processes"]["engines"]] == [42]
    assert doc["priority"] == {
        "policy": "priority",
        "source": "engine command line",
        "effective": True,
    }
    assert doc["canaries"]["text"]["outstanding_for"] == [2.0]


def test_the_bundle_examines_the_judged_server_and_its_canaries() -> None:
    _, context, _ = render()
    assert context.process_match.roots == (41,)
    assert context.canary_history == {"text": (PASSED,)}
    assert context.outstanding == {"text": [108.0]}
    assert context.config == {"listen": ":8081"}


def test_a_bundle_before_any_process_sample_blames_no_process() -> None:
    context = bundle_context(Trigger("on-demand", "test"), Evidence())
    assert context.process_match.roots == ()
    assert context.canary_history == {}


def test_the_state_metrics_show_the_judged_state() -> None:
    _, _, registry = render()
    assert registry.get_sample_value("sentinel_progress_age_seconds") == 2.5
    assert registry.get_sample_value("sentinel_priority_effective") == 1.0
    assert registry.get_sample_value("sentinel_server_phase", {"phase": "awake"}) == 1.0
    evidence = "sentinel_process_evidence"
    assert registry.get_sample_value(evidence, {"evidence": "engine_state"}) == 1.0
    assert registry.get_sample_value(evidence, {"evidence": "stacks"}) == 0.0


def test_an_unjudged_server_shows_no_progress_age_and_no_priority() -> None:
    verdict = Verdict(*(VerdictState().liveness, VerdictState().readiness, VerdictState().startup))
    snapshot = health_snapshot(
        verdict, Evidence(), enforce=False, priority=priority_of("auto", Evidence()), status={}
    )
    assert snapshot.progress_at is None
    assert snapshot.priority_effective is None
    assert snapshot.process_evidence == {}


def test_no_ledger_is_in_reach_of_the_views() -> None:
    """A fresh interpreter loads this module, renders every view, and never loads the ledger."""
    code = (
        "import sys, importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('judged_views', {str(Path(__file__))!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "module.render()\n"
        f"loaded = sorted(m for m in sys.modules if m == {LEDGER!r})\n"
        "print(loaded)\n"
        "sys.exit(1 if loaded else 0)\n"
    )
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
