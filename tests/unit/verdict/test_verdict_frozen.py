"""The frozen-engine rule on a virtual clock, and the CPU watch it reads.

A text canary waited through the frozen window (5 s) while no work counter moved at
all and the engine's processes used no CPU (sentinel.evidence.engine_cpu),
whatever the queue gauges show: a blocked engine loop, with requests in it or
none. Beside the cases that fire at 5 s are those that must wait for the step
or hang window, or never fire.
"""

from __future__ import annotations

import pytest

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.evidence.engine_cpu import EngineCpuWatch
from sentinel.evidence.process_model import (
    ProcessInfo,
    ProcessRole,
    ProcessSnapshot,
    ProcessState,
)
from sentinel.record.ledger import Ledger
from sentinel.verdict import (
    Action,
    Evidence,
    HangKind,
    KindEvidence,
    Lifecycle,
    Policy,
    VerdictState,
)
from sentinel.verdict import evaluate as judge
from sentinel.verdict.hangs.engine import ENGINE_CPU, EngineCpuSection
from sentinel.verdict.model import Phase

TEXT, STRUCTURED = CanaryKind.TEXT, CanaryKind.STRUCTURED
SENT = 100.0
AWAKE = Lifecycle()


def evidence(
    *,
    now: float,
    idle_since: float | None = 95.0,
    cpu_at: float | None = None,
    unknown: str = "",
    last_step_at: float | None = 90.0,
    prefill_at: float | None = None,
    steps: bool = True,
    kind: CanaryKind = TEXT,
    results: tuple[CanaryResult, ...] = (),
    outstanding: tuple[float, ...] = (SENT,),
    lifecycle: Lifecycle = AWAKE,
) -> Evidence:
    kinds = {kind: KindEvidence(kind, results=results, outstanding=outstanding, path=kind != TEXT)}
    if kind is not TEXT:
        kinds[TEXT] = KindEvidence(TEXT)
    return Evidence(
        kinds=kinds,
        progress_available=True,
        last_progress_at=last_step_at,
        steps_available=steps,
        last_step_at=last_step_at,
        last_prefill_at=prefill_at,
        sampled_at=now,
        queue_empty=False,  # a request stuck in the batch: the gauges show it
        last_evidence_at=now,
        sections={
            ENGINE_CPU.name: EngineCpuSection(
                idle_since, now if cpu_at is None else cpu_at, unknown
            )
        },
        lifecycle=lifecycle,
    )


def engine_hang(ev: Evidence, now: float) -> str | None:
    _, verdict = judge(VerdictState(), ev, Policy(), now)
    reasons = [h.reason for h in verdict.hangs if h.kind is HangKind.ENGINE]
    return reasons[0] if reasons else None


@pytest.mark.parametrize(("now", "fires"), [(SENT + 4.9, False), (SENT + 5.0, True)])
def test_a_canary_waiting_on_an_engine_using_no_cpu_confirms_at_the_frozen_window(
    now: float, fires: bool
) -> None:
    reason = engine_hang(evidence(now=now), now)
    assert (reason is not None) is fires
    if reason is not None:
        assert "using no CPU" in reason


def test_a_canary_sent_before_the_engine_stopped_counts_from_the_standstill() -> None:
    """In flight when the engine last moved (a step, CPU): the window runs from there."""
    ev = evidence(now=SENT + 7.0, idle_since=SENT + 2.0, last_step_at=SENT + 2.0)
    reason = engine_hang(ev, SENT + 7.0)
    assert reason is not None
    assert "5s" in reason
    assert engine_hang(evidence(now=SENT + 6.9, idle_since=SENT + 2.0), SENT + 6.9) is None


def test_a_timed_out_text_canary_counts() -> None:
    results = (CanaryResult("text-canary", TEXT, Reason.TIMEOUT, SENT, 8.0),)
    ev = evidence(now=SENT + 8.5, outstanding=(), results=results)
    assert engine_hang(ev, SENT + 8.5) is not None


@pytest.mark.parametrize(
    ("case", "ev"),
    [
        # The engine used CPU after the send (a long step computing, a spin).
        ("cpu 4 s ago", evidence(idle_since=SENT + 3.0, now=SENT + 7.0)),
        ("cpu now", evidence(idle_since=None, now=SENT + 7.0)),
        # The processes are not in view: the step and hang windows decide.
        (
            "unknown",
            evidence(idle_since=None, unknown="no engine process attributed", now=SENT + 7.0),
        ),
        # A counter moved after the send (the canary's own prefill: a step).
        ("a step 4 s ago", evidence(last_step_at=SENT + 3.0, now=SENT + 7.0)),
        # A prompt prefilled in chunks set a KV-cache high after the send.
        ("prefill 4 s ago", evidence(prefill_at=SENT + 3.0, now=SENT + 7.0)),
        # No step signal: nothing tells that no counter moved.
        ("no step signal", evidence(steps=False, now=SENT + 7.0)),
        # The process samples cover only 4 s after the send.
        ("cpu samples lag", evidence(cpu_at=SENT + 4.0, now=SENT + 7.0)),
        # A path canary may wait before the engine while it idles.
        ("a path canary", evidence(kind=STRUCTURED, now=SENT + 7.0)),
        # Asleep: every engine-side rule is off.
        ("asleep", evidence(lifecycle=Lifecycle(phase=Phase.ASLEEP, since=SENT), now=SENT + 7.0)),
    ],
)
def test_the_frozen_rule_keeps_out_of(case: str, ev: Evidence) -> None:
    assert engine_hang(ev, SENT + 7.0) is None, case


def snapshot(
    at: float, cpu: float | None, state: ProcessState = ProcessState.SLEEPING
) -> ProcessSnapshot:
    engine = ProcessInfo(7, ProcessRole.ENGINE_CORE, "VLLM::EngineCore", state, 1.0, 6, cpu)
    return ProcessSnapshot(at=at, engines=(engine,))


def watch(*samples: tuple[float, float | None]) -> EngineCpuWatch:
    cpu = EngineCpuWatch()
    for at, seconds in samples:
        cpu.observe(snapshot(at, seconds), at)
    return cpu


def test_the_watch_tells_since_when_the_engine_stands_still() -> None:
    cpu = watch((0.0, 1.0), (1.0, 2.0), (2.0, 2.0), (3.0, 2.01), (4.0, 2.01)).current
    assert cpu.unknown == ""
    assert cpu.idle_since == 1.0  # from the sample after the last second of work
    assert cpu.sampled_at == 4.0


def test_a_busy_engine_is_not_standing_still() -> None:
    cpu = watch((0.0, 1.0), (1.0, 1.5), (2.0, 2.0)).current
    assert cpu.idle_since is None
    assert cpu.unknown == ""


def test_a_running_engine_is_activity_whatever_its_cpu_time() -> None:
    cpu = EngineCpuWatch()
    cpu.observe(snapshot(0.0, 1.0), 0.0)
    cpu.observe(snapshot(1.0, 1.0, ProcessState.RUNNING), 1.0)
    cpu.observe(snapshot(2.0, 1.0), 2.0)
    assert cpu.current.idle_since is None  # one sample since the running one shows no span


def test_unreadable_cpu_and_no_engine_say_why() -> None:
    assert watch((0.0, None)).current.unknown == "the engine's CPU time is unreadable"
    empty = EngineCpuWatch()
    empty.observe(ProcessSnapshot(at=0.0), 0.0)
    assert empty.current.unknown == "no engine process attributed"
    assert EngineCpuWatch().current.unknown == "no process sample yet"


def test_another_engine_process_starts_over() -> None:
    cpu = watch((0.0, 5.0), (1.0, 5.0))
    other = ProcessInfo(
        8, ProcessRole.ENGINE_CORE, "VLLM::EngineCore", ProcessState.SLEEPING, 2.0, 6, 0.1
    )
    cpu.observe(ProcessSnapshot(at=2.0, engines=(other,)), 2.0)
    assert cpu.current.idle_since is None  # one sample of the new process


def test_the_ledger_tells_a_stopped_engine_from_a_gone_one() -> None:
    """SIGSTOP gets the stopped grace; once any process behind it is gone, the dead grace."""
    ledger = Ledger([(TEXT, Action.RESTART, None)], 0.0)
    api = ProcessInfo(6, ProcessRole.API_SERVER, "python", ProcessState.SLEEPING, 1.0)
    engine = snapshot(1.0, 1.0, ProcessState.STOPPED).engines
    ledger.observe_processes(ProcessSnapshot(at=1.0, api=api, engines=engine), 1.0)
    assert ledger.evidence(1.0, 10.0).engine_down_stopped
    gone = snapshot(2.0, None, ProcessState.GONE).engines
    ledger.observe_processes(ProcessSnapshot(at=2.0, api=api, engines=gone), 2.0)
    ev = ledger.evidence(2.0, 10.0)
    assert ev.engine_down_since == 1.0
    assert not ev.engine_down_stopped
