"""Python stacks of vLLM processes, taken with py-spy: the only module that runs py-spy.

Each dump is ``py-spy dump --pid N --nonblocking --json`` in its own asyncio
subprocess under its own time limit, all pids concurrently (bounded), so one
wedged target cannot hold up the others or the event loop. ``--nonblocking``
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
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_DUMP_TIMEOUT_S = 4.0
DEFAULT_CONCURRENCY = 8
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
    concurrency: int = DEFAULT_CONCURRENCY,
    native: bool = False,
) -> dict[int, StackDump]:
    """Dump every pid concurrently; each dump has its own time limit and never raises."""
    exe = py_spy or find_py_spy()
    if exe is None:
        return {
            pid: StackDump(pid, False, "", None, "py-spy is not installed", 0.0) for pid in pids
        }
    limit = asyncio.Semaphore(max(concurrency, 1))

    async def one(pid: int) -> StackDump:
        async with limit:
            return await dump_one(pid, py_spy=exe, timeout_s=timeout_s, native=native)

    dumps = await asyncio.gather(*(one(pid) for pid in pids))
    return {dump.pid: dump for dump in dumps}


async def dump_one(
    pid: int, *, py_spy: str, timeout_s: float = DEFAULT_DUMP_TIMEOUT_S, native: bool = False
) -> StackDump:
    started = time.monotonic()
    argv = [py_spy, "dump", "--pid", str(pid), "--nonblocking", "--json"]
    if native:
        argv.append("--native")
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as exc:
        return StackDump(pid, False, "", None, f"cannot run py-spy: {exc}", 0.0)
    try:
        async with asyncio.timeout(timeout_s):
            stdout, stderr = await proc.communicate()
    except TimeoutError:
        await _kill(proc)
        return StackDump(
            pid, False, "", None, f"py-spy timed out after {timeout_s:g} s", _since(started)
        )
    except asyncio.CancelledError:
        await _kill(proc)
        raise
    out = stdout[:MAX_OUTPUT_BYTES].decode("utf-8", "replace")
    if proc.returncode != 0:
        err = stderr.decode("utf-8", "replace").strip() or out.strip()
        return StackDump(
            pid,
            False,
            "",
            None,
            f"py-spy exited {proc.returncode}: {_last_lines(err)}",
            _since(started),
        )
    try:
        threads = json.loads(out)
    except ValueError:
        return StackDump(pid, True, out, None, None, _since(started))
    if not isinstance(threads, list):
        return StackDump(pid, True, out, None, None, _since(started))
    return StackDump(pid, True, render_text(pid, threads), threads, None, _since(started))


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


async def _kill(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(proc.wait(), 2.0)


def _since(started: float) -> float:
    return round(time.monotonic() - started, 3)


def _last_lines(text: str, count: int = 3) -> str:
    return " | ".join(text.splitlines()[-count:])[:500]
