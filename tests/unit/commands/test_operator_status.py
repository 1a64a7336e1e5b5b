"""The pure parts of an operator's /status: its order, its dates, the index, the words for
an unreachable target, the bounded warning, the startup answer and ``sentinel status``.
"""

from __future__ import annotations

import argparse
import io
from dataclasses import replace
from typing import Any

import pytest
from aiohttp import web
from structlog.testing import capture_logs

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.cli_flags import DEFAULT_SENTINEL
from sentinel.commands.status import (
    UNREACHABLE,
    default_url,
    live,
    normalise,
    render,
    status_main,
    summary_rows,
)
from sentinel.evaluation.health import initial_snapshot
from sentinel.record.ledger import Ledger
from sentinel.record.observers import Observations
from sentinel.record.reachability import (
    NO_ROUTE,
    NOT_RESOLVED,
    REFUSED,
    TIMEOUT,
    WARN_EVERY_S,
    Reachability,
    unreachable_words,
)
from sentinel.serve.status_view import dated, index_json, iso_utc, status_json
from sentinel.verdict import Action, Evidence, KindEvidence, Policy, ProbeAnswer, VerdictState
from sentinel.verdict.decide import evaluate

TEXT = CanaryKind.TEXT
WALL = 1_800_000_000.0  # 2027-01-15T08:00:00Z
NOW = 1000.0


def _snapshot(**status: Any) -> Any:
    return replace(
        initial_snapshot(),
        liveness=ProbeAnswer(False, "engine hang confirmed", since=990.0),
        readiness=ProbeAnswer(False, "liveness fails", since=990.0),
        startup=ProbeAnswer(True, "every canary kind succeeded", since=0.0),
        status={
            "version": "9.9.9",
            "target": "http://vllm:8000",
            "model": "tiny",
            "verdict": {"hangs": status.pop("hangs", [])},
            "lifecycle": status.pop("lifecycle", {"phase": "awake", "since": None}),
            "config": {"listen": "0.0.0.0:8471", "hang_window": 15.0},
            **status,
        },
        version=7,
    )


def test_the_summary_comes_first_and_the_configuration_last() -> None:
    doc = status_json(_snapshot(), now=NOW, wall_now=WALL, maintenance=lambda: None)
    keys = list(doc)
    assert keys[0] == "summary"
    assert keys[-1] == "config"
    assert keys.index("maintenance") < keys.index("config")
    assert doc["config"] == {"listen": "0.0.0.0:8471", "hang_window": 15.0}
    assert doc["version"] == "9.9.9"  # the release, not the change counter
    assert doc["revision"] == 7
    assert list(doc["summary"])[:4] == ["at", "target", "model", "enforce"]


def test_every_since_is_an_age_and_a_wall_clock_time() -> None:
    doc = status_json(_snapshot(), now=NOW, wall_now=WALL, started=900.0)
    live = doc["summary"]["liveness"]
    assert live == {
        "ok": False,
        "reason": "engine hang confirmed",
        "since": "2027-01-15T07:59:50.000Z",
        "age": 10.0,
    }
    # Never flipped (the verdict's initial 0.0): since sentinel started, not since boot.
    assert doc["summary"]["startup"]["age"] == 100.0
    assert doc["liveness"]["since"] == 990.0  # the monotonic key its readers know stays
    assert doc["liveness"]["since_utc"] == "2027-01-15T07:59:50.000Z"
    assert doc["summary"]["at"] == iso_utc(WALL) == "2027-01-15T08:00:00.000Z"
    assert dated(None, now=NOW, wall_now=WALL) == {"since": None, "age": None}


def test_the_summary_names_the_hang_the_stall_and_an_unreachable_target() -> None:
    hangs = [
        {"kind": "engine", "action": "restart", "reason": "engine hang for 16s", "since": 984.0},
        {"kind": "partial", "action": "restart", "reason": "engine 1", "since": 990.0},
    ]
    lifecycle = {"phase": "asleep", "why": "/is_sleeping true", "since": 700.0}
    sections = {"reachability": {"unreachable": None, "for": None}}
    summary = status_json(
        _snapshot(hangs=hangs, lifecycle=lifecycle, sections=sections), now=NOW, wall_now=WALL
    )["summary"]
    assert summary["hang"]["kind"] == "engine"
    assert summary["hang"]["age"] == 16.0
    assert summary["hang"]["more"] == 1
    assert summary["stall"] == {
        "phase": "asleep",
        "reason": "/is_sleeping true",
        "since": "2027-01-15T07:55:00.000Z",
        "age": 300.0,
    }
    assert summary["unreachable"] is None
    away = {"reachability": {"unreachable": "connection refused", "for": 12.0}}
    summary = status_json(_snapshot(sections=away), now=NOW, wall_now=WALL)["summary"]
    assert (summary["unreachable"], summary["unreachable_for"]) == ("connection refused", 12.0)


def test_the_index_lists_each_path_once_with_its_methods_and_a_line() -> None:
    async def handler(_request: web.Request) -> web.Response:
        """The toy route's own line."""
        return web.Response()

    app = web.Application()
    app.add_routes([web.get("/", handler), web.get("/livez", handler)])
    app.add_routes([web.get("/toy", handler), web.post("/toy", handler)])
    index = index_json(app.router.routes())
    endpoints = {e["path"]: e for e in index["endpoints"]}
    assert list(endpoints) == ["/", "/livez", "/toy"]
    assert endpoints["/toy"] == {
        "path": "/toy",
        "methods": ["GET", "POST"],
        "description": "The toy route's own line.",
    }
    assert endpoints["/livez"]["description"].startswith("liveness")


def _ledger() -> Ledger:
    return Ledger([(TEXT, Action.RESTART, None)], 0.0)


def _result(reason: Reason, detail: str, started: float = 1.0) -> CanaryResult:
    return CanaryResult("text", TEXT, reason, started, 0.1, detail)


@pytest.mark.parametrize(
    ("health_error", "refused", "words"),
    [
        ("connect: ConnectError: All connection attempts failed", True, REFUSED),
        ("connect: ConnectError: [Errno -2] Name or service not known", True, NOT_RESOLVED),
        ("connect: ConnectError: [Errno 113] No route to host", True, NO_ROUTE),
        ("timeout: GET http://vllm:8000/health not complete within 2s", False, TIMEOUT),
        ("", True, REFUSED),  # only the refusal seen (model resolution): still the truth
        ("", False, ""),  # nothing known yet
        ("http_status (HTTP 503): not ready", True, ""),  # /health answered: it listens
    ],
)
def test_words_for_a_target_nothing_answers_from_the_health_poll(
    health_error: str, refused: bool, words: str
) -> None:
    ledger = _ledger()
    if refused:
        ledger.saw_refusal(1.0)
    assert unreachable_words(ledger, health_error) == words


def test_words_prefer_the_newest_canary_and_vanish_once_the_target_answers() -> None:
    ledger = _ledger()
    ledger.saw_refusal(1.0)
    record = ledger.records[TEXT]
    record.results.append(
        _result(
            Reason.CONNECT,
            "unreachable before a response: [Errno -3] Temporary failure in name resolution",
        )
    )
    assert unreachable_words(ledger, "connect: All connection attempts failed") == NOT_RESOLVED
    record.results.append(_result(Reason.TIMEOUT, "timeout before a response", started=2.0))
    assert unreachable_words(ledger, "") == TIMEOUT
    record.results.append(_result(Reason.HTTP_STATUS, "HTTP 503", started=3.0))
    assert unreachable_words(ledger, "") == ""  # something listened and answered
    ledger.saw_answer()
    assert unreachable_words(ledger, "connect: refused") == ""


def test_the_unreachable_warning_repeats_once_a_minute_and_ends_when_it_answers() -> None:
    ledger, seen = _ledger(), Observations()
    ledger.saw_refusal(0.0)
    seen.last_health_error = "connect: ConnectError: All connection attempts failed"
    provider = Reachability(ledger, seen, "http://vllm:8000")
    with capture_logs() as logs:
        for now in (0.0, 1.0, 30.0, WARN_EVERY_S - 0.1, WARN_EVERY_S, WARN_EVERY_S + 5):
            provider.section(now)
            provider.warn(now)
        ledger.saw_answer()
        seen.last_health_error = ""
        provider.section(200.0)
        provider.warn(200.0)
        provider.warn(201.0)
    events = [(e["event"], e.get("for_s")) for e in logs]
    assert events == [
        ("target_unreachable", 0.0),
        ("target_unreachable", WARN_EVERY_S),
        ("target_reachable", None),
    ]
    assert logs[0]["why"] == REFUSED
    assert logs[0]["log_level"] == "warning"
    assert provider.status("", 200.0) == {"unreachable": None, "for": None}


def test_startup_says_the_target_is_unreachable_when_its_section_says_so() -> None:
    kinds = {TEXT: KindEvidence(TEXT, Action.RESTART)}
    plain = Evidence(kinds=kinds)
    _, verdict = evaluate(VerdictState(), plain, Policy(), 5.0)
    assert verdict.startup.reason == "waiting for canary kinds: text"
    away = replace(plain, sections={"reachability": "connection refused"})
    _, verdict = evaluate(VerdictState(), away, Policy(), 5.0)
    assert verdict.startup.ok is False
    assert verdict.startup.reason == (
        "target unreachable: connection refused; waiting for canary kinds: text"
    )


def _document(live_ok: bool, **summary: Any) -> dict[str, Any]:
    answer = {"ok": live_ok, "reason": "r", "since": "2027-01-15T07:59:50.000Z", "age": 10.0}
    return {
        "version": "0.1.0",
        "summary": {
            "target": "http://vllm:8000",
            "liveness": answer,
            "readiness": answer,
            "startup": answer,
            **summary,
        },
    }


def test_the_command_exits_on_liveness_and_renders_the_summary() -> None:
    hang = {"kind": "engine", "action": "restart", "reason": "stuck", "age": 16.0, "more": 0}
    document = _document(False, hang=hang, unreachable="connection refused")
    assert live(document) is False
    assert live(_document(True)) is True
    assert live({"liveness": {"status": "ok"}}) is True  # a sidecar without the summary
    rows = summary_rows(document)
    assert [r[0] for r in rows] == ["liveness", "readiness", "startup", "hang", "target"]
    assert rows[0] == ("liveness", "FAIL", "r", "10s ago (2027-01-15T07:59:50.000Z)")
    assert rows[3][1] == "engine (restart)"
    assert rows[4] == ("target", "unreachable", "connection refused", "")  # for: not told
    out = io.StringIO()
    render(document, out)
    assert "connection refused" in out.getvalue()
    assert "http://vllm:8000" in out.getvalue()


def test_the_command_defaults_to_the_listen_port_and_takes_host_port() -> None:
    assert default_url() == "http://127.0.0.1:8471" == DEFAULT_SENTINEL
    assert normalise("10.0.0.5:8471") == "http://10.0.0.5:8471"
    assert normalise("http://pod:8471/status") == "http://pod:8471"


def test_an_unreachable_sidecar_exits_2_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(sentinel="127.0.0.1:1", url=None, output="text", timeout=1.0)
    assert status_main(args) == UNREACHABLE == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("sentinel status: no sidecar answering at http://127.0.0.1:1")
