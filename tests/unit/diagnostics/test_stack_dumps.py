"""A stack dump runs below sentinel's CPU priority, and is still killed at its timeout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sentinel.diagnostics.stacks import DUMP_NICENESS, _run_niced, dump_concurrency, dump_stacks

# The child waits (busy, with a deadline) until its priority changed, then prints it.
# It starts at its parent's priority (argv[1]): the change may land before or after.
_REPORT_NICENESS = (
    "import os, sys, time\n"
    "start = int(sys.argv[1])\n"
    "deadline = time.monotonic() + 5\n"
    "while os.getpriority(os.PRIO_PROCESS, 0) == start and time.monotonic() < deadline:\n"
    "    pass\n"
    "print(os.getpriority(os.PRIO_PROCESS, 0) - start)\n"
)


def test_the_dump_process_runs_niced() -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    done = _run_niced([sys.executable, "-c", _REPORT_NICENESS, str(base)], timeout_s=10.0)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == min(DUMP_NICENESS, 19 - base) > 0


def test_a_dump_past_its_timeout_is_killed() -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        _run_niced([sys.executable, "-c", "while True: pass"], timeout_s=0.5)


def test_dumps_at_once_follow_the_cpus() -> None:
    assert [dump_concurrency(c) for c in (1, 2, 3, 4, 16, 192)] == [1, 1, 1, 2, 8, 8]


async def test_dumps_waiting_past_the_total_are_recorded_not_lost(tmp_path: Path) -> None:
    slow = tmp_path / "py-spy"
    slow.write_text("#!/bin/sh\nsleep 0.6\necho '[]'\n")
    slow.chmod(0o755)
    dumps = await dump_stacks(
        [101, 102, 103], py_spy=str(slow), timeout_s=5.0, concurrency=1, total_s=1.0
    )
    assert dumps[101].ok, dumps[101]
    assert "timed out" in (dumps[102].error or ""), dumps[102]
    assert dumps[103].error == "not dumped: the capture's time ran out"
