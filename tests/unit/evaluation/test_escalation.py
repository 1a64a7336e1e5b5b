"""Escalation: restarts that end in the same hang are "a restart does not fix this".

The brake is keyed by the cause as well as the count (docs/design.md, "Readiness,
startup and the brake"; sentinel.verdict.cause): after ``brake_max_restarts``
restarts that each ended in the same cause, readiness names the cause and the
node, ``sentinel_restart_ineffective{node, cause}`` says it and a
``RestartIneffective`` Event asks someone to look at the node. On a virtual
clock: every time is a plain number of seconds.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.config.settings import Settings
from sentinel.evaluation.evaluator import Evaluator
from sentinel.evaluation.health import HealthState, initial_snapshot
from sentinel.evaluation.incidents import IncidentRecorder
from sentinel.evaluation.node import PodNode, node_name
from sentinel.record.ledger import Ledger
from sentinel.record.observers import Observations
from sentinel.serve.state_metrics import daemon_metrics
from sentinel.telemetry.events import EventReason
from sentinel.telemetry.metrics import SentinelMetrics
from sentinel.verdict import (
    Action,
    Evidence,
    Hang,
    HangKind,
    KindEvidence,
    Policy,
    Verdict,
    VerdictState,
    evaluate,
)
from sentinel.verdict.cause import cause_key, describe, node_of, recent, same_cause_restarts
from sentinel.verdict.model import Ineffective

TEXT = CanaryKind.TEXT
NODE = "gpu-node-7"


@dataclass
class Sidecar:
    """The verdict state carried from one evaluation to the next, as the evaluator does."""

    policy: Policy = field(default_factory=Policy)
    state: VerdictState = field(default_factory=VerdictState)

    def at(self, now: float, ev: Evidence) -> Verdict:
        self.state, verdict = evaluate(self.state, ev, self.policy, now)
        return verdict


def server(
    epoch: int,
    started: float,
    *,
    down_since: float | None = None,
    engines: tuple[int, ...] = (),
    ranks: tuple[int, ...] = (),
    node: object = NODE,
) -> Evidence:
    """A server started at ``started`` whose text canary passed; an engine down, if given."""
    ok = CanaryResult("text-canary", TEXT, Reason.OK, started=started + 1, duration=0.3)
    return Evidence(
        epoch=epoch,
        epoch_started=started,
        kinds={TEXT: KindEvidence(TEXT, results=(ok,))},
        progress_available=True,
        engine_down_since=down_since,
        down_engines=engines if down_since is not None else (),
        down_ranks=ranks if down_since is not None else (),
        sections={"node": node},
    )


def episode(
    sidecar: Sidecar, epoch: int, started: float, *, ranks: tuple[int, ...] = (), **where: Any
) -> Verdict:
    """Server ``epoch`` starts, serves, then an engine process goes down (dead after 5 s)."""
    assert sidecar.at(started + 2, server(epoch, started, **where)).startup.ok
    return sidecar.at(
        started + 20, server(epoch, started, down_since=started + 10, ranks=ranks, **where)
    )


def test_the_same_cause_after_each_restart_holds_readiness_red_naming_cause_and_node() -> None:
    sidecar = Sidecar()  # brake_max_restarts 3
    for epoch in range(3):
        red = episode(sidecar, epoch, 100.0 * epoch, engines=(1,))
        assert not red.liveness.ok, f"restart {epoch + 1} is asked for"
        assert red.ineffective is None
    assert list(sidecar.state.causes) == ["dead engine 1"] * 2  # counted as each server starts
    fourth = episode(sidecar, 3, 300.0, engines=(1,))
    assert list(sidecar.state.causes) == ["dead engine 1"] * 3
    assert fourth.brake_engaged
    assert fourth.liveness.ok  # the brake: no fourth restart
    assert fourth.ineffective == Ineffective("dead engine 1", 3, NODE)
    assert not fourth.readiness.ok
    assert "dead engine 1" in fourth.readiness.reason
    assert f"look at node {NODE}" in fourth.readiness.reason
    assert "restart-loop brake" in fourth.readiness.reason
    assert "a restart does not fix this" in fourth.liveness.reason
    # It stays so while the hang lasts, and the hang clearing ends it.
    still = sidecar.at(340.0, server(3, 300.0, down_since=310.0, engines=(1,)))
    assert still.ineffective == fourth.ineffective
    assert not still.readiness.ok
    cleared = sidecar.at(341.0, server(3, 300.0))
    assert cleared.ineffective is None
    assert not cleared.brake_engaged


def test_a_different_cause_after_a_restart_resets_the_count() -> None:
    sidecar = Sidecar()
    for epoch, engine in enumerate((1, 1, 0)):  # the third restart was for engine 0
        assert not episode(sidecar, epoch, 100.0 * epoch, engines=(engine,)).liveness.ok
    fourth = episode(sidecar, 3, 300.0, engines=(0,))
    assert fourth.brake_engaged  # the count alone still brakes: 3 restarts this hour
    assert fourth.ineffective is None  # but only one of them was for engine 0
    assert "look at node" not in fourth.readiness.reason
    # A different rank is a different cause too; the same rank is the same.
    assert cause_key([_hang(ranks=(3,))]) != cause_key([_hang(ranks=(2,))])
    assert cause_key([_hang(ranks=(3,))]) == cause_key([_hang(ranks=(3,), reason="other 9s")])


def test_more_restarts_than_the_brake_allows_only_when_the_limit_is_raised() -> None:
    sidecar = Sidecar(Policy(brake_max_restarts=4))
    for epoch in range(4):
        assert not episode(sidecar, epoch, 100.0 * epoch, ranks=(2,)).liveness.ok
    fifth = episode(sidecar, 4, 400.0, ranks=(2,))
    assert fifth.ineffective == Ineffective("dead rank 2", 4, NODE)


def test_restarts_older_than_the_window_are_forgotten() -> None:
    sidecar = Sidecar(Policy(brake_window=600.0))
    for epoch in range(3):
        episode(sidecar, epoch, 300.0 * epoch, engines=(1,))
    fourth = episode(sidecar, 3, 1200.0, engines=(1,))  # the first restart (at 300) is gone
    assert not fourth.brake_engaged
    assert fourth.ineffective is None
    assert not fourth.liveness.ok


def test_a_working_server_is_never_affected() -> None:
    sidecar = Sidecar()
    for epoch in range(8):  # restarted by hand (no red episode): nothing counted
        verdict = sidecar.at(100.0 * epoch + 2, server(epoch, 100.0 * epoch))
        assert verdict.readiness.ok
        assert verdict.liveness.ok
        assert verdict.ineffective is None
    assert sidecar.state.restarts == ()
    assert sidecar.state.causes == ()


def test_without_a_node_it_says_so_rather_than_guess() -> None:
    sidecar = Sidecar()
    for epoch in range(4):
        last = episode(sidecar, epoch, 100.0 * epoch, node="")
    assert last.ineffective == Ineffective("dead", 3, "")
    assert "look at node unknown (NODE_NAME not set)" in last.readiness.reason


def test_observe_only_never_escalates() -> None:
    sidecar = Sidecar(Policy(enforce=False))
    for epoch in range(5):
        verdict = episode(sidecar, epoch, 100.0 * epoch, engines=(1,))
        assert verdict.liveness.ok
        assert verdict.ineffective is None
    assert sidecar.state.restarts == ()


def _hang(
    kind: HangKind = HangKind.DEAD,
    engines: tuple[int, ...] = (),
    ranks: tuple[int, ...] = (),
    reason: str = "engine dead: for 6s",
) -> Hang:
    return Hang(kind, Action.RESTART, reason, 0.0, engines, ranks)


def test_cause_key_is_the_kind_and_where_it_sat() -> None:
    assert cause_key([_hang(HangKind.ENGINE)]) == "engine"
    assert cause_key([_hang(engines=(2, 1, 1))]) == "dead engine 1,2"
    assert cause_key([_hang(HangKind("structured"))]) == "structured"
    both = [_hang(HangKind.PARTIAL, engines=(1,)), _hang(ranks=(0,))]
    assert cause_key(both) == "dead rank 0 + partial engine 1"
    assert cause_key(reversed(both)) == cause_key(both)


def test_same_cause_counts_the_latest_run_only() -> None:
    assert same_cause_restarts(("a", "b", "b"), "b") == 2
    assert same_cause_restarts(("b", "b", "a"), "b") == 0
    assert same_cause_restarts(("", ""), "") == 0  # no cause known matches nothing


def test_restarts_kept_without_causes_count_as_unknown_causes() -> None:
    assert recent((1.0, 2.0, 3.0), ("x",), 100.0, 10.0) == ((1.0, 2.0, 3.0), ("", "", "x"))
    assert recent((1.0, 50.0), ("a", "b"), 20.0, 60.0) == ((50.0,), ("b",))
    assert recent((), ("stale",), 20.0, 60.0) == ((), ())


@pytest.mark.parametrize("node", [None, 7, "x" * 254, "evil\nnode", "\x1b[31m"])
def test_a_node_that_is_no_name_is_not_named(node: object) -> None:
    assert node_of(Evidence(sections={"node": node})) == ""
    assert node_name({"NODE_NAME": node} if isinstance(node, str) else {}) == ""


def test_node_name_from_the_downward_api() -> None:
    assert node_name({"NODE_NAME": f" {NODE} "}) == NODE
    assert PodNode(NODE).section(0.0) == NODE
    assert PodNode("").status("", 0.0) == {"name": None}


# --- the metric and the Event ------------------------------------------------------


def _samples(registry: CollectorRegistry) -> dict[tuple[str, ...], float]:
    return {
        (s.labels["node"], s.labels["cause"]): s.value
        for family in registry.collect()
        if family.name == "sentinel_restart_ineffective"
        for s in family.samples
    }


async def test_the_metric_names_the_node_and_the_cause_only_while_it_holds() -> None:
    state = HealthState()
    registry = CollectorRegistry()
    daemon_metrics(registry, state)
    assert _samples(registry) == {}
    held = Ineffective("dead engine 1", 3, NODE)
    await state.publish(replace(initial_snapshot(), restart_ineffective=held))
    assert _samples(registry) == {(NODE, "dead engine 1"): 3.0}
    await state.publish(initial_snapshot())
    assert _samples(registry) == {}


@dataclass
class Reporter:
    """The Event reporter's seam: what would be posted on the pod."""

    expect: int
    posted: list[tuple[str, str]] = field(default_factory=list)
    enabled: bool = True
    done: asyncio.Event = field(default_factory=asyncio.Event)

    async def post(self, reason: EventReason, message: str) -> Any:
        self.posted.append((str(reason), message))
        if len(self.posted) >= self.expect:
            self.done.set()
        return type("Outcome", (), {"posted": True, "detail": ""})()


def _recorder(reporter: Reporter, node: str = NODE) -> IncidentRecorder:
    def no_context(trigger: Any) -> Any:
        raise AssertionError("no diagnostics expected")

    metrics = SentinelMetrics(CollectorRegistry())
    return IncidentRecorder(None, metrics, no_context, reporter=reporter, node=node)  # type: ignore[arg-type]


async def _posted(recorder: IncidentRecorder, reporter: Reporter) -> None:
    """Run the recorder's loops until the reporter was told what it expects (5 s at most)."""
    task = asyncio.create_task(recorder.run())
    try:
        await asyncio.wait_for(reporter.done.wait(), 5.0)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_the_event_says_which_node_to_look_at() -> None:
    reporter = Reporter(expect=2)
    recorder = _recorder(reporter)
    hang = _hang(engines=(1,))
    held = Ineffective("dead engine 1", 3, NODE)
    braked = Verdict(*(initial_snapshot().liveness,) * 3, brake_engaged=True)
    recorder.hang_confirmed(hang, enforce=True, verdict=braked)
    ineffective = Verdict(*(initial_snapshot().liveness,) * 3, brake_engaged=True, ineffective=held)
    recorder.hang_confirmed(hang, enforce=True, verdict=ineffective)
    await _posted(recorder, reporter)
    (brake, brake_message), (stuck, message) = reporter.posted
    assert brake == "SentinelRestartBrake"
    assert NODE not in brake_message
    assert stuck == "RestartIneffective"
    assert message.startswith(describe(held))
    assert f"look at node {NODE}" in message
    assert hang.reason in message


async def test_the_evaluator_hands_the_node_to_the_verdict() -> None:
    reporter = Reporter(expect=1)
    recorder = _recorder(reporter)
    metrics = SentinelMetrics(CollectorRegistry())
    evaluator = Evaluator(
        Settings(),
        ledger=Ledger([(TEXT, Action.RESTART, None)], time.monotonic()),
        state=HealthState(),
        metrics=metrics,
        incidents=recorder,
        observations=Observations(),
        config={},
    )
    await evaluator.evaluate(time.monotonic())
    status = evaluator.state.snapshot().status
    assert status["sections"]["node"] == {"name": NODE}
    assert status["verdict"]["restart_ineffective"] is None
