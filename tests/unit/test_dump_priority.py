"""A stack dump runs below sentinel's CPU priority, and is still killed at its timeout."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sentinel.diagnostics.stacks import DUMP_NICENESS, _run_niced

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
