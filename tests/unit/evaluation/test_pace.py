"""What keeps the verdict at the full pace, and when a tick judges.

Nothing in play (every answer green, the queue read empty, no canary in flight
or failed, no failing evidence, awake) is the only quiet; each of those in play
keeps the full pace, and a server whose queue cannot be read is never quiet.
A quiet verdict is judged once per quiet interval, and at once when a canary
has left since.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from sentinel.canary.catalog import load_catalog
from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.config.settings import Settings
from sentinel.evaluation.evaluator import Evaluator
from sentinel.evaluation.health import HealthState
from sentinel.evaluation.incidents import IncidentRecorder
from sentinel.evaluation.pace import in_play
from sentinel.record.ledger import Ledger
from sentinel.record.observers import Observations
from sentinel.telemetry.metrics import SentinelMetrics
from sentinel.verdict import (
    Action,
    Evidence,
    Hang,
    HangKind,
    KindEvidence,
    Lifecycle,
    Phase,
    ProbeAnswer,
    Verdict,
)
from sentinel.verdict.hangs.api_server import API_WATCH, ApiStuckSection
from sentinel.verdict.stall import COMPILE, CompileSection

TEXT = CanaryKind.TEXT
GREEN = Verdict(
    liveness=ProbeAnswer(True, "no hang confirmed"),
    readiness=ProbeAnswer(True, "serving"),
    startup=ProbeAnswer(True, "every kind passed"),
)
PASSED = CanaryResult("text", TEXT, Reason.OK, 10.0, 0.1)
FAILED = replace(PASSED, reason=Reason.TIMEOUT)
QUIET = Evidence(kinds={TEXT: KindEvidence(TEXT, results=(PASSED,))}, queue_empty=True)


def test_an_idle_green_server_is_quiet() -> None:
    assert in_play(QUIET, GREEN) is None


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"queue_empty": False}, "work shown, or the queue unknown"),
        ({"engine_down_since": 1.0}, "an engine process down"),
        ({"health_failing_since": 1.0}, "vLLM /health failing"),
        ({"refused_since": 1.0}, "connections refused"),
        ({"waiting_since": 1.0}, "real requests waiting"),
        ({"sections": {COMPILE.name: CompileSection(since=1.0)}}, "a compiler busy"),
        ({"sections": {API_WATCH.name: ApiStuckSection(since=1.0)}}, "an API-server process stuck"),
        ({"lifecycle": Lifecycle(Phase.ASLEEP)}, "the server is asleep"),
        (
            {"kinds": {TEXT: KindEvidence(TEXT, results=(PASSED,), outstanding=(11.0,))}},
            "a text canary in flight",
        ),
        (
            {
                "kinds": {
                    TEXT: KindEvidence(TEXT, results=(replace(PASSED, reason=Reason.TIMEOUT),))
                }
            },
            "the last text canary failed",
        ),
    ],
)
def test_anything_in_play_keeps_the_full_pace(change: dict[str, Any], why: str) -> None:
    assert in_play(replace(QUIET, **change), GREEN) == why


def test_a_red_answer_keeps_the_full_pace() -> None:
    hang = Hang(HangKind.ENGINE, Action.RESTART, "engine hang", since=5.0)
    red = replace(GREEN, liveness=ProbeAnswer(False, "engine hang"), hangs=(hang,))
    assert in_play(QUIET, red) == "an answer is red"
    unready = replace(GREEN, readiness=ProbeAnswer(False, "startup has not passed"))
    assert in_play(QUIET, unready) == "an answer is red"


def test_a_quiet_verdict_is_judged_per_quiet_interval_and_when_a_canary_leaves() -> None:
    specs = load_catalog().enabled()
    ledger = Ledger([(s.kind, Action(s.policy), s.latency_slo) for s in specs], time.monotonic())
    metrics = SentinelMetrics(CollectorRegistry())
    settings = Settings()
    evaluator = Evaluator(
        settings,
        ledger=ledger,
        state=HealthState(),
        metrics=metrics,
        incidents=IncidentRecorder(None, metrics, _no_context),
        observations=Observations(),
        config={},
        specs=specs,
    )
    assert evaluator.due(0.0)  # never judged: at once
    # As a judgement that found nothing in play leaves it (evaluate's last step):
    evaluator.in_play, evaluator._judged = None, (100.0, ledger.canaries_sent)
    assert not evaluator.due(100.0 + settings.eval_interval)
    assert evaluator.due(100.0 + settings.quiet_interval)
    ledger.canary_sent(TEXT, 100.2)
    assert evaluator.due(100.0 + settings.eval_interval)  # a canary left: judged now
    evaluator.in_play = "a text canary in flight"
    evaluator._judged = (100.5, ledger.canaries_sent)
    assert evaluator.due(100.5 + settings.eval_interval)


def _no_context(trigger: Any) -> Any:
    raise AssertionError("no diagnostics expected")


def test_the_quiet_interval_stays_between_the_tick_and_a_quarter_of_the_hang_window() -> None:
    assert Settings().quiet_interval == 2.0
    short = Settings(hang_window=4.0, eval_interval=0.25, scrape_interval=0.5)
    assert short.quiet_interval == 1.0
    assert Settings(eval_interval=3.0, eval_quiet_interval=1.0).quiet_interval == 3.0
