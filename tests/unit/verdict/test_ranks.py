"""One stuck rank or engine among several: the vocabulary, per-engine progress and the partial rule.

Titles are the ones measured on real vLLM 0.32 (docs/compat-notes.md): under
tensor parallelism ``VLLM::EngineCore`` with ``VLLM::Worker_TP0`` and
``_TP1`` (the kernel's 15-character name cuts the rank off); under data
parallelism ``VLLM::EngineCore_DP0``/``_DP1``, each with a plain
``VLLM::Worker``, and a ``VLLM::DPCoordinator``. Times are virtual.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.diagnostics.cause import CauseClass, ProcessObservation, classify
from sentinel.diagnostics.stuck import of_stuck_engines, stuck_json, stuck_lines
from sentinel.evidence.metrics import parse_vllm_metrics
from sentinel.evidence.process_model import (
    VLLM_PATTERNS,
    Placement,
    ProcessInfo,
    ProcessRole,
    ProcessSnapshot,
    ProcessState,
    full_title,
    named_placements,
    placed,
)
from sentinel.progress.tracker import ProgressTracker
from sentinel.record.ledger import Ledger
from sentinel.verdict import (
    Action,
    EngineProgress,
    Evidence,
    HangKind,
    KindEvidence,
    Policy,
    VerdictState,
    evaluate,
)

TEXT = CanaryKind.TEXT


# -- vocabulary ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "cmdline", "role", "placement"),
    [
        ("VLLM::Worker_TP", ["VLLM::Worker_TP1"], ProcessRole.WORKER, Placement(tp_rank=1)),
        ("VLLM::Worker_TP", ["VLLM::Worker_TP0"], ProcessRole.WORKER, Placement(tp_rank=0)),
        ("VLLM::EngineCor", ["VLLM::EngineCore_DP1"], ProcessRole.ENGINE_CORE, Placement(1)),
        ("VLLM::EngineCor", ["VLLM::EngineCore"], ProcessRole.ENGINE_CORE, Placement()),
        ("VLLM::Worker", ["VLLM::Worker"], ProcessRole.WORKER, Placement()),
        (
            "VLLM::Worker_DP",
            ["VLLM::Worker_DP1_PP0_TP3"],
            ProcessRole.WORKER,
            Placement(engine=1, tp_rank=3, pp_rank=0),
        ),
        ("VLLM::DPCoordin", ["VLLM::DPCoordinator"], ProcessRole.COORDINATOR, Placement()),
        # A zombie keeps only its comm: the role still shows, the rank does not.
        ("VLLM::Worker_TP", [], ProcessRole.WORKER, Placement()),
    ],
)
def test_titles_give_roles_and_ranks_from_the_whole_title(
    name: str, cmdline: list[str], role: ProcessRole, placement: Placement
) -> None:
    assert VLLM_PATTERNS.classify(name, cmdline) is role
    assert Placement.from_title(full_title(name, cmdline)) == placement


def test_a_title_not_of_vllm_places_nothing() -> None:
    assert Placement.from_title("python -m something_DP1") == Placement()
    # The full title comes from the command line only when it extends the name.
    assert full_title("python3", ["/usr/bin/python3", "x.py"]) == "python3"


def info(
    pid: int,
    role: ProcessRole,
    title: str,
    ppid: int = 1,
    state: ProcessState = ProcessState.SLEEPING,
) -> ProcessInfo:
    return ProcessInfo(pid, role, title[:15], state, 100.0 + pid, ppid=ppid, cmdline=(title,))


def dp_snapshot(stopped: int | None = None) -> ProcessSnapshot:
    def state(pid: int) -> ProcessState:
        return ProcessState.STOPPED if pid == stopped else ProcessState.SLEEPING

    return ProcessSnapshot(
        at=0.0,
        api=info(10, ProcessRole.API_SERVER, "python"),
        engines=(
            info(11, ProcessRole.ENGINE_CORE, "VLLM::EngineCore_DP0", 10, state(11)),
            info(12, ProcessRole.ENGINE_CORE, "VLLM::EngineCore_DP1", 10, state(12)),
        ),
        workers=(
            info(21, ProcessRole.WORKER, "VLLM::Worker", 11, state(21)),
            info(22, ProcessRole.WORKER, "VLLM::Worker", 12, state(22)),
        ),
        coordinators=(info(13, ProcessRole.COORDINATOR, "VLLM::DPCoordinator", 10, state(13)),),
    )


def test_a_data_parallel_worker_takes_its_engine_from_its_parent() -> None:
    snap = placed(dp_snapshot())
    assert [(p.title, p.placement.engine) for p in snap.workers] == [
        ("VLLM::Worker", 0),
        ("VLLM::Worker", 1),
    ]
    assert [p.placement.engine for p in snap.engines] == [0, 1]


def test_a_zombie_keeps_the_title_and_rank_it_was_seen_with() -> None:
    seen = placed(dp_snapshot())
    memory = {(p.pid, p.create_time): p for p in seen.engine_processes}
    zombie = ProcessInfo(12, ProcessRole.ENGINE_CORE, "VLLM::EngineCor", ProcessState.ZOMBIE, 112.0)
    later = placed(ProcessSnapshot(at=1.0, engines=(zombie,)), memory)
    assert later.engines[0].title == "VLLM::EngineCore_DP1"
    assert later.engines[0].placement.engine == 1


def test_reasons_name_the_engine_or_rank_and_read_back() -> None:
    snap = placed(dp_snapshot())
    engine = snap.engines[1].describe()
    assert engine == "engine 1 (VLLM::EngineCore_DP1, pid 12)"
    assert snap.workers[0].describe() == "engine 0 worker (VLLM::Worker, pid 21)"
    tp = placed(
        ProcessSnapshot(at=0.0, workers=(info(31, ProcessRole.WORKER, "VLLM::Worker_TP1", 30),))
    )
    assert tp.workers[0].describe() == "TP rank 1 worker (VLLM::Worker_TP1, pid 31)"
    assert named_placements(f"engine dead: {engine} stopped for 5s") == {"engine": [1]}
    assert named_placements("TP rank 1 worker (VLLM::Worker_TP1, pid 31)") == {"tp_rank": [1]}
    assert named_placements("engine hang: canary unanswered for 16s") == {}


def test_ledger_names_the_stopped_engine_and_ignores_the_coordinator() -> None:
    ledger = Ledger([(TEXT, Action.RESTART, None)], now=0.0)
    ledger.observe_processes(dp_snapshot(stopped=12), now=1.0)
    assert ledger.engine_down_detail == "engine 1 (VLLM::EngineCore_DP1, pid 12) stopped"
    assert (ledger.down_engines, ledger.down_ranks) == ((1,), ())
    ledger.observe_processes(dp_snapshot(stopped=13), now=2.0)
    assert ledger.engine_down_since is None  # a stopped coordinator is no dead engine
    _, verdict = evaluate(
        VerdictState(),
        Evidence(engine_down_since=0.0, engine_down_detail="x", down_engines=(1,)),
        Policy(),
        10.0,
    )
    (dead,) = verdict.hangs
    assert (dead.kind, dead.engines) == (HangKind.DEAD, (1,))


# -- per-engine progress -------------------------------------------------------


def exposition(tokens: dict[str, float]) -> str:
    lines = []
    for engine, value in tokens.items():
        labels = f'engine="{engine}",model_name="m"'
        lines.append(f"vllm:generation_tokens_total{{{labels}}} {value}")
        lines.append(f'vllm:request_success_total{{{labels},finished_reason="stop"}} {value / 10}')
    return "\n".join(lines) + "\n"


def test_metrics_keep_each_engines_counters_and_their_sum() -> None:
    sample = parse_vllm_metrics(exposition({"0": 50.0, "1": 30.0}), at=1.0)
    assert sample.counters["generation_tokens"] == 80.0
    assert dict(sample.engines["0"]) == {"generation_tokens": 50.0, "completions": 5.0}
    assert dict(sample.engines["1"]) == {"generation_tokens": 30.0, "completions": 3.0}


def test_progress_is_followed_per_engine_as_well_as_in_total() -> None:
    tracker = ProgressTracker()
    tracker.observe(parse_vllm_metrics(exposition({"0": 10.0, "1": 10.0}), at=1.0))
    tracker.observe(parse_vllm_metrics(exposition({"0": 20.0, "1": 10.0}), at=2.0))
    tracker.observe(parse_vllm_metrics(exposition({"0": 30.0, "1": 10.0}), at=3.0))
    assert tracker.last_progress_at == 3.0
    assert tracker.engines["0"].last_progress_at == 3.0
    assert tracker.engines["1"].last_progress_at is None
    assert tracker.engines["1"].first_seen_at == 1.0
    report = tracker.report(now=4.0)["engines"]
    assert isinstance(report, dict)
    assert report["0"]["progress_age"] == 1.0
    assert report["1"]["progress_age"] is None
    assert report["0"]["epoch_totals"]["generation_tokens"] == 20.0


def test_a_busy_engine_does_not_gate_canaries_off_while_another_is_flat() -> None:
    ledger = Ledger([(TEXT, Action.RESTART, None)], now=0.0)
    for at, one in ((1.0, 10.0), (2.0, 10.0), (8.0, 10.0)):
        ledger.progress.observe(parse_vllm_metrics(exposition({"0": at * 10, "1": one}), at=at))
    assert ledger.progress.last_real_completion_at == 8.0
    assert not ledger.busy(8.5, idle_window=5.0)  # engine 1 flat for longer than the window
    ledger.progress.observe(parse_vllm_metrics(exposition({"0": 90.0, "1": 20.0}), at=9.0))
    assert ledger.busy(9.5, idle_window=5.0)


# -- the partial rule ------------------------------------------------------------


def unanswered(sent: float) -> CanaryResult:
    return CanaryResult("text-canary", TEXT, Reason.TIMEOUT, sent, 8.0)


def ok(sent: float) -> CanaryResult:
    return CanaryResult("text-canary", TEXT, Reason.OK, sent, 0.2)


def dp_evidence(
    *results: CanaryResult,
    engine1_progress: float | None = 10.0,
    engine0_progress: float | None = 40.0,
    outstanding: tuple[float, ...] = (),
) -> Evidence:
    return Evidence(
        kinds={TEXT: KindEvidence(TEXT, results=results, outstanding=outstanding)},
        progress_available=True,
        last_progress_at=engine0_progress,
        engines=(
            EngineProgress("0", 0.0, engine0_progress),
            EngineProgress("1", 0.0, engine1_progress),
        ),
    )


def partial_at(ev: Evidence, now: float, policy: Policy | None = None) -> list[tuple[str, ...]]:
    _, verdict = evaluate(VerdictState(), ev, policy or Policy(), now)
    return [
        (str(h.kind), h.action.value, *map(str, h.engines))
        for h in verdict.hangs
        if h.kind == HangKind.PARTIAL
    ]


# Engine 1's work last moved at 10; a canary sent at 12 never answered; engine 0
# keeps serving (its other canaries succeed). Hang window 15 s.
STUCK = (ok(5.0), unanswered(12.0), ok(20.0), ok(30.0))


@pytest.mark.parametrize(
    ("ev", "now", "expected"),
    [
        pytest.param(dp_evidence(*STUCK), 26.9, [], id="inside-the-window"),
        pytest.param(dp_evidence(*STUCK), 27.0, [("partial", "restart", "1")], id="confirmed"),
        pytest.param(
            dp_evidence(ok(5.0), ok(12.0), ok(20.0), outstanding=(12.0,)),
            27.0,
            [("partial", "restart", "1")],
            id="still-outstanding",
        ),
        # Engine 1 moved after the canary: whichever engine it went to, it was not stuck.
        pytest.param(dp_evidence(*STUCK, engine1_progress=13.0), 40.0, [], id="engine-1-moved"),
        # Nothing moved on engine 0 after the canary either: the whole server's hang.
        pytest.param(dp_evidence(*STUCK, engine0_progress=11.0), 40.0, [], id="no-engine-moved"),
        # An idle engine with every canary answered is not stuck.
        pytest.param(dp_evidence(ok(5.0), ok(12.0), ok(30.0)), 60.0, [], id="idle-engine"),
        # An engine that never moved counts as flat from its first sample.
        pytest.param(
            dp_evidence(*STUCK, engine1_progress=None),
            27.0,
            [("partial", "restart", "1")],
            id="never-moved",
        ),
    ],
)
def test_partial_rule(ev: Evidence, now: float, expected: list[tuple[str, ...]]) -> None:
    assert partial_at(ev, now) == expected


def test_one_engine_alone_is_never_partial() -> None:
    ev = Evidence(
        kinds={TEXT: KindEvidence(TEXT, results=STUCK)},
        progress_available=True,
        last_progress_at=40.0,
        engines=(EngineProgress("0", 0.0, 40.0),),
    )
    assert partial_at(ev, 60.0) == []


@pytest.mark.parametrize(
    ("action", "live", "ready"),
    [(Action.RESTART, False, False), (Action.UNREADY, True, False), (Action.ALERT, True, True)],
)
def test_partial_policy_decides_the_kubelet_answers(
    action: Action, live: bool, ready: bool
) -> None:
    policy = Policy(partial_policy=action)
    state, _ = evaluate(VerdictState(), dp_evidence(ok(1.0)), policy, 2.0)  # startup passes
    _, verdict = evaluate(state, dp_evidence(*STUCK), policy, 27.0)
    (hang,) = verdict.hangs
    assert (hang.kind, hang.action) == (HangKind.PARTIAL, action)
    assert "engine 1 made no progress" in hang.reason
    assert "engine 0" not in hang.reason  # bundles read stuck engines back from the reason
    assert (verdict.liveness.ok, verdict.readiness.ok) == (live, ready)


def test_the_partial_window_pauses_over_time_sentinel_did_not_observe() -> None:
    paused = replace(dp_evidence(*STUCK), unobserved=((14.0, 20.0),))
    assert partial_at(paused, 27.0) == []
    assert partial_at(paused, 33.0) == [("partial", "restart", "1")]


# -- bundles ---------------------------------------------------------------------


def observation(pid: int, title: str, status: ProcessState, cpu: float) -> ProcessObservation:
    return ProcessObservation(pid, title, ProcessRole.ENGINE_CORE, status, cpu_percent=cpu)


def test_a_bundle_for_a_partial_hang_judges_the_stuck_engine_not_the_busy_one() -> None:
    observations = [
        observation(11, "VLLM::EngineCore_DP0", ProcessState.RUNNING, 95.0),
        observation(12, "VLLM::EngineCore_DP1", ProcessState.SLEEPING, 0.0),
    ]
    reason = "partial hang: engine 1 made no progress for 16s; other engines progressed (0)"
    named = named_placements(reason)
    cause = classify(of_stuck_engines(observations, named["engine"]))
    assert (cause.cause, cause.pid) == (CauseClass.ENGINE_BLOCKED, 12)
    assert classify(observations).pid == 11  # what it would have blamed without the name
    stuck = stuck_json(named, observations, cause.pid)
    assert stuck == {"engines": [1], "tp_ranks": []}
    assert stuck_lines(stuck) == ["stuck     engine 1"]


def test_a_bundle_names_the_rank_of_the_stopped_worker() -> None:
    observations = [
        ProcessObservation(31, "VLLM::Worker_TP0", ProcessRole.WORKER, ProcessState.SLEEPING),
        ProcessObservation(32, "VLLM::Worker_TP1", ProcessRole.WORKER, ProcessState.STOPPED),
    ]
    cause = classify(of_stuck_engines(observations, []))
    assert cause.pid == 32
    assert stuck_json({}, observations, cause.pid) == {"engines": [], "tp_ranks": [1]}
    assert stuck_lines({"engines": [], "tp_ranks": []}) == []
