"""Python stacks of vLLM processes, taken with py-spy: the only module that runs py-spy.

Each dump is ``py-spy dump --pid N --nonblocking --json``, a subprocess
under its own time limit, started and awaited from a small thread pool of its
own (all pids concurrently, bounded), so one wedged target cannot hold up the
others and the event loop never waits on a fork or an exec. ``--nonblocking``
reads the target's memory without pausing it: a dump never stops a process,
never makes it look stopped, and works on one that is already stopped.

The JSON is rendered back into py-spy's familiar text layout and kept whole;
nothing is inferred from frame names here. A dump that fails (no py-spy,
permission denied, not a Python process, time limit) is recorded with the
reason.

Permissions: py-spy reads another process's memory, which needs ptrace access
(``CAP_SYS_PTRACE``, or the same uid and a permissive Yama ``ptrace_scope``).
See the package docstring of :mod:`sentinel.diagnostics` for the image setup.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_DUMP_TIMEOUT_S = 4.0
DEFAULT_CONCURRENCY = 8
MIN_DUMP_S = 0.2  # a dump given less than this is not started


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def dump_concurrency(cpus: int | None = None) -> int:
    """Dumps run at once: half the usable CPUs, one on a node of one or two, at most 8.

    Each py-spy parses the target's interpreter binary, a burst of CPU; several
    at once on a small node leave no core for sentinel's probe answers.
    """
    return max(1, min(DEFAULT_CONCURRENCY, (usable_cpus() if cpus is None else cpus) // 2))


# Added to a dump's nice value: py-spy yields the CPU to sentinel's probe answers.
DUMP_NICENESS = 10
MAX_OUTPUT_BYTES = 2_000_000  # a process with thousands of threads still fits in a bundle


@dataclass(frozen=True, slots=True)
class StackDump:
    """The stacks of one process, or why there are none."""

    pid: int
    ok: bool
    text: str  # py-spy's layout: "Thread N (active|idle): name" then one frame per line
    threads: list[dict[str, Any]] | None  # py-spy's JSON, when it parsed
    error: str | None
    duration_s: float


def find_py_spy() -> str | None:
    """py-spy on PATH, else beside this interpreter (a virtual environment's bin/)."""
    found = shutil.which("py-spy")
    if found:
        return found
    candidate = Path(sys.executable).parent / "py-spy"
    return str(candidate) if candidate.exists() and os.access(candidate, os.X_OK) else None


async def dump_stacks(
    pids: Sequence[int],
    *,
    py_spy: str | None = None,
    timeout_s: float = DEFAULT_DUMP_TIMEOUT_S,
    concurrency: int | None = None,
    native: bool = False,
    total_s: float | None = None,
) -> dict[int, StackDump]:
    """Dump every pid, ``concurrency`` at a time; each dump has its own time limit, none raises.

    ``total_s`` bounds them all: a dump that would start with less than
    ``MIN_DUMP_S`` of it left is recorded as not taken, and one that starts
    gets only what is left, so waiting dumps never take the taken ones down.
    """
    exe = py_spy or find_py_spy()
    if exe is None:
        return {
            pid: StackDump(pid, False, "", None, "py-spy is not installed", 0.0) for pid in pids
        }
    limit = asyncio.Semaphore(max(dump_concurrency() if concurrency is None else concurrency, 1))

    ends = None if total_s is None else time.monotonic() + total_s

    async def one(pid: int) -> StackDump:
        async with limit:
            left = timeout_s if ends is None else min(timeout_s, ends - time.monotonic())
            if left < MIN_DUMP_S:
                return StackDump(
                    pid, False, "", None, "not dumped: the capture's time ran out", 0.0
                )
            return await dump_one(pid, py_spy=exe, timeout_s=left, native=native)

    dumps = await asyncio.gather(*(one(pid) for pid in pids))
    return {dump.pid: dump for dump in dumps}


async def dump_one(
    pid: int, *, py_spy: str, timeout_s: float = DEFAULT_DUMP_TIMEOUT_S, native: bool = False
) -> StackDump:
    """One dump, run from a worker thread.

    Starting a child from the event loop blocks it until the child has
    exec'd (several milliseconds on a busy node), which would show on
    ``/livez``'s latency; a worker thread waits instead, and the
    subprocess's own timeout kills a dump that does not finish.
    """
    argv = [py_spy, "dump", "--pid", str(pid), "--nonblocking", "--json"]
    if native:
        argv.append("--native")
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_executor(), _run_dump, pid, argv, timeout_s)


def _run_niced(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[bytes]:
    """``subprocess.run`` at a lower CPU priority (``DUMP_NICENESS``), killed at the timeout.

    A dump is a burst of CPU while sentinel answers probes; on a node with
    few cores it should yield to them. The priority is lowered right after
    the start (a ``preexec_fn`` is not safe from a thread).
    """
    with subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as proc:
        with contextlib.suppress(OSError):  # it may have exited already
            os.setpriority(os.PRIO_PROCESS, proc.pid, DUMP_NICENESS)
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _run_dump(pid: int, argv: list[str], timeout_s: float) -> StackDump:
    started = time.monotonic()
    try:
        done = _run_niced(argv, timeout_s)
    except subprocess.TimeoutExpired:
        return StackDump(
            pid, False, "", None, f"py-spy timed out after {timeout_s:g} s", _since(started)
        )
    except OSError as exc:
        return StackDump(pid, False, "", None, f"cannot run py-spy: {exc}", _since(started))
    out = done.stdout[:MAX_OUTPUT_BYTES].decode("utf-8", "replace")
    if done.returncode != 0:
        err = done.stderr.decode("utf-8", "replace").strip() or out.strip()
        return StackDump(
            pid,
            False,
            "",
            None,
            f"py-spy exited {done.returncode}: {_last_lines(err)}",
            _since(started),
        )
    try:
        threads = json.loads(out)
    except ValueError:
        return StackDump(pid, True, out, None, None, _since(started))
    if not isinstance(threads, list):
        return StackDump(pid, True, out, None, None, _since(started))
    return StackDump(pid, True, render_text(pid, threads), threads, None, _since(started))


_EXECUTOR: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    """Threads of our own, so dumps never queue behind the loop's default executor."""
    global _EXECUTOR
    if _EXECUTOR is None:
        _EXECUTOR = ThreadPoolExecutor(max_workers=DEFAULT_CONCURRENCY, thread_name_prefix="py-spy")
    return _EXECUTOR


def render_text(pid: int, threads: list[Any]) -> str:
    """py-spy's own text layout, rebuilt from its JSON so one dump serves both."""
    lines = [f"Process {pid}"]
    for thread in threads:
        if not isinstance(thread, dict):
            continue
        state = "active" if thread.get("active") else "idle"
        gil = "+gil" if thread.get("owns_gil") else ""
        tid = thread.get("os_thread_id") or thread.get("thread_id")
        name = thread.get("thread_name") or ""
        lines.append(f"Thread {tid} ({state}{gil}): {json.dumps(name)}")
        for frame in thread.get("frames") or []:
            where = frame.get("short_filename") or frame.get("filename") or "?"
            lines.append(f"    {frame.get('name', '?')} ({where}:{frame.get('line', '?')})")
    return "\n".join(lines)


def _since(started: float) -> float:
    return round(time.monotonic() - started, 3)


def _last_lines(text: str, count: int = 3) -> str:
    return " | ".join(text.splitlines()[-count:])[:500]
