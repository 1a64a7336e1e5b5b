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
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from chaos.kubelet_state import Event, recovery
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
    for record in records:
        rows.setdefault(record.scenario, {})[record.checker] = record
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
            record.figures = recovery(record.events, record.fault_at)
            if record.served_at is not None:
                record.figures["served"] = record.served_at - record.fault_at
        records.append(record)
    return records


def write(records: Sequence[SupervisedRecord], out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "supervised.json", "markdown": out_dir / "supervised.md"}
    data = [r.as_json() for r in records]
    paths["json"].write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    paths["markdown"].write_text(markdown(records), encoding="utf-8")
    return paths


if __name__ == "__main__":  # python -m chaos.supervised_report supervised.json...: the tables again
    import sys

    print(markdown([r for name in sys.argv[1:] for r in read(Path(name))]))
