"""Whether the engine's processes use any CPU: the strongest evidence that no step runs.

A working engine burns CPU through every step it takes. The CPU build
computes; a GPU engine's thread waits for each step's end in a CUDA
synchronisation that spins or yields by default (vLLM asks for no blocking
sync), and the multiprocess executor's message queue between the engine and
its workers spins too. A hung engine blocked on a lock, a socket or a
collective that never comes uses none: its CPU time, summed over the engine
and worker processes, stands still. Standing still is not proof by itself
(an idle engine uses none either), so the engine rule takes it only beside a
canary that waited with no work counter moving (:mod:`sentinel.verdict.hangs.engine`).

From ``/proc/<pid>/stat`` (user plus system time, every thread of the
process), which the process watcher reads for every engine and worker at each
sample. The kernel counts it in clock ticks (10 ms), and a blocked engine
still wakes for its own housekeeping now and then, so "no CPU" is under
:data:`IDLE_SHARE` of one core since a moment, plus a few ticks. A sample
in which an engine or worker process is running (state ``R``) is activity
whatever its CPU time says: a starved engine waiting for a core is not a
hung one. What cannot be read says so (``unknown``), and then the engine rule
waits its usual windows.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from sentinel.evidence.process_model import GONE_STATES, ProcessSnapshot, ProcessState

IDLE_SHARE = 0.02  # of one core: below this the engine's processes are standing still
TICK_SLACK_S = 0.03  # three clock ticks: /proc counts CPU time in ticks of 10 ms
HISTORY_S = 120.0  # samples kept; a canary's window is seconds long


@dataclass(frozen=True, slots=True)
class EngineCpu:
    """The engine's CPU evidence at one instant.

    ``idle_since``: from this sample on, the engine's processes used (next
    to) no CPU and none was running, up to ``sampled_at``, the newest sample
    (None: they used some at the newest sample). ``unknown``: why it cannot
    tell ('' when it can).
    """

    idle_since: float | None = None
    sampled_at: float | None = None
    unknown: str = "no process sample yet"


class EngineCpuWatch:
    """The engine's summed CPU time at each process sample, while the same processes live."""

    def __init__(self) -> None:
        self._samples: deque[tuple[float, float, bool]] = deque()  # (at, cpu seconds, running)
        self._processes: frozenset[tuple[int, float]] = frozenset()
        self._unknown = "no process sample yet"

    def observe(self, snapshot: ProcessSnapshot, now: float) -> None:
        """Take one process sample's engine and worker CPU times."""
        live = [p for p in snapshot.engine_processes if p.state not in GONE_STATES]
        if not live:
            self._forget("no engine process attributed")
            return
        times = [p.cpu_seconds for p in live]
        if any(t is None for t in times):
            self._forget("the engine's CPU time is unreadable")
            return
        processes = frozenset((p.pid, p.create_time) for p in live)
        if processes != self._processes:
            self._samples.clear()  # another set of processes: their times do not add up
            self._processes = processes
        running = any(p.state is ProcessState.RUNNING for p in live)
        self._samples.append((now, sum(t for t in times if t is not None), running))
        while self._samples and now - self._samples[0][0] > HISTORY_S:
            self._samples.popleft()
        self._unknown = ""

    def _forget(self, why: str) -> None:
        self._samples.clear()
        self._processes = frozenset()
        self._unknown = why

    @property
    def current(self) -> EngineCpu:
        """Since when the engine's processes stand still, as of the newest sample."""
        if self._unknown or not self._samples:
            return EngineCpu(unknown=self._unknown or "no process sample yet")
        newest, total, running = self._samples[-1]
        if running:
            return EngineCpu(None, newest, "")
        idle_since: float | None = None
        for at, cpu, was_running in reversed(self._samples):
            if was_running or total - cpu > IDLE_SHARE * (newest - at) + TICK_SLACK_S:
                break
            idle_since = at
        if idle_since == newest:
            idle_since = None  # one sample shows no span
        return EngineCpu(idle_since, newest, "")
