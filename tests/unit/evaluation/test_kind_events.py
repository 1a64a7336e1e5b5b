"""A canary kind set aside for a server is announced once per kind per server epoch.

Found in the judged evidence (a kind disabled, with its reason), whoever
disabled it: the scheduler's set-aside, an unsupported input, the evaluator's
command-line rule. Never every evaluation; a new server epoch is news again.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry

from sentinel.canary.catalog import load_catalog
from sentinel.canary.spec import MULTIMODAL, STRUCTURED, TEXT, CanaryKind
from sentinel.config.settings import Settings
from sentinel.evaluation.evaluator import Evaluator
from sentinel.evaluation.health import HealthState
from sentinel.evaluation.incidents import IncidentRecorder
from sentinel.evaluation.kind_events import KindNotices
from sentinel.evidence.process_model import (
    ProcessInfo,
    ProcessRole,
    ProcessSnapshot,
    ProcessState,
    reasoning_parser,
)
from sentinel.record.ledger import Ledger
from sentinel.record.observers import Observations
from sentinel.telemetry.events import EventReason
from sentinel.telemetry.metrics import SentinelMetrics
from sentinel.verdict import Action, Evidence, KindEvidence

SET_ASIDE = (
    "set aside for this server: 5 canaries in a row inconclusive (only reasoning, cut at"
    " max_tokens)"
)


def _evidence(epoch: int, **disabled: str) -> Evidence:
    kinds = {
        kind: KindEvidence(
            kind=kind,
            enabled=kind.value not in disabled,
            disabled_reason=disabled.get(kind.value, ""),
        )
        for kind in (TEXT, STRUCTURED, MULTIMODAL)
    }
    return Evidence(epoch=epoch, kinds=kinds)


def test_every_kind_fine_announces_nothing() -> None:
    notices = KindNotices()
    assert notices.new(_evidence(0)) == []
    assert notices.new(_evidence(0)) == []


def test_a_kind_set_aside_is_announced_once_per_epoch_and_again_for_the_next_server() -> None:
    notices = KindNotices()
    first = notices.new(_evidence(0, structured=SET_ASIDE))
    assert [(n.kind, n.why, n.epoch) for n in first] == [(STRUCTURED, SET_ASIDE, 0)]
    assert first[0].message == (
        "canary kind structured set aside for this server (epoch 0): 5 canaries in a row"
        " inconclusive (only reasoning, cut at max_tokens); sentinel judges startup and"
        " readiness on the other kinds and no longer watches this path until the server restarts"
    )
    for _ in range(3):  # every later evaluation of the same server: nothing new
        assert notices.new(_evidence(0, structured=SET_ASIDE)) == []
    unsupported = "the model does not take image input"
    both = notices.new(_evidence(0, structured=SET_ASIDE, multimodal=unsupported))
    assert [(n.kind, n.why) for n in both] == [(MULTIMODAL, unsupported)]
    assert "canary kind multimodal set aside" in both[0].message
    assert unsupported in both[0].message
    assert notices.new(_evidence(1)) == []  # the new server runs every kind
    again = notices.new(_evidence(1, structured=SET_ASIDE))
    assert [(n.kind, n.epoch) for n in again] == [(STRUCTURED, 1)]


class RecordedIncidents(IncidentRecorder):
    """The recorder, with the Events it would post kept in a list."""

    def __init__(self, metrics: SentinelMetrics) -> None:
        def no_context(trigger: Any) -> Any:
            raise AssertionError("no diagnostics expected")

        super().__init__(None, metrics, no_context)
        self.announced: list[tuple[EventReason, str]] = []

    def announce(self, reason: EventReason, message: str) -> None:
        self.announced.append((reason, message))


def _evaluator() -> tuple[Evaluator, RecordedIncidents]:
    specs = load_catalog().enabled()
    ledger = Ledger([(s.kind, Action(s.policy), s.latency_slo) for s in specs], time.monotonic())
    metrics = SentinelMetrics(CollectorRegistry())
    incidents = RecordedIncidents(metrics)
    evaluator = Evaluator(
        Settings(),
        ledger=ledger,
        state=HealthState(),
        metrics=metrics,
        incidents=incidents,
        observations=Observations(),
        config={},
        specs=specs,
    )
    return evaluator, incidents


def _reasoning_server(pid: int = 10) -> ProcessSnapshot:
    cmdline = ("vllm", "serve", "m", "--reasoning-parser", "qwen3")
    api = ProcessInfo(
        pid=pid,
        role=ProcessRole.API_SERVER,
        name="python",
        state=ProcessState.SLEEPING,
        create_time=1.0,
        cmdline=cmdline,
    )
    return ProcessSnapshot(at=time.monotonic(), api=api, reasoning_parser=reasoning_parser(cmdline))


async def test_the_evaluator_announces_each_disabled_kind_once_and_nothing_for_a_fine_server() -> (
    None
):
    evaluator, incidents = _evaluator()
    ledger = evaluator.ledger
    for _ in range(3):
        await evaluator.evaluate(time.monotonic())
    assert incidents.announced == []  # every kind enabled: no Event
    ledger.disable(CanaryKind.MULTIMODAL, "the model does not take image input")  # the scheduler
    ledger.observe_processes(_reasoning_server(), time.monotonic())  # the evaluator's own rule
    for _ in range(5):
        await evaluator.evaluate(time.monotonic())
    reasons = {reason for reason, _ in incidents.announced}
    assert reasons == {EventReason.CANARY_KIND_SET_ASIDE}
    messages = sorted(message for _, message in incidents.announced)
    assert len(messages) == 2, messages
    assert messages[0].startswith("canary kind multimodal set aside for this server (epoch 0)")
    assert "the model does not take image input" in messages[0]
    assert messages[1].startswith("canary kind structured set aside for this server (epoch 0)")
    assert "--reasoning-parser qwen3" in messages[1]
    ledger.observe_processes(_reasoning_server(pid=11), time.monotonic())  # a restarted server
    for _ in range(3):
        await evaluator.evaluate(time.monotonic())
    later = [message for _, message in incidents.announced[2:]]
    assert len(later) == 1, later  # its epoch disables structured again; multimodal runs again
    assert later[0].startswith("canary kind structured set aside for this server (epoch 1)")
