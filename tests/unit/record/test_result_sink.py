"""The result sink and the plan (issue 42: a result is recorded once).

Every canary result goes through :class:`~sentinel.record.sink.ResultSink`
in one fixed order (the credit, the late wait, reachability, metrics, the
listener), and what scheduling goes by is the frozen
:class:`~sentinel.record.plan.Plan` a new server epoch starts afresh.
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.record.ledger import Ledger
from sentinel.record.plan import Plan
from sentinel.record.sink import Outcome, ResultSink
from sentinel.telemetry.metrics import SentinelMetrics
from sentinel.verdict import Action

TEXT, STRUCTURED = CanaryKind.TEXT, CanaryKind.STRUCTURED
BUDGET = {"prompt_tokens": 10.0, "generation_tokens": 2.0, "engine_tokens": 12.0}


def _ledger() -> Ledger:
    return Ledger([(TEXT, Action.RESTART, None), (STRUCTURED, Action.ALERT, None)], 0.0)


def _result(reason: Reason = Reason.OK, **changes: object) -> CanaryResult:
    result = CanaryResult("text", TEXT, reason, started=1.0, duration=0.5)
    return replace(result, **changes)  # type: ignore[arg-type]


class _Seen:
    """Records what each step of the sink found in the ledger when it ran."""

    def __init__(self, ledger: Ledger, metrics: SentinelMetrics) -> None:
        self.ledger, self.metrics = ledger, metrics
        self.steps: list[tuple[str, int, bool | None, float]] = []

    def _look(self, step: str) -> None:
        counted = self.metrics.registry.get_sample_value(
            "sentinel_canary_total", {"kind": "text", "outcome": "success", "reason": "ok"}
        )
        history = len(self.ledger.records[TEXT].results)
        self.steps.append((step, history, self.ledger.reachable, counted or 0.0))

    def closed(self, outcome: Outcome) -> None:
        self._look("late wait")

    def abandon(self, kind: CanaryKind, token: int) -> None:
        self.steps.append(("abandon", token, None, 0.0))

    def listener(self, result: CanaryResult) -> None:
        self._look("listener")


def _sink() -> tuple[Ledger, ResultSink, _Seen]:
    ledger = _ledger()
    metrics = SentinelMetrics(CollectorRegistry())
    seen = _Seen(ledger, metrics)
    sink = ResultSink(ledger, metrics, clock=lambda: 2.0, listener=seen.listener)
    sink.follow_waits(seen)
    return ledger, sink, seen


def test_a_result_is_recorded_in_one_fixed_order() -> None:
    ledger, sink, seen = _sink()
    token = sink.sent(TEXT, BUDGET, None)
    assert ledger.in_flight() == 1
    sink.record(Outcome(TEXT, token, _result(), epoch=0))
    # The late wait is closed once the credit is (history 1), before reachability and the
    # metrics; the listener hears last, with everything recorded.
    assert seen.steps == [("late wait", 1, None, 0.0), ("listener", 1, True, 1.0)]
    assert ledger.in_flight() == 0


def test_only_a_refusal_says_nothing_listens() -> None:
    ledger, sink, _ = _sink()
    sink.record(Outcome(TEXT, sink.sent(TEXT, None, None), _result(Reason.CONNECT), epoch=0))
    assert (ledger.reachable, ledger.refused_since) == (False, 2.0)
    sink.record(Outcome(TEXT, sink.sent(TEXT, None, None), _result(Reason.TIMEOUT), epoch=0))
    assert (ledger.reachable, ledger.refused_since, ledger.answered) == (True, None, True)


def test_a_late_answer_is_a_second_outcome_of_the_same_canary() -> None:
    ledger, sink, seen = _sink()
    token = sink.sent(TEXT, BUDGET, None)
    timed_out = _result(Reason.TIMEOUT, awaiting_late=True)
    sink.record(Outcome(TEXT, token, timed_out, epoch=0))
    assert ledger.in_flight() == 1  # still in the engine: its credit stays open
    answered = _result(late=True)
    sink.record(Outcome(TEXT, token, answered, epoch=0, late=True))
    assert list(ledger.records[TEXT].results) == [answered]  # it replaced the timeout
    assert ledger.in_flight() == 0
    assert [step[0] for step in seen.steps] == ["late wait", "listener"] * 2


def test_a_canary_abandoned_ends_its_credit_and_its_late_wait() -> None:
    ledger, sink, seen = _sink()
    token = sink.sent(TEXT, BUDGET, None)
    sink.abandoned(TEXT, token)
    assert ledger.in_flight() == 0
    assert seen.steps == [("abandon", token, None, 0.0)]


def test_the_served_model_question_is_evidence_like_a_canary() -> None:
    ledger, sink, _ = _sink()
    sink.model_asked(None, Reason.CONNECT)
    assert (ledger.reachable, ledger.model) == (False, None)
    sink.model_asked(None, Reason.TIMEOUT)
    assert ledger.reachable is False  # a timeout says nothing either way
    sink.model_asked("m")
    assert (ledger.reachable, ledger.model) == (True, "m")


def test_the_plan_is_frozen_and_mirrors_the_records() -> None:
    ledger = _ledger()
    before = ledger.plan
    ledger.disable(STRUCTURED, "no grammar backend")
    ledger.fall_back(TEXT, "on /v1/completions")
    ledger.startup_judged(True)
    plan = ledger.plan
    assert before == Plan(0)  # the plan published earlier is untouched
    assert (plan.runs(STRUCTURED), plan.set_aside[STRUCTURED]) == (False, "no grammar backend")
    assert not ledger.records[STRUCTURED].enabled
    assert (plan.fallback(TEXT), plan.startup_passed) == ("on /v1/completions", True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.startup_passed = False  # type: ignore[misc]
    with pytest.raises(TypeError):
        plan.set_aside[TEXT] = "x"  # type: ignore[index]


def test_a_new_epoch_starts_from_a_fresh_plan() -> None:
    ledger = _ledger()
    ledger.disable(STRUCTURED, "why")
    ledger.startup_judged(True)
    ledger.new_epoch("API server restarted", 5.0)
    assert ledger.plan == Plan(1)
    assert ledger.plan.runs(STRUCTURED)
    assert not ledger.plan.startup_passed
