"""The compatibility matrix's table, from reports shaped as ``chaos.vllm_engine.matrix``
writes them. Pure: no vLLM."""

from __future__ import annotations

from typing import Any

from chaos.vllm_engine.matrix import HEADER, SCENARIOS, markdown, rows

REPORT: dict[str, Any] = {
    "release": "0.10.2",
    "server_start_s": 36.3,
    "results": {
        "startup": {"pass": True, "seconds": 0.6},
        "signals": {"pass": True, "signals": {"a": "x", "b": "y"}, "missing": []},
        "priority": {"pass": True, "policy": "priority", "source": "engine command line"},
        "slow_decode": {
            "pass": True,
            "window_s": 60.0,
            "livez_polls": 119,
            "livez_failures": 0,
            "decode_tokens_per_s_per_request": 0.5,
        },
        "engine_hang": {"pass": True, "seconds": 14.2},
        "sigstop": {"pass": False, "seconds": None},
    },
}


def test_one_row_per_release_with_a_cell_per_scenario() -> None:
    (row,) = rows([REPORT])
    assert len(row) == len(HEADER) == len(SCENARIOS) + 2
    assert row[:3] == ["0.10.2", "36.3 s", "pass (0.6 s)"]
    assert row[3] == "pass (2 mapped, missing none)"
    assert row[4] == "pass (priority from engine command line)"
    assert row[5] == "pass (0 of 119 failed, 0.5 tok/s, 60 s)"
    assert row[6:] == ["pass (14.2 s)", "FAIL"]


def test_a_release_that_did_not_start_fails_every_scenario() -> None:
    (row,) = rows([{"release": "0.9.2", "start_error": "boom", "results": {}}])
    assert row[1] == "FAIL (start)"
    assert set(row[2:]) == {"-"}


def test_markdown_carries_the_table() -> None:
    text = markdown([REPORT])
    assert "| release | vLLM start | startup |" in text
    assert "| 0.10.2 | 36.3 s | pass (0.6 s) |" in text
