"""The radar's known-surface table (chaos/vllm_radar/known.py) and sentinel's code, in step.

Both directions: every route, body, sample, title and flag the code matches is
in the table, and every table entry the code is said to read is still in the
code. Routes and flags are found by scanning the string literals of the
modules that talk to the server (the evidence and canary packages, the
watchdog reader and the auto-sleep flags reader), so a new poll or flag
anywhere there fails here until the table names it; bodies, samples and
titles are the code's own constants.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from chaos.vllm_radar.known import KNOWN, of_kind
from sentinel.canary.refusal import ENGINE_DEAD_MESSAGES, KNOWN_REFUSALS
from sentinel.evidence import metrics, vllm_releases
from sentinel.evidence.process_model import ProcessPatterns
from sentinel.evidence.vllm_health import SCALING_MARK

ROOT = Path(__file__).resolve().parents[3]
TABLE = "chaos/vllm_radar/known.py"
OBSERVERS = (
    *sorted((ROOT / "sentinel/evidence").glob("*.py")),
    *sorted((ROOT / "sentinel/canary").glob("*.py")),
    ROOT / "sentinel/diagnostics/watchdog.py",
    ROOT / "sentinel/auto_sleep/sleep_flags.py",
)
ROUTE = re.compile(r"/[a-z][a-z0-9_/]*[a-z]")
FLAG = re.compile(r"--[a-z][a-z0-9.-]*[a-z]")
# Pieces of /proc/<pid>/... paths joined in code: files, not HTTP routes.
NOT_ROUTES = frozenset({"/children", "/environ", "/fd", "/proc", "/sys"})


def _literals() -> Iterator[tuple[str, str]]:
    for path in OBSERVERS:
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                yield str(path.relative_to(ROOT)), node.value


def _code_routes() -> dict[str, str]:
    return {
        text: where
        for where, text in _literals()
        if ROUTE.fullmatch(text) and text not in NOT_ROUTES and not text.startswith("/proc/")
    }


def _code_flags() -> dict[str, str]:
    # Flags the engine tier passes to a CPU server are sentinel's arguments, not reads.
    passed = {f for r in vllm_releases.RELEASES for f in r.server_flags}
    return {
        text: where for where, text in _literals() if FLAG.fullmatch(text) and text not in passed
    }


def _keys(kind: str, read_only: bool = False) -> set[str]:
    return {k.key for k in of_kind(kind) if k.read or not read_only}


def _missing(what: str, names: set[str] | dict[str, str], side: str) -> str:
    shown = ", ".join(
        f"{n!r} ({names[n]})" if isinstance(names, dict) else repr(n) for n in sorted(names)
    )
    return f"{what} {side}: {shown}; update {TABLE}"


def test_every_route_the_code_asks_is_in_the_table() -> None:
    table = {k.split(" ", 1)[1] for k in _keys("route")}
    code = _code_routes()
    extra = {path: where for path, where in code.items() if path not in table}
    assert not extra, _missing("routes read by the code but not in the table", extra, "")


def test_every_route_the_table_says_is_read_is_in_the_code() -> None:
    code = _code_routes()
    stale = {k for k in _keys("route", read_only=True) if k.split(" ", 1)[1] not in code}
    assert not stale, _missing("table routes marked read that no code asks", stale, "")


def test_bodies_match_the_refusal_vocabulary() -> None:
    code = {prefix for prefix, _ in KNOWN_REFUSALS} | set(ENGINE_DEAD_MESSAGES)
    code.add(SCALING_MARK.decode())
    table = _keys("body")
    assert code - table == set(), _missing(
        "bodies recognised but not in the table", code - table, ""
    )
    assert table - code == set(), _missing("table bodies no code recognises", table - code, "")


def test_samples_match_what_the_metrics_reader_keeps() -> None:
    code = set(metrics._WANTED)
    for release in vllm_releases.RELEASES:
        code |= set(release.signals.values()) | release.markers | release.absent
    table = _keys("metric")
    assert code - table == set(), _missing("samples read but not in the table", code - table, "")
    assert table - code == set(), _missing("table samples no code reads", table - code, "")


def test_titles_match_the_process_patterns() -> None:
    patterns = ProcessPatterns()
    code = {*patterns.engine, *patterns.worker, *patterns.coordinator, *patterns.api_process}
    for release in vllm_releases.RELEASES:
        code |= {t for t in (release.engine_title, release.worker_title) if t}
    table = _keys("title")
    assert code - table == set(), _missing("titles matched but not in the table", code - table, "")
    assert table - code == set(), _missing("table titles no code matches", table - code, "")


def test_flags_match_the_command_line_readers() -> None:
    code = _code_flags()
    table = _keys("flag")
    extra = {f: w for f, w in code.items() if f not in table}
    assert not extra, _missing("flags read but not in the table", extra, "")
    stale = _keys("flag", read_only=True) - set(code)
    assert not stale, _missing("table flags no code reads", stale, "")


def test_config_fields_are_read_by_name() -> None:
    literals = {text for _, text in _literals()}
    stale = {k for k in _keys("field") if k.split(".", 1)[1] not in literals}
    assert not stale, _missing("table fields whose key no code reads", stale, "")


def test_entries_are_keyed_as_the_radar_keys_a_release() -> None:
    for known in KNOWN:
        if known.kind == "route":
            method, path = known.key.split(" ", 1)
            assert method in {"GET", "POST"}, known
            assert path.startswith("/"), known
        elif known.kind == "title":
            assert known.key.startswith("VLLM::"), known
        elif known.kind == "flag":
            assert known.key.startswith("--"), known
        elif known.kind == "metric":
            assert known.key.startswith("vllm:"), known
    keys = [(k.kind, k.key) for k in KNOWN]
    assert len(keys) == len(set(keys)), "an entry is in the table twice"
