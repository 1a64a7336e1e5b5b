"""``sentinel doctor --sentinel URL``: a running sentinel's set-aside kinds and absent server."""

from __future__ import annotations

import argparse
import json
from typing import Any

import httpx

from sentinel.diagnostics.commands import add_doctor_arguments
from sentinel.diagnostics.doctor import DoctorReport, Severity
from sentinel.diagnostics.running import (
    check_canaries,
    check_running,
    check_server,
    fetch_status,
    running_checks,
)

SET_ASIDE = (
    "set aside for this server: 5 canaries in a row inconclusive (only reasoning, cut at"
    " max_tokens)"
)


def _status(**disabled: str) -> dict[str, Any]:
    kinds = ("text", "structured", "multimodal")
    return {
        "canaries": {
            kind: {"enabled": kind not in disabled, "disabled_reason": disabled.get(kind)}
            for kind in kinds
        },
        "server": {
            "epoch": 0,
            "not_answering": None,
            "departures": {"count": 0, "summary": None},
        },
    }


def test_each_set_aside_kind_is_a_warning_with_its_reason() -> None:
    checks = check_canaries(
        _status(structured=SET_ASIDE, multimodal="the model does not take image input")
    )
    assert [(c.area, c.severity) for c in checks] == [("sentinel", Severity.WARN)] * 2
    assert (
        checks[0].summary
        == "multimodal canaries set aside for this server (the path is not watched)"
    )
    assert checks[0].detail == "the model does not take image input"
    assert checks[1].summary.startswith("structured canaries set aside")
    assert checks[1].detail == SET_ASIDE
    assert DoctorReport(tuple(checks)).exit_code == 0  # warnings: the rest is watched


def test_every_kind_running_is_ok_and_a_disabled_text_kind_is_a_problem() -> None:
    fine = check_canaries(_status())
    assert [c.severity for c in fine] == [Severity.OK]
    assert fine[0].detail == "multimodal, structured, text"
    text = check_canaries(_status(text="the model does not take chat input"))
    assert [c.severity for c in text] == [Severity.PROBLEM]
    assert "cannot tell whether the engine generates" in text[0].summary
    assert DoctorReport(tuple(text)).exit_code == 1
    assert [c.severity for c in check_canaries({})] == [Severity.SKIPPED]


def test_a_server_not_answering_or_going_away_is_a_warning() -> None:
    assert check_server(_status()) == []
    away = _status()
    away["server"]["not_answering"] = (
        "the server is not answering: connections refused for 42s; it went away or restarted"
        " 4 times in the last 10 min (a crash loop at load? the kubelet restarts it on its own"
        " back-off); sentinel asks no restart"
    )
    checks = check_server(away)
    assert [(c.severity, c.summary) for c in checks] == [
        (Severity.WARN, "the server is not answering")
    ]
    assert "crash loop" in checks[0].detail
    back = _status()
    back["server"]["departures"] = {
        "count": 1,
        "summary": "it went away or restarted once in the last 10 min",
    }
    assert [c.summary for c in check_server(back)] == [
        "the server went away or restarted once in the last 10 min"
    ]


def test_an_unreachable_sentinel_is_a_problem() -> None:
    checks = check_running(None, "ConnectError: refused", "http://127.0.0.1:8471")
    assert [c.severity for c in checks] == [Severity.PROBLEM]
    assert checks[0].summary == (
        "sentinel /status unreachable at http://127.0.0.1:8471: ConnectError: refused"
    )


async def test_status_is_read_once_and_checked() -> None:
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(str(request.url))
        return httpx.Response(200, content=json.dumps(_status(structured=SET_ASIDE)))

    checks = await running_checks("http://sentinel:8471/", transport=httpx.MockTransport(handler))
    assert asked == ["http://sentinel:8471/status"]
    assert [(c.severity, c.detail) for c in checks] == [(Severity.WARN, SET_ASIDE)]


async def test_a_bad_answer_says_why() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "notjson":
            return httpx.Response(200, content=b"<html>")
        if request.url.host == "list":
            return httpx.Response(200, content=b"[]")
        return httpx.Response(404)

    transport = httpx.MockTransport(handler)
    for host, said in (
        ("notjson", "is not JSON"),
        ("list", "is not a JSON object"),
        ("missing", "HTTP 404 from http://missing/status"),
    ):
        status, error = await fetch_status(f"http://{host}", transport=transport)
        assert status is None
        assert error is not None
        assert said in error, error


def test_the_flag_is_optional_and_bare_means_the_local_sentinel() -> None:
    parser = argparse.ArgumentParser()
    add_doctor_arguments(parser)
    assert parser.parse_args([]).sentinel is None
    assert parser.parse_args(["--sentinel"]).sentinel == "http://127.0.0.1:8471"
    assert parser.parse_args(["--sentinel", "http://pod:9000"]).sentinel == "http://pod:9000"
