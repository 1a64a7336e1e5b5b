"""The report of supervised chaos runs: detect and recover per scenario, beside the baselines.

One row per scenario, one column per checker (the thing the kubelet's
liveness followed). A cell reads ``detect -> recover (restarts)``: seconds
from the fault to the first failed liveness probe (``crash`` where the server
exited by itself; the kill itself where no probe runs it: the blackbox alert;
``-`` where nothing was seen) and to the restarted server
ready, then the restarts counted. ``never`` is a hang not recovered within
the limit; a restart of a working server, or a second one after a fault, is
a false restart and marked ``FALSE``. Written as ``supervised.json`` and
``supervised.md`` beside the chaos report.

With several runs per checker (``--runs``) the report leads with the median
and the spread (min-max) of each figure per scenario and checker, the
checker's share of the recovery (from the restarted server answering to ready:
:mod:`chaos.answers`) as its own column; ``--docs FILE`` writes those tables
into a marked section of the docs page (:func:`write_docs`), with the commit
and the command that measured them, so no figure is copied by hand.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
from collections.abc import Sequence
from pathlib import Path

from chaos import answers
from chaos.kubelet_state import Event
from chaos.supervised import CHECKERS, SupervisedRecord

TITLES = {
    "sentinel": "sentinel",
    "vllm_health": "vLLM /health",
    "naive": "naive canary",
    "blackbox": "blackbox_exporter",
}


def cell(record: SupervisedRecord) -> str:
    if record.error is not None:
        first = record.error.split(":", 1)[0]
        return "not run" if "not run" in record.error else f"error ({first})"
    figures = record.figures
    false = f", {record.false_restarts} FALSE" if record.false_restarts else ""
    if not record.harmful:
        return f"{record.restarts} restarts{false}"
    after = [e for e in record.events if e.at >= (record.fault_at or 0)]
    crashed = any(e.kind == "exit" and not e.probe for e in after)
    if "detect" in figures:
        detect = _s(figures["detect"])
    elif crashed:
        detect = "crash"
    else:  # killed with no liveness probe failing: an alert's kill (blackbox)
        detect = _s(figures.get("kill"))
    recover = _s(figures.get("recover")) if "recover" in figures else "never"
    served = "" if record.served_at is not None or recover == "never" else ", not serving"
    return f"{detect} -> {recover} ({record.restarts}{false}{served})"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def markdown(records: Sequence[SupervisedRecord]) -> str:
    checkers = [c for c in CHECKERS if any(r.checker == c for r in records)]
    lines = [
        "## Under the harness's kubelet: detect and recover",
        "",
        "Seconds from the fault: first failed liveness probe -> the restarted server ready "
        "(restarts). The kubelet runs the shipped manifest's probes on the scenario's time "
        "scale and really kills and restarts the server (with its model load); the column "
        "says what its liveness followed. A restart of a working server, or a second one "
        "after a fault, is FALSE.",
        "",
        "| scenario | target | fault | " + " | ".join(TITLES[c] for c in checkers) + " |",
        "|---|---|---|" + "---|" * len(checkers),
    ]
    rows: dict[str, dict[str, SupervisedRecord]] = {}
    several = any(r.run > 0 for r in records)
    for record in records:
        name = f"{record.scenario} #{record.run + 1}" if several else record.scenario
        rows.setdefault(name, {})[record.checker] = record
    for name, by_checker in rows.items():
        first = next(iter(by_checker.values()))
        cells = [cell(by_checker[c]) if c in by_checker else "" for c in checkers]
        lines.append(f"| {name} | {first.target} | {first.fault} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def read(path: Path) -> list[SupervisedRecord]:
    """The records of a ``supervised.json`` (to render a report again)."""
    records = []
    for data in json.loads(path.read_text(encoding="utf-8")):
        for derived in ("restarts", "false_restarts", "passed"):
            data.pop(derived, None)
        data["events"] = [Event(**e) for e in data["events"]]
        record = SupervisedRecord(**data)
        if record.fault_at is not None:  # the figures as this version reads the timeline
            record.figures = answers.figures(
                record.events, record.fault_at, record.fault_container, record.served_at
            )
        records.append(record)
    return records


def write(records: Sequence[SupervisedRecord], out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "supervised.json", "markdown": out_dir / "supervised.md"}
    data = [r.as_json() for r in records]
    paths["json"].write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    several = any(r.run > 0 for r in records)
    text = (runs_markdown(records) + "\n" if several else "") + markdown(records)
    paths["markdown"].write_text(text, encoding="utf-8")
    return paths


#: the columns of the runs table: (title, figure); ``share`` is answers -> ready
COLUMNS = (
    ("detect", "detect"),
    ("kill", "kill"),
    ("answers", "answers"),
    ("ready", "recover"),
    ("serving", "served"),
    ("share: answers -> ready", "share"),
)


def spread(values: Sequence[float], runs: int) -> str:
    """``20.0 (19.0-21.5)``: the median and the range (where there is one); ``, 1 of 3
    missing`` where runs lacked the figure."""
    if not values:
        return "-"
    said = f"{statistics.median(values):.1f}"
    if min(values) != max(values):
        said += f" ({min(values):.1f}-{max(values):.1f})"
    if len(values) < runs:
        said += f", {runs - len(values)} of {runs} missing"
    return said


def _figure(record: SupervisedRecord, name: str) -> float | None:
    if name == "share":
        return answers.share(record.figures)
    return record.figures.get(name)


def runs_markdown(records: Sequence[SupervisedRecord]) -> str:
    """Per scenario and checker: the median (min-max) of each figure over its runs."""
    titles = " | ".join(title for title, _ in COLUMNS)
    lines = [
        "## Runs per checker: median (min-max), seconds from the fault",
        "",
        "*answers*: the restarted server first answered `/health`; *share*: from then to the "
        "kubelet counting it ready, the checker's own part of the recovery; *serving*: a real "
        "chat request answered. A run that failed (a false restart, not recovered) is counted "
        "in *passed*.",
        "",
        f"| scenario | checker | passed | {titles} | restarts |",
        "|---|---|---|" + "---|" * len(COLUMNS) + "---|",
    ]
    groups: dict[tuple[str, str], list[SupervisedRecord]] = {}
    for record in records:
        groups.setdefault((record.scenario, record.checker), []).append(record)
    order = {c: i for i, c in enumerate(CHECKERS)}
    for scenario in dict.fromkeys(r.scenario for r in records):
        for checker in sorted({c for s, c in groups if s == scenario}, key=order.__getitem__):
            runs = groups[(scenario, checker)]
            cells = []
            for _, name in COLUMNS:
                values = [v for r in runs if (v := _figure(r, name)) is not None]
                cells.append(spread(values, len(runs)))
            passed = f"{sum(r.passed for r in runs)}/{len(runs)}"
            restarts = ", ".join(str(r.restarts) for r in runs)
            row = [scenario, TITLES[checker], passed, *cells, restarts]
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def commit() -> str:
    """The commit measured (``+ local changes`` where the tree differs from it)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" + local changes" if dirty else "")


def write_docs(
    records: Sequence[SupervisedRecord],
    page: Path,
    section: str,
    how: str,
    note: str = "",
    *,
    measured: str | None = None,
) -> None:
    """Replace the page's ``section`` (between its markers; appended if absent) with the tables.

    ``measured``: the commit measured, taken when the runs began (default: now).
    """
    begin, end = f"<!-- supervised:{section} -->", f"<!-- /supervised:{section} -->"
    said = f"Written by `{how}` at commit {measured or commit()}."
    said += f" {note}" if note else ""
    body = "\n".join([begin, said, "", runs_markdown(records), markdown(records) + end])
    text = page.read_text(encoding="utf-8") if page.exists() else ""
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: body, text)
    else:
        text = text.rstrip("\n") + "\n\n" + body + "\n"
    page.write_text(text, encoding="utf-8")


if __name__ == "__main__":  # python -m chaos.supervised_report supervised.json...: the tables again
    import sys

    print(markdown([r for name in sys.argv[1:] for r in read(Path(name))]))
