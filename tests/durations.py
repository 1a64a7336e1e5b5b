"""The order the loopback tier hands its files to xdist's workers: the slowest first.

``make test`` runs the tier with ``-n 2 --dist loadfile``: a worker takes the
next whole file as it finishes one, and the tier ends when the worker holding
the last long file does. xdist orders files by their count of tests, which puts
the slowest files (a 90 s stall held in two tests, the supervised restart loop
in one) at the very end, one worker running them while the other sits idle.
Longest first, the end of the run is all short files and the workers finish
within a few seconds of each other.

The seconds come from ``tests/durations.json`` (each file run alone on two
cores); a file it does not list is placed as a file of the median time. A stale
table only changes the order, never what runs. Regenerate it from JUnit reports
of the files run one at a time::

    python -m pytest -p no:cacheprovider --junitxml=/tmp/t.xml tests/loopback/test_x.py
    python -m tests.durations /tmp/*.xml
"""

from __future__ import annotations

import json
import statistics
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, TypeVar

TABLE = Path(__file__).with_name("durations.json")


class _Item(Protocol):
    @property
    def nodeid(self) -> str: ...


T = TypeVar("T", bound=_Item)


def load(table: Path = TABLE) -> dict[str, float]:
    """File path (from the repository root) to its seconds; empty when there is no table."""
    try:
        raw = json.loads(table.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in raw.items()} if isinstance(raw, dict) else {}


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def slowest_files_first(items: Sequence[T], seconds: dict[str, float]) -> list[T]:
    """``items`` with whole files ordered longest first; a file's own order is kept."""
    default = statistics.median(seconds.values()) if seconds else 0.0
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(_file(item.nodeid), len(first_seen))

    def key(item: T) -> tuple[float, int]:
        path = _file(item.nodeid)
        return (-seconds.get(path, default), first_seen[path])

    return sorted(items, key=key)  # stable: the order inside a file is unchanged


def from_junit(reports: Sequence[Path]) -> dict[str, float]:
    """Seconds per test file summed over JUnit reports, as ``pytest --junitxml`` writes them."""
    totals: dict[str, float] = {}
    for report in reports:
        for case in ET.parse(report).iter("testcase"):
            module = case.get("classname", "")
            if not module:
                continue
            parts = module.split(".")
            # "tests.loopback.test_x" or "tests.loopback.test_x.TestClass"
            while parts and not parts[-1].startswith("test_"):
                parts.pop()
            if not parts:
                continue
            path = "/".join(parts) + ".py"
            totals[path] = totals.get(path, 0.0) + float(case.get("time", "0") or 0.0)
    return {path: round(totals[path], 1) for path in sorted(totals)}


def main(argv: Sequence[str]) -> int:
    if not argv:
        print("usage: python -m tests.durations REPORT.xml [...]", file=sys.stderr)
        return 2
    table = {**load(), **from_junit([Path(a) for a in argv])}
    TABLE.write_text(json.dumps(dict(sorted(table.items())), indent=1) + "\n", encoding="utf-8")
    print(f"{len(table)} files in {TABLE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
