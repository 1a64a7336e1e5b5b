"""A server crashing at load, from sentinel's side: counted departures and /status's words.

The kubelet restarts a server that exits on its own back-off; sentinel adds no
restart (liveness stays green: a refusal is no hang without a live API
server) and says what it sees: how long connections have been refused, how
often the server went away in the last 10 min.
"""

from __future__ import annotations

from typing import Any

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import TEXT
from sentinel.evaluation.status import PriorityReport, StatusInputs, status_document
from sentinel.record.departures import (
    CRASH_LOOP_AT,
    WINDOW_S,
    Departure,
    Departures,
    departures_json,
    not_answering,
    went_away,
)
from sentinel.record.ledger import Ledger
from sentinel.record.planner import end_if_gone
from sentinel.verdict import Action, Policy, Verdict, VerdictState, evaluate

GRACE = 5.0


def _away(*ats: float) -> tuple[Departure, ...]:
    return tuple(Departure(at, "server went away: connections refused for 5s") for at in ats)


def test_a_crash_loop_is_named_with_its_count_and_that_sentinel_asks_no_restart() -> None:
    said = not_answering(
        142.0,
        refused_since=100.0,
        answered=False,
        epoch=4,
        api_alive=None,
        departures=_away(10.0, 40.0, 80.0, 130.0),
        liveness_ok=True,
    )
    assert said == (
        "the server is not answering: connections refused for 42s; it went away or restarted"
        " 4 times in the last 10 min (a crash loop at load? the kubelet restarts it on its own"
        " back-off); sentinel asks no restart"
    )


def test_fewer_departures_are_counted_but_not_called_a_crash_loop() -> None:
    assert went_away(_away(1.0)) == "it went away or restarted once in the last 10 min"
    two = went_away(_away(1.0, 2.0))
    assert two == "it went away or restarted 2 times in the last 10 min"
    assert "crash loop" in str(went_away(_away(*range(CRASH_LOOP_AT))))
    assert went_away(()) is None


def test_a_server_that_never_answered_is_said_so_and_an_answering_one_says_nothing() -> None:
    never = not_answering(
        30.0,
        refused_since=0.0,
        answered=False,
        epoch=0,
        api_alive=None,
        departures=(),
        liveness_ok=True,
    )
    assert never == (
        "the server is not answering: connections refused for 30s; it has not answered since"
        " sentinel started; sentinel asks no restart"
    )
    loading = not_answering(
        12.0,
        refused_since=0.0,
        answered=False,
        epoch=2,
        api_alive=True,
        departures=_away(-1.0),
        liveness_ok=True,
    )
    assert str(loading).startswith(
        "the server is not answering: connections refused for 12s while its API-server"
        " process lives (loading?); it went away or restarted once"
    )
    red = not_answering(
        40.0,
        refused_since=0.0,
        answered=True,
        epoch=1,
        api_alive=True,
        departures=(),
        liveness_ok=False,
    )
    assert str(red).endswith("process lives; liveness is failing")  # a listener-down hang
    answering = not_answering(
        5.0,
        refused_since=None,
        answered=True,
        epoch=3,
        api_alive=None,
        departures=_away(1.0),
        liveness_ok=True,
    )
    assert answering is None


def test_only_the_window_is_counted_and_the_latest_come_first() -> None:
    seen = Departures()
    for at in (0.0, 100.0, 500.0, 650.0):
        seen.saw(at, f"gone at {at:g}")
    recent = seen.within(700.0)
    assert [d.at for d in recent] == [500.0, 650.0]  # 0 and 100 are over 10 min ago
    doc = departures_json(recent, 700.0)
    assert doc["window"] == WINDOW_S
    assert doc["count"] == 2
    assert [r["reason"] for r in doc["recent"]] == ["gone at 650", "gone at 500"]
    assert doc["recent"][0]["ago"] == 50.0


def _answered(ledger: Ledger, at: float) -> None:
    """A text canary that passed at ``at`` (the server was up)."""
    token = ledger.canary_sent(TEXT, at)
    result = CanaryResult("text", TEXT, Reason.OK, started=at, duration=0.1)
    ledger.canary_done(TEXT, token, result, at + 0.1, epoch=ledger.epoch)
    ledger.saw_answer()


def _document(ledger: Ledger, now: float, state: VerdictState) -> tuple[Verdict, dict[str, Any]]:
    evidence = ledger.evidence(now, freshness=10.0)
    _, verdict = evaluate(state, evidence, Policy(), now)
    doc = status_document(
        StatusInputs(
            now=now,
            target="http://vllm:8000",
            enforce=True,
            config={},
            evidence=evidence,
            verdict=verdict,
            episodes=[],
            brake_window=3600.0,
            priority=PriorityReport(),
            stalls=0,
            last_scrape_error="",
            incident=None,
            recent_incidents=[],
            transitions=[],
        )
    )
    return verdict, doc


def test_a_server_coming_and_going_is_counted_from_the_ledger_and_liveness_stays_green() -> None:
    ledger = Ledger([(TEXT, Action.RESTART, None)], 0.0)
    state = VerdictState()
    at = 1.0
    for _ in range(4):  # up, a canary passes, then gone past the grace: one departure each
        _answered(ledger, at)
        ledger.saw_refusal(at + 1.0)
        end_if_gone(ledger, at + 1.0 + GRACE, GRACE)
        at += 30.0
    assert ledger.epoch == 4
    assert len(ledger.departures.within(at)) == 4
    verdict, doc = _document(ledger, at, state)
    assert verdict.liveness.ok, verdict.liveness  # sentinel adds no restart of its own
    assert not verdict.readiness.ok
    server = doc["server"]
    assert server["departures"]["count"] == 4
    assert server["departures"]["recent"][0]["reason"].startswith("server went away")
    assert server["not_answering"] == (
        f"the server is not answering: connections refused for {at - 92.0:.0f}s; it went away"
        " or restarted 4 times in the last 10 min (a crash loop at load? the kubelet restarts"
        " it on its own back-off); sentinel asks no restart"
    )
    _answered(ledger, at + 1.0)  # it answers again: nothing is refused, the count stays
    _, doc = _document(ledger, at + 2.0, state)
    assert doc["server"]["not_answering"] is None
    assert doc["server"]["departures"]["count"] == 4
    assert "crash loop" in doc["server"]["departures"]["summary"]
