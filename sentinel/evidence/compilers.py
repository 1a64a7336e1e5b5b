"""Compiler processes under the engine: a long engine step that is work, not a hang.

A first-use kernel JIT compile (or building an extension) can hold one
engine step for a minute: the engine loop publishes nothing, every canary
waits, and from the outside the server looks exactly like a hung one. Many
such compiles run a compiler as a child of the engine or a worker
(``nvcc``, ``ptxas``, ``cicc``, ``ninja``, ``cc1plus``, ...), which a busy
CPU shows to be working; a spinning hung engine has none. Some compiles
(NVRTC) run inside the engine process and leave no child: those are judged
as any other stall.

Children are found through ``/proc/<pid>/task/<tid>/children`` of each
engine and worker process (one small read per thread, no scan of every
process), at most :data:`MAX_DEPTH` levels and :data:`MAX_FOUND` processes
deep, since a build tree is shallow; what cannot be read is skipped. Names
come from ``/proc/<pid>/comm`` and CPU time from ``/proc/<pid>/stat``, both
readable by a non-root sidecar.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

COMPILERS = frozenset(
    {
        "nvcc",
        "ptxas",
        "cicc",
        "fatbinary",
        "nvlink",
        "ninja",
        "make",
        "cc1",
        "cc1plus",
        "gcc",
        "g++",
        "cc",
        "c++",
        "clang",
        "clang++",
        "ld",
        "ld.lld",
        "as",
        "hipcc",
    }
)
MAX_DEPTH = 4
MAX_FOUND = 64
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class CompilerProcess:
    """A compiler seen under the engine, with its CPU time so far."""

    pid: int
    name: str
    cpu_seconds: float
    parent: int

    def describe(self) -> str:
        return f"{self.name} (pid {self.pid}, under pid {self.parent})"


def _children(pid: int, proc: Path) -> list[int]:
    found: list[int] = []
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except OSError:
        return found
    for task in tasks[:MAX_FOUND]:
        try:
            text = (task / "children").read_text()
        except OSError:
            continue
        found.extend(int(word) for word in text.split() if word.isdigit())
    return found


def _read(pid: int, parent: int, proc: Path) -> CompilerProcess | None:
    try:
        name = (proc / str(pid) / "comm").read_text().strip()
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    # Fields after the parenthesised name: state is the 3rd field, utime the 14th.
    fields = stat.rsplit(")", 1)[-1].split()
    try:
        cpu = (int(fields[11]) + int(fields[12])) / _TICKS
    except (IndexError, ValueError):
        return None
    return CompilerProcess(pid, name, cpu, parent)


def compilers_under(roots: Iterable[int], proc: Path = PROC) -> tuple[CompilerProcess, ...]:
    """Every compiler process below ``roots`` (engine and worker PIDs), bounded."""
    found: list[CompilerProcess] = []
    seen: set[int] = set()
    level = [(pid, pid) for pid in roots]
    for _ in range(MAX_DEPTH):
        following: list[tuple[int, int]] = []
        for pid, _parent in level:
            for child in _children(pid, proc):
                if child in seen or len(seen) >= MAX_FOUND:
                    continue
                seen.add(child)
                info = _read(child, pid, proc)
                if info is None:
                    continue
                if info.name in COMPILERS:
                    found.append(info)
                following.append((child, pid))
        if not following:
            break
        level = following
    return tuple(found)


#: Compilers seen with gaps shorter than this are one compile (one storm): the
#: compile grace counts from its first; a compiler after a longer gap starts another.
STORM_GAP = 30.0


@dataclass(slots=True)
class CompileWatch:
    """Since when compilers under the engine are seen busy, and when one last was.

    A compiler is busy in a sample where it is new (a pid not in the previous
    sample: it ran since) or its CPU time grew. Triton autotuning and JIT
    storms run many ``ptxas`` (or ``cc1plus``) children that live well under
    a second each, so most samples see none and no pid is seen twice: any
    sample that sees one counts, and the verdict holds for a short linger
    after the last (``compile_linger``). One present but idle (stopped,
    waiting on a lock) is not busy.
    """

    since: float | None = None  # the first busy compiler of this compile (storm)
    seen_at: float | None = None  # the last sample with a busy compiler
    detail: str = ""
    seen: int = 0  # busy compiler processes seen in this compile
    _cpu: dict[int, float] = field(default_factory=dict)

    def observe(self, compilers: Sequence[CompilerProcess], now: float) -> None:
        """A compiler new since the last sample or whose CPU time grew is busy."""
        before, self._cpu = self._cpu, {c.pid: c.cpu_seconds for c in compilers}
        busy = [c for c in compilers if c.pid not in before or c.cpu_seconds > before[c.pid]]
        if self.seen_at is not None and now - self.seen_at > STORM_GAP:
            self.since, self.seen_at, self.detail, self.seen = None, None, "", 0
        if not busy:
            return
        self.since = now if self.since is None else self.since
        self.seen_at = now
        self.seen += sum(1 for c in busy if c.pid not in before)
        shown = ", ".join(c.describe() for c in busy[:4])
        self.detail = shown if self.seen <= 1 else f"{shown}; {self.seen} compilers seen"
