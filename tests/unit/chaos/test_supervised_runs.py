"""Several supervised runs per checker: medians, spreads, the checker's share, the docs section."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos import answers
from chaos.kubelet_state import Event
from chaos.supervised import SupervisedRecord, fault_time
from chaos.supervised_report import runs_markdown, spread, write, write_docs


def _run(checker: str, run: int, answers_at: float, ready_at: float) -> SupervisedRecord:
    """An engine hang at 10 s: detected at 14, killed at 17, back at ``answers_at``."""
    events = [
        Event(0.0, "start", 0),
        Event(5.0, "ready", 0, "readiness"),
        Event(14.0, "probe_failure", 0, "liveness", "503"),
        Event(17.0, "kill", 0, "liveness"),
        Event(18.0, "restart", 1),
        Event(18.0, "start", 1),
        Event(answers_at, answers.ANSWERS, 1),
        Event(ready_at, "ready", 1, "readiness"),
    ]
    record = SupervisedRecord("sim-engine-hang", checker, "sim", "engine_hang", True, run=run)
    record.fault_at, record.fault_container, record.events = 10.0, 0, events
    record.served_at = ready_at + 0.5
    record.figures = answers.figures(events, 10.0, 0, record.served_at)
    return record


def test_the_checkers_share_is_from_the_server_answering_to_ready() -> None:
    record = _run("sentinel", 0, answers_at=26.0, ready_at=28.5)
    assert record.figures["answers"] == 16.0
    assert record.figures["recover"] == 18.5
    assert answers.share(record.figures) == 2.5
    # An answer of the hung container itself (before its kill) is not the comeback.
    early = [Event(12.0, answers.ANSWERS, 0), *record.events]
    assert answers.answered(early, 0, 10.0) == 16.0
    assert answers.share({"recover": 18.5}) is None


def test_spread_is_the_median_and_the_range_and_says_what_is_missing() -> None:
    assert spread([3.0, 1.0, 2.0], 3) == "2.0 (1.0-3.0)"
    assert spread([4.0], 1) == "4.0"
    assert spread([1.0, 2.0], 3) == "1.5 (1.0-2.0), 1 of 3 missing"
    assert spread([], 3) == "-"


def test_the_runs_table_gives_each_checker_its_medians() -> None:
    records = [
        _run("sentinel", i, answers_at=26.0 + i, ready_at=27.0 + 2 * i) for i in range(3)
    ] + [_run("naive", i, answers_at=26.0, ready_at=30.0 + i) for i in range(3)]
    table = runs_markdown(records)
    rows = {line.split(" | ")[1]: line for line in table.splitlines() if "sim-engine-hang" in line}
    # detect 4, kill 7, answers 16-18, ready 17-21, serving, share 1-3; three runs passed.
    assert rows["sentinel"] == (
        "| sim-engine-hang | sentinel | 3/3 | 4.0 | 7.0 | 17.0 (16.0-18.0) | 19.0 (17.0-21.0) "
        "| 19.5 (17.5-21.5) | 2.0 (1.0-3.0) | 1, 1, 1 |"
    )
    assert "| naive canary | 3/3 |" in rows["naive canary"]
    assert "5.0 (4.0-6.0) | 1, 1, 1 |" in rows["naive canary"]  # its share: 4-6 s


def test_the_docs_section_is_replaced_in_place_and_the_rest_kept(tmp_path: Path) -> None:
    page = tmp_path / "supervised.md"
    page.write_text("# Title\n\nprose before\n", encoding="utf-8")
    first = [_run("sentinel", i, 26.0, 28.0) for i in range(2)]
    write_docs(first, page, "sim", "python -m chaos supervise x", note="Pessimistic.")
    write_docs(first, page, "other", "python -m chaos supervise y")
    again = [_run("sentinel", i, 26.0, 30.0) for i in range(2)]
    write_docs(again, page, "sim", "python -m chaos supervise x", measured="abc1234")
    text = page.read_text(encoding="utf-8")
    assert "at commit abc1234." in text  # the commit the runs began at, not the one at the end
    assert text.startswith("# Title\n\nprose before\n")
    assert text.count("<!-- supervised:sim -->") == 1
    assert text.count("<!-- supervised:other -->") == 1
    assert "Pessimistic." not in text  # the section rewritten whole
    sim = text.split("<!-- supervised:sim -->")[1].split("<!-- /supervised:sim -->")[0]
    assert "| 20.0 |" in sim  # ready at 30 s: the new figures
    assert "| 18.0 |" not in sim


def test_a_report_of_several_runs_leads_with_the_medians(tmp_path: Path) -> None:
    paths = write([_run("sentinel", i, 26.0, 28.0) for i in range(2)], tmp_path)
    text = paths["markdown"].read_text(encoding="utf-8")
    assert text.startswith("## Runs per checker: median (min-max)")
    assert "| sim-engine-hang #2 |" in text


def test_each_run_puts_its_fault_at_the_same_place_in_the_liveness_period() -> None:
    # Probes tick at 100, 105, 110, ...; the fault may not come before 112.
    assert fault_time(112.0, 100.0, 5.0, 0.5) == pytest.approx(112.5)
    assert fault_time(113.0, 100.0, 5.0, 0.5) == pytest.approx(117.5)
    # Run 0 of 3 at 1/6 of a period past a tick, run 2 at 5/6: whatever the checker's ready time.
    for earliest in (112.0, 112.9, 114.99):
        first = fault_time(earliest, 100.0, 5.0, 1 / 6)
        last = fault_time(earliest, 100.0, 5.0, 5 / 6)
        assert (first - 100.0) % 5.0 == pytest.approx(5 / 6)
        assert (last - 100.0) % 5.0 == pytest.approx(25 / 6)
        assert earliest <= first < earliest + 5.0
        assert earliest <= last < earliest + 5.0
