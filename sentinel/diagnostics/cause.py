"""The one-line cause of a suspected hang, classified from what the kernel says.

Owns the closed :class:`CauseClass` enum and the pure classifier
:func:`classify`. Roles and states are the evidence layer's process
vocabulary (:mod:`sentinel.evidence.processes`), not a copy of it. The
inputs are only scheduling state, CPU use over a short window and the kernel
wait channel of each vLLM process. Stack frames are kept out on purpose: a
classifier that recognised fault-injection frames would pass every chaos test
and say nothing about a real hang.

Rules, first match wins (the order goes from "no doubt" to "inferred"):

1. *process gone*: no vLLM process is visible, or one is a zombie or
   vanished while the bundle was taken.
2. *process stopped*: a process is stopped (SIGSTOP, or a tracer holds it).
3. *uninterruptible wait*: a process sleeps in state D, typically inside a GPU
   driver call or on I/O; the wait channel says where.
4. *engine compiling*: a compiler (``cc1plus``, ``ptxas``, ...) runs under the
   engine or a worker: a long first-use compile is work, not a hang.
5. *engine idle*: no request is running (vLLM's ``num_requests_running``
   reads 0 and nothing else says a request waits): an engine asleep on its
   input queue is waiting for work, not for something that does not come.
6. *engine spinning* / *engine blocked*: the engine process decides. The
   EngineCore (the scheduler loop) when it is visible, else the busiest
   engine-side process, else the busiest process: high CPU with no progress is
   spinning, low CPU is blocked (waiting on a lock, a queue, a pipe, a peer).

Rules 4 and 5 read what the caller knows of the engine's work (compilers under
it, requests running); where it knows nothing, they do not apply.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from sentinel.evidence.process_model import GONE_STATES, ProcessRole, ProcessState


class CauseClass(StrEnum):
    ENGINE_BLOCKED = "engine_blocked"
    ENGINE_COMPILING = "engine_compiling"
    ENGINE_IDLE = "engine_idle"
    ENGINE_SPINNING = "engine_spinning"
    # Not the kernel's word: a path hang's (sentinel.diagnostics.headline), whose engine only waits.
    PATH_HUNG = "path_hung"
    PROCESS_STOPPED = "process_stopped"
    UNINTERRUPTIBLE_WAIT = "uninterruptible_wait"
    PROCESS_GONE = "process_gone"


# Percent of one core over the measurement window. A Python loop spinning on one
# core shows 90-100 %; a process blocked on a queue shows well under 5 %. The
# threshold sits low enough that a spinning process sharing an oversubscribed
# core still counts as spinning: one read 44 % on a 2-core machine running
# four busy processes, and a CPU limit throttles it the same way.
SPINNING_CPU_PERCENT = 25.0

_ENGINE_ROLES = (ProcessRole.ENGINE_CORE, ProcessRole.WORKER)

# Rules 1 to 3, in order: a process in one of these states is the cause, whatever
# the others do; ``{name}``, ``{state}`` and ``{wchan}`` are that process's.
_STATE_RULES: tuple[tuple[frozenset[ProcessState], CauseClass, str], ...] = (
    (GONE_STATES, CauseClass.PROCESS_GONE, "process gone: {name} is {state}"),
    (
        frozenset({ProcessState.STOPPED}),
        CauseClass.PROCESS_STOPPED,
        "process stopped: {name} is stopped (SIGSTOP or a tracer); "
        "it cannot make progress until it is continued",
    ),
    (
        frozenset({ProcessState.DISK_SLEEP}),
        CauseClass.UNINTERRUPTIBLE_WAIT,
        "uninterruptible wait: {name} sleeps in state D{wchan} (driver call or I/O)",
    ),
)


@dataclass(frozen=True, slots=True)
class ProcessObservation:
    """What the classifier may look at for one process."""

    pid: int
    title: str
    role: ProcessRole
    status: ProcessState
    cpu_percent: float | None = None
    wchan: str | None = None


@dataclass(frozen=True, slots=True)
class Cause:
    cause: CauseClass
    summary: str  # one line for humans, Events and logs
    pid: int | None = None  # the process the cause was read from


def classify(
    processes: Sequence[ProcessObservation],
    *,
    spinning_cpu_percent: float = SPINNING_CPU_PERCENT,
    running: float | None = None,
    compilers: Sequence[str] = (),
) -> Cause:
    """Name the most likely cause of a hang from the state of the vLLM processes.

    ``running``: requests the engine is running (None: unknown, as when a
    canary is known to wait); ``compilers``: the compiler processes seen under
    the engine and its workers, described.
    """
    if not processes:
        return Cause(CauseClass.PROCESS_GONE, "process gone: no vLLM process is visible")

    ordered = _by_role(processes)
    for states, cause, words in _STATE_RULES:
        for proc in ordered:
            if proc.status in states:
                said = words.format(
                    name=_name(proc), state=proc.status.value, wchan=_in_wchan(proc)
                )
                return Cause(cause, said, proc.pid)

    engine = _deciding_process(processes)
    cpu = engine.cpu_percent
    cpu_text = "unknown CPU" if cpu is None else f"{cpu:.0f}% CPU"
    if compilers:
        shown = ", ".join(compilers[:3]) + (
            f" and {len(compilers) - 3} more" if len(compilers) > 3 else ""
        )
        return Cause(
            CauseClass.ENGINE_COMPILING,
            f"engine compiling: {shown} under {_name(engine)}; "
            "a long first-use compile is work, not a hang",
            engine.pid,
        )
    if running is not None and running <= 0:
        return Cause(
            CauseClass.ENGINE_IDLE,
            f"engine idle: no request running; {_name(engine)} is {engine.status.value} "
            f"at {cpu_text}{_in_wchan(engine)}, waiting for work",
            engine.pid,
        )
    if cpu is not None and cpu >= spinning_cpu_percent:
        return Cause(
            CauseClass.ENGINE_SPINNING,
            f"engine spinning: {_name(engine)} uses {cpu:.0f}% CPU with no progress",
            engine.pid,
        )
    return Cause(
        CauseClass.ENGINE_BLOCKED,
        f"engine blocked: {_name(engine)} is {engine.status.value} at {cpu_text}"
        f"{_in_wchan(engine)}, waiting on something that does not come",
        engine.pid,
    )


def _by_role(processes: Sequence[ProcessObservation]) -> list[ProcessObservation]:
    """Engine processes first: a stopped worker explains more than a stopped helper."""
    order = {
        ProcessRole.ENGINE_CORE: 0,
        ProcessRole.WORKER: 1,
        ProcessRole.API_SERVER: 2,
        ProcessRole.OTHER: 3,
    }
    return sorted(processes, key=lambda p: (order.get(p.role, len(order)), p.pid))


def _deciding_process(processes: Sequence[ProcessObservation]) -> ProcessObservation:
    cores = [p for p in processes if p.role is ProcessRole.ENGINE_CORE]
    if cores:
        return max(cores, key=_cpu)
    engine_side = [p for p in processes if p.role in _ENGINE_ROLES]
    return max(engine_side or processes, key=_cpu)


def _cpu(proc: ProcessObservation) -> float:
    return -1.0 if proc.cpu_percent is None else proc.cpu_percent


def _name(proc: ProcessObservation) -> str:
    return f"{proc.title or proc.role.value} (pid {proc.pid})"


def _in_wchan(proc: ProcessObservation) -> str:
    if proc.wchan and proc.wchan != "0":
        return f" in {proc.wchan}"
    return ""
