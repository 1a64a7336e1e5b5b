"""The answers' flips: kept by the evaluator, carried by each capture, held by the bundle.

The timeline draws a lane per kubelet-facing answer and the restart ask from
what a bundle holds of these; here, what is kept (the hang kinds behind a red
answer, the ask), how it reaches a capture (read when the capture starts),
and that the bundle holds it redacted, on the canaries' clock.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from sentinel.diagnostics.bundle import DiagnosticsContext, Trigger, capture
from sentinel.diagnostics.child import StoredIncident
from sentinel.diagnostics.procs import ProcessMatch
from sentinel.diagnostics.sections import REASON_MAX_CHARS, ProbeTransition
from sentinel.diagnostics.store import IncidentStore
from sentinel.diagnostics.timeline import answers, restarts
from sentinel.evaluation.evaluator import answer_transitions
from sentinel.evaluation.incidents import IncidentRecorder
from sentinel.telemetry.metrics import SentinelMetrics
from sentinel.verdict import Action, Hang, HangKind, ProbeAnswer, Verdict
from tests import secret_corpus as corpus

GREEN = Verdict(
    liveness=ProbeAnswer(True, "no hang confirmed"),
    readiness=ProbeAnswer(True, "serving"),
    startup=ProbeAnswer(True, "every kind passed"),
)
ENGINE = Hang(HangKind.ENGINE, Action.RESTART, "engine hang: no progress for 15s", since=90.0)
SLOW = Hang(HangKind.DEGENERATE, Action.UNREADY, "degenerate: '!!' three times", since=95.0)
TEXT = Hang(HangKind("text"), Action.RESTART, "text path hang: 2 canaries unanswered", since=96.0)


def test_the_first_evaluation_records_every_answer() -> None:
    flips = answer_transitions(None, GREEN, 10.0)
    assert [(t.probe, t.ok, t.at) for t in flips] == [
        ("liveness", True, 10.0),
        ("readiness", True, 10.0),
        ("startup", True, 10.0),
    ]
    assert all(t.hangs == () and not t.restart for t in flips)
    assert answer_transitions(GREEN, GREEN, 11.0) == []  # nothing flipped: nothing kept


def test_a_restart_hang_turns_liveness_red_with_its_kind_and_the_ask() -> None:
    hung = Verdict(
        liveness=ProbeAnswer(False, ENGINE.reason),
        readiness=ProbeAnswer(False, f"{ENGINE.reason}; {SLOW.reason}"),
        startup=ProbeAnswer(False, "a restart was asked for; the restarted server earns ..."),
        hangs=(ENGINE, SLOW),
        restart_wanted=True,
    )
    flips = {t.probe: t for t in answer_transitions(GREEN, hung, 100.0)}
    assert flips["liveness"] == ProbeTransition(
        100.0, "liveness", False, ENGINE.reason, ("engine",), restart=True
    )
    assert flips["readiness"].hangs == ("engine", "degenerate")  # those its reason quotes
    assert not flips["readiness"].restart
    assert flips["startup"].hangs == ("engine",)  # "restart asked": the restart hangs
    back = answer_transitions(hung, GREEN, 130.0)
    assert [(t.probe, t.ok, t.hangs, t.restart) for t in back] == [
        ("liveness", True, (), False),
        ("readiness", True, (), False),
        ("startup", True, (), False),
    ]


def test_a_red_answer_that_comes_to_stand_for_a_hang_is_kept_once() -> None:
    degraded = Verdict(
        liveness=GREEN.liveness,
        readiness=ProbeAnswer(False, "degraded: recent canaries failed or were slow"),
        startup=GREEN.startup,
    )
    hung = Verdict(
        liveness=ProbeAnswer(False, ENGINE.reason),
        readiness=ProbeAnswer(False, ENGINE.reason),
        startup=ProbeAnswer(False, "a restart was asked for"),
        hangs=(ENGINE,),
        restart_wanted=True,
    )
    assert [t.hangs for t in answer_transitions(GREEN, degraded, 1.0)] == [()]
    flips = {t.probe: t for t in answer_transitions(degraded, hung, 2.0)}
    assert flips["readiness"].hangs == ("engine",)  # still red: now for the engine hang
    assert flips["liveness"].restart
    assert answer_transitions(hung, hung, 3.0) == []  # the same hang again: nothing new
    both = replace(hung, hangs=(ENGINE, TEXT))
    both = replace(both, liveness=ProbeAnswer(False, f"{ENGINE.reason}; {TEXT.reason}"))
    more = answer_transitions(hung, both, 4.0)
    assert [(t.probe, t.hangs) for t in more] == [
        ("liveness", ("engine", "text")),
        ("startup", ("engine", "text")),  # "restart asked": for both restart hangs now
    ]
    assert not any(t.restart for t in more)  # one ask per red episode


def test_an_unready_hang_or_observe_only_asks_no_restart() -> None:
    unready = Verdict(
        liveness=ProbeAnswer(True, "observe-only: would restart: " + ENGINE.reason),
        readiness=ProbeAnswer(False, SLOW.reason),
        startup=GREEN.startup,
        hangs=(ENGINE, SLOW),
        would_restart=True,
    )
    flips = answer_transitions(GREEN, unready, 50.0)
    assert [(t.probe, t.ok, t.hangs, t.restart) for t in flips] == [
        ("readiness", False, ("degenerate",), False)
    ]


async def test_a_capture_reads_the_answers_when_it_starts(tmp_path: Path) -> None:
    history: list[ProbeTransition] = [ProbeTransition(1.0, "liveness", True, "no hang confirmed")]
    captured: list[DiagnosticsContext] = []
    started = asyncio.Event()

    async def capturer(context: DiagnosticsContext, store: IncidentStore) -> StoredIncident:
        captured.append(context)
        started.set()
        raise ValueError("no bundle written in this test")

    recorder = IncidentRecorder(
        IncidentStore(tmp_path / "diag"),
        SentinelMetrics(CollectorRegistry()),
        lambda trigger: DiagnosticsContext(trigger=trigger),
        capturer=capturer,
    )
    recorder.follow_answers(lambda: tuple(history))
    red = ProbeTransition(2.0, "liveness", False, ENGINE.reason, ("engine",), restart=True)
    async with asyncio.TaskGroup() as group:
        loop = group.create_task(recorder.run())
        recorder.suspect("engine-hang", ENGINE.reason, confirmed=True)
        # The evaluator records liveness's flip after opening the incident, in
        # the same evaluation: the capture, started later, must hold it.
        history.append(red)
        async with asyncio.timeout(10.0):
            await started.wait()
        loop.cancel()
    [context] = captured
    assert context.trigger.kind == "engine-hang"
    assert list(context.probe_answers) == [history[0], red]


def _quiet_context(**fields: Any) -> DiagnosticsContext:
    """A capture that finds no process, reads no GPU and is quick: only what it is given."""
    return DiagnosticsContext(
        trigger=Trigger("engine-hang", ENGINE.reason),
        process_match=ProcessMatch(titles=(), cmdlines=(), roots=(2**22 + 7,)),
        gpu_enabled=False,
        cpu_window_s=0.0,
        budget_s=5.0,
        **fields,
    )


async def test_the_bundle_holds_the_answers_redacted_on_the_canaries_clock(
    tmp_path: Path,
) -> None:
    now = time.monotonic()
    echoed = f"engine hang: reply echoed 'Authorization: Bearer {corpus.ENV['GITHUB_PAT']}'"
    history = (
        ProbeTransition(now - 60, "startup", True, "every kind passed"),
        ProbeTransition(now - 5, "liveness", False, echoed, ("engine",), restart=True),
        ProbeTransition(now - 5, "readiness", False, "x" * (REASON_MAX_CHARS * 4), ("engine",)),
    )
    context = _quiet_context(
        probe_answers=history,
        config={"api_key": corpus.API_KEY},
        cgroup_root=tmp_path / "no-cgroup",
    )
    incident = await capture(context)
    held = incident.bundle["probe_answers"]
    assert [(e["probe"], e["ok"], e["hangs"], e["restart"]) for e in held] == [
        ("startup", True, [], False),
        ("liveness", False, ["engine"], True),
        ("readiness", False, ["engine"], False),
    ]
    assert corpus.ENV["GITHUB_PAT"] not in str(held)  # redacted with the rest of the bundle
    assert held[1]["reason"].startswith("engine hang: reply echoed")
    assert len(held[2]["reason"]) == REASON_MAX_CHARS
    # On the canaries' clock: the bundle's anchor, taken as it is assembled
    # (within the capture's budget), places the ask 5 s and a little before it.
    [(at, kinds)] = restarts(incident.bundle)
    assert kinds == "engine"
    assert -5.0 - context.budget_s < at <= -5.0
    assert answers(incident.bundle)["liveness"][-1][2:] == (False, "engine")
