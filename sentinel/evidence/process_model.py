"""The vocabulary of vLLM's processes as sentinel sees them: roles, states, patterns, snapshots.

The one set of names the process watcher (:mod:`sentinel.evidence.processes`),
``/status``, diagnostics bundles and the cause classifier all speak, kept apart
from the watcher so that readers of a snapshot need not know how ``/proc`` is
read. Pure: no psutil call happens here beyond its status constants.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import psutil


class ProcessRole(StrEnum):
    """What a vLLM process is, told from its title or command line.

    The one role vocabulary: the watcher, ``/status``, diagnostics bundles and
    the cause classifier all speak it.
    """

    API_SERVER = "api_server"
    ENGINE_CORE = "engine_core"
    WORKER = "worker"
    OTHER = "other"  # a descendant of a vLLM process with no role of its own


class ProcessState(StrEnum):
    """A process's scheduling state, reduced to what the verdict and bundles distinguish."""

    RUNNING = "running"
    SLEEPING = "sleeping"
    IDLE = "idle"  # the kernel's idle sleep (I); as alive as sleeping
    DISK_SLEEP = "disk-sleep"  # uninterruptible (D): inside a driver call or on I/O
    STOPPED = "stopped"  # SIGSTOP or a tracer: alive but makes no progress
    ZOMBIE = "zombie"
    GONE = "gone"  # seen earlier (or a moment ago) and no longer there
    UNKNOWN = "unknown"  # unreadable or a kernel state psutil does not name


# States of a process that can never make progress again.
GONE_STATES = frozenset({ProcessState.ZOMBIE, ProcessState.GONE})


class Attribution(StrEnum):
    """How the snapshot's processes were tied to the target (shown in ``/status``)."""

    LISTENING_SOCKET = "listening_socket"  # the API server owns the target's listening socket
    PATTERNS = "patterns"  # no port to check: vLLM's process patterns alone (tests, tools)
    NONE = "none"  # nothing could be attributed: process evidence is off


class SchedulingPolicy(StrEnum):
    FCFS = "fcfs"  # vLLM's default: request priority is accepted and ignored
    PRIORITY = "priority"


_STATES = {
    psutil.STATUS_RUNNING: ProcessState.RUNNING,
    psutil.STATUS_WAKING: ProcessState.RUNNING,
    psutil.STATUS_SLEEPING: ProcessState.SLEEPING,
    psutil.STATUS_IDLE: ProcessState.IDLE,
    psutil.STATUS_PARKED: ProcessState.IDLE,
    psutil.STATUS_DISK_SLEEP: ProcessState.DISK_SLEEP,
    psutil.STATUS_STOPPED: ProcessState.STOPPED,
    psutil.STATUS_TRACING_STOP: ProcessState.STOPPED,
    psutil.STATUS_ZOMBIE: ProcessState.ZOMBIE,
    psutil.STATUS_DEAD: ProcessState.GONE,  # X: being reaped, about to vanish
}


def process_state(status: str | None) -> ProcessState:
    """Map a psutil status string; an unreadable or unnamed state is ``unknown``, not dead."""
    if status is None:
        return ProcessState.UNKNOWN
    return _STATES.get(status, ProcessState.UNKNOWN)


COMM_LENGTH = 15  # Linux TASK_COMM_LEN minus the terminating NUL


@dataclass(frozen=True, slots=True)
class ProcessPatterns:
    """How vLLM's processes are recognised: the one set of patterns.

    The API server by a substring of its joined command line (vLLM's own:
    ``python -m vllm.entrypoints.openai.api_server`` or ``vllm serve``); the
    engine and workers by their process title (vLLM sets ``VLLM::EngineCore``
    and ``VLLM::Worker``, with suffixes such as ``_DP0`` or ``_TP1``). Only
    real vLLM is named here: a simulator or a test is recognised by wearing
    the same command line or title, or by patterns passed in.
    """

    api: tuple[str, ...] = ("vllm.entrypoints.openai.api_server", "vllm serve")
    engine: tuple[str, ...] = ("VLLM::EngineCore",)
    worker: tuple[str, ...] = ("VLLM::Worker",)

    @property
    def titles(self) -> tuple[str, ...]:
        """The process titles of the engine side, engine first."""
        return self.engine + self.worker

    def classify(self, name: str, cmdline: Sequence[str]) -> ProcessRole | None:
        """The role a process plays, judged by its name and command line."""
        title = cmdline[0] if cmdline else ""
        for role, patterns in (
            (ProcessRole.ENGINE_CORE, self.engine),
            (ProcessRole.WORKER, self.worker),
        ):
            # The kernel keeps only COMM_LENGTH characters of a name, and a
            # zombie has no command line left to recover the rest from.
            if any(p in title or p[:COMM_LENGTH] in name for p in patterns):
                return role
        joined = " ".join(cmdline)
        if any(p in joined for p in self.api):
            return ProcessRole.API_SERVER
        return None


VLLM_PATTERNS = ProcessPatterns()


def scheduling_policy(cmdline: Sequence[str]) -> SchedulingPolicy | None:
    """The ``--scheduling-policy`` a command line asks for, or None when it names none.

    vLLM's argument parser accepts dashes or underscores and ``--flag value`` or
    ``--flag=value``; a wrapper shell (``sh -c "vllm serve ..."``) puts the
    whole command in one argument, so arguments are split on whitespace too.
    """
    tokens = [token for arg in cmdline for token in arg.split()]
    for i, token in enumerate(tokens):
        flag, eq, value = token.partition("=")
        if flag.replace("_", "-") != "--scheduling-policy":
            continue
        if not eq:
            value = tokens[i + 1] if i + 1 < len(tokens) else ""
        try:
            return SchedulingPolicy(value.strip().lower())
        except ValueError:
            return None
    return None


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    pid: int
    role: ProcessRole
    name: str
    state: ProcessState
    create_time: float
    ppid: int | None = None
    cpu_seconds: float | None = None  # user + system; flat while the process is stuck
    cmdline: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ProcessSnapshot:
    """What the process table said at ``at`` (monotonic time).

    ``engines`` and ``workers`` include processes seen earlier behind the same
    API server that have since vanished, with state ``gone``.
    ``scheduling_policy`` is None when no process said anything about it.
    """

    at: float
    api: ProcessInfo | None = None
    engines: tuple[ProcessInfo, ...] = ()
    workers: tuple[ProcessInfo, ...] = ()
    scheduling_policy: SchedulingPolicy | None = None
    attribution: Attribution = Attribution.PATTERNS
    attribution_detail: str = ""  # why nothing was attributed, for ``/status``

    @property
    def api_identity(self) -> tuple[int, float] | None:
        """(pid, start time) of the API server; a change means the server restarted."""
        return None if self.api is None else (self.api.pid, self.api.create_time)

    @property
    def engine_processes(self) -> tuple[ProcessInfo, ...]:
        return self.engines + self.workers
