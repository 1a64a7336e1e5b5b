"""The loopback tier's file order (tests/durations.py): slowest files first, each file whole."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tests import durations


@dataclass(frozen=True)
class Item:
    nodeid: str


def _ids(items: list[Item]) -> list[str]:
    return [i.nodeid for i in items]


def test_files_are_ordered_longest_first_and_kept_whole_in_their_own_order() -> None:
    items = [
        Item("tests/a.py::one"),
        Item("tests/b.py::one"),
        Item("tests/a.py::two"),
        Item("tests/c.py::one[x]"),
        Item("tests/c.py::one[y]"),
        Item("tests/b.py::two"),
    ]
    ordered = durations.slowest_files_first(
        items, {"tests/a.py": 3, "tests/b.py": 90, "tests/c.py": 20}
    )
    assert _ids(ordered) == [
        "tests/b.py::one",
        "tests/b.py::two",
        "tests/c.py::one[x]",
        "tests/c.py::one[y]",
        "tests/a.py::one",
        "tests/a.py::two",
    ]


def test_a_file_the_table_does_not_know_stands_at_the_median() -> None:
    seconds = {"tests/slow.py": 100.0, "tests/mid.py": 10.0, "tests/fast.py": 1.0}
    items = [
        Item("tests/fast.py::t"),
        Item("tests/new.py::t"),
        Item("tests/slow.py::t"),
        Item("tests/mid.py::t"),
    ]
    # new.py ties with mid.py at the median; ties keep the collection's order.
    assert _ids(durations.slowest_files_first(items, seconds)) == [
        "tests/slow.py::t",
        "tests/new.py::t",
        "tests/mid.py::t",
        "tests/fast.py::t",
    ]


def test_without_a_table_the_collection_order_stands() -> None:
    items = [Item("tests/b.py::t"), Item("tests/a.py::t"), Item("tests/b.py::u")]
    assert _ids(durations.slowest_files_first(items, {})) == [
        "tests/b.py::t",
        "tests/b.py::u",
        "tests/a.py::t",
    ]


def test_junit_reports_are_summed_per_file(tmp_path: Path) -> None:
    report = tmp_path / "r.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.loopback.test_x" name="a" time="1.5"/>'
        '<testcase classname="tests.loopback.test_x" name="b[p]" time="2.0"/>'
        '<testcase classname="tests.loopback.test_y.TestGroup" name="c" time="4.0"/>'
        '<testcase classname="" name="collect" time="9.0"/>'
        "</testsuite></testsuites>",
        encoding="utf-8",
    )
    assert durations.from_junit([report]) == {
        "tests/loopback/test_x.py": 3.5,
        "tests/loopback/test_y.py": 4.0,
    }


def test_the_table_is_read_and_a_missing_or_broken_one_is_empty(tmp_path: Path) -> None:
    table = tmp_path / "durations.json"
    assert durations.load(table) == {}
    table.write_text("not json", encoding="utf-8")
    assert durations.load(table) == {}
    table.write_text(json.dumps({"tests/a.py": 12}), encoding="utf-8")
    assert durations.load(table) == {"tests/a.py": 12.0}
