"""The vocabulary of vLLM's processes as sentinel sees them: roles, states, patterns, snapshots.

The one set of names the process watcher (:mod:`sentinel.evidence.processes`),
``/status``, diagnostics bundles and the cause classifier all speak, kept apart
from the watcher so that readers of a snapshot need not know how ``/proc`` is
read. Pure: no psutil call happens here beyond its status constants.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

import psutil

from sentinel.evidence.compilers import CompilerProcess
from sentinel.evidence.held_sockets import HeldSocket
from sentinel.evidence.process_access import ProcessAccess


class ProcessRole(StrEnum):
    """What a vLLM process is, told from its title or command line.

    The one role vocabulary: the watcher, ``/status``, diagnostics bundles and
    the cause classifier all speak it.
    """

    API_SERVER = "api_server"
    # One of the API-server processes of ``--api-server-count`` (``VLLM::APIServer_<i>``)
    # that share the server's socket, under the process that launched them.
    API_PROCESS = "api_process"
    ENGINE_CORE = "engine_core"
    WORKER = "worker"
    # Data parallel's coordinator: it carries load statistics and request
    # waves between engines, never a request itself.
    COORDINATOR = "dp_coordinator"
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
    # The socket's owner unreadable (another user's /proc/<pid>/fd): the socket's
    # uid and namespace and the server's command line (sentinel.evidence.attribution).
    COMMAND_LINE = "command_line"
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
    coordinator: tuple[str, ...] = ("VLLM::DPCoordinator",)
    api_process: tuple[str, ...] = ("VLLM::APIServer",)

    @property
    def titles(self) -> tuple[str, ...]:
        """The process titles of the engine side, engine first."""
        return self.engine + self.worker + self.coordinator

    def classify(self, name: str, cmdline: Sequence[str]) -> ProcessRole | None:
        """The role a process plays, judged by its name and command line."""
        title = cmdline[0] if cmdline else ""
        for role, patterns in (
            (ProcessRole.ENGINE_CORE, self.engine),
            (ProcessRole.WORKER, self.worker),
            (ProcessRole.COORDINATOR, self.coordinator),
            (ProcessRole.API_PROCESS, self.api_process),
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


def full_title(name: str, cmdline: Sequence[str]) -> str:
    """A process's whole title: the command line's first argument when it extends ``name``.

    vLLM sets titles with ``setproctitle``, which rewrites the command line;
    the kernel's ``comm`` keeps only 15 characters (``VLLM::Worker_TP1``
    reads ``VLLM::Worker_TP``), so a rank suffix lives in the command line
    only. A zombie has lost its command line and keeps the short name.
    """
    first = cmdline[0].strip() if cmdline else ""
    if first and name and first.startswith(name[:COMM_LENGTH]):
        return first
    return name or first


# vLLM's rank suffixes (vllm/v1/executor/multiproc_executor.py and
# EngineCoreProc): ``_DP<r>`` data parallel (an engine, or a worker of one),
# ``_PP<r>`` pipeline stage, ``_TP<r>`` tensor-parallel rank, ``_EP<r>``.
_SUFFIX = re.compile(r"_(DP|PP|TP|EP)(\d+)")


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a process sits in a multi-process engine; None where its title says nothing.

    ``engine`` is the data-parallel engine index, the value of the ``engine``
    label on vLLM's metrics; ``tp_rank`` and ``pp_rank`` place a worker inside
    its engine. A data-parallel engine's worker is titled plain
    ``VLLM::Worker`` and takes its engine from its parent (the watcher does that).
    """

    engine: int | None = None
    tp_rank: int | None = None
    pp_rank: int | None = None

    @classmethod
    def from_title(cls, title: str) -> Placement:
        """Read the rank suffixes of a ``VLLM::`` title (only the word that carries them)."""
        if not title.startswith("VLLM::"):
            return cls()
        word = title.split(None, 1)[0]
        found = {kind: int(index) for kind, index in _SUFFIX.findall(word)}
        return cls(engine=found.get("DP"), tp_rank=found.get("TP"), pp_rank=found.get("PP"))

    def words(self, role: ProcessRole) -> str:
        """The placement in words, e.g. ``engine 1``, ``TP rank 1 worker``; "" when none."""
        parts = []
        if self.engine is not None:
            parts.append(f"engine {self.engine}")
        if self.pp_rank is not None:
            parts.append(f"PP stage {self.pp_rank}")
        if self.tp_rank is not None:
            parts.append(f"TP rank {self.tp_rank}")
        if not parts:
            return ""
        if role is ProcessRole.WORKER:
            parts.append("worker")
        elif role is ProcessRole.ENGINE_CORE and len(parts) > 1:
            parts.append("engine core")
        return " ".join(parts)


# How hang reasons name a stuck engine or rank ("engine 1", "TP rank 1"):
# made by :meth:`Placement.words` and the partial-hang rule, read back by
# :func:`named_placements` wherever only the reason travels (bundles).
_NAMED = re.compile(r"\b(engine|TP rank|PP stage) (\d+)\b")


def named_placements(text: str) -> dict[str, list[int]]:
    """The engines and ranks a reason names: ``{"engine": [1], "tp_rank": [1]}``."""
    keys = {"engine": "engine", "TP rank": "tp_rank", "PP stage": "pp_rank"}
    found: dict[str, list[int]] = {}
    for word, index in _NAMED.findall(text):
        values = found.setdefault(keys[word], [])
        if int(index) not in values:
            values.append(int(index))
    return found


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


_REASONING_FLAGS = ("--reasoning-parser", "--structured-outputs-config.reasoning-parser")
# vLLM 0.32 also takes the parser inside the structured-outputs config's JSON.
_REASONING_JSON = re.compile(
    r"--structured[-_]outputs[-_]config(?:=|\s+)'?\{[^}]*?\"reasoning[-_]parser\"\s*:\s*\"([^\"]*)\""
)


def flag_values(cmdline: Sequence[str], flags: Collection[str]) -> Iterator[tuple[str, str]]:
    """Each of ``flags`` on a command line with its value, in order, as argparse reads
    it: ``=`` or a space, dashes or underscores, quotes stripped. A title set with
    setproctitle is one argument holding the whole command, so arguments are split
    on whitespace."""
    tokens = [token for arg in cmdline for token in arg.split()]
    for i, token in enumerate(tokens):
        flag, eq, value = token.partition("=")
        flag = flag.replace("_", "-")
        if flag not in flags:
            continue
        if not eq:
            value = tokens[i + 1] if i + 1 < len(tokens) else ""
        yield flag, value.strip().strip("'\"")


def reasoning_parser(cmdline: Sequence[str]) -> str | None:
    """The reasoning parser a vLLM command line turns on, or None when it names none.

    ``--reasoning-parser NAME`` (``=`` or a space, dashes or underscores, the
    last one winning, as argparse has it), or vLLM 0.32's structured-outputs
    config (``--structured-outputs-config.reasoning_parser NAME`` or its JSON),
    which the flag overrides. vLLM 0.8 also wanted ``--enable-reasoning`` beside
    the parser (0.9 deprecated it, 0.10 removed it, and alone it never named
    one); the release is not known from a command line, so a named parser
    counts as on either way: a kind disabled needlessly on a 0.8 server is
    safer than one judged behind a parser. Not seen: a parser set in a
    ``--config`` file, or one a model turns on by itself (gpt-oss).
    """
    found: dict[str, str] = {}
    for flag, value in flag_values(cmdline, _REASONING_FLAGS):
        found[flag] = "" if value.startswith("-") else value  # a flag: no value given
    named = found.get(_REASONING_FLAGS[0]) or found.get(_REASONING_FLAGS[1])
    if named:
        return named
    in_json = _REASONING_JSON.findall(" ".join(cmdline))
    return (in_json[-1] or None) if in_json else None


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
    title: str = ""  # the whole title (see :func:`full_title`); "" when never read
    placement: Placement = Placement()

    def describe(self) -> str:
        """Who this process is, for reasons: ``engine 1 (VLLM::EngineCore_DP1, pid 7)``."""
        title = self.title or self.name or self.role.value
        words = self.placement.words(self.role)
        return f"{words} ({title}, pid {self.pid})" if words else f"{title} (pid {self.pid})"


@dataclass(frozen=True, slots=True)
class ProcessSnapshot:
    """What the process table said at ``at`` (monotonic time).

    ``engines`` and ``workers`` include processes seen earlier behind the same
    API server that have since vanished, with state ``gone``. A data-parallel
    coordinator is listed apart: it carries no request, so its state alone
    is never a dead engine (the engines' progress and canaries judge them).
    ``scheduling_policy`` is None when no process said anything about it;
    ``reasoning_parser`` (:func:`reasoning_parser`) is None when the command
    line names none or no process was seen.
    """

    at: float
    api: ProcessInfo | None = None
    engines: tuple[ProcessInfo, ...] = ()
    workers: tuple[ProcessInfo, ...] = ()
    coordinators: tuple[ProcessInfo, ...] = ()  # watched and shown; never "engine down"
    scheduling_policy: SchedulingPolicy | None = None
    reasoning_parser: str | None = None
    attribution: Attribution = Attribution.PATTERNS
    attribution_detail: str = ""  # how it was attributed, or why not, for ``/status``
    unreadable: tuple[str, ...] = ()  # what attribution could not read
    # Each piece of process evidence on or off, and why (None: not probed).
    access: ProcessAccess | None = None
    # Compiler processes under the engine and workers (a long first-use compile).
    compilers: tuple[CompilerProcess, ...] = ()
    # The API-server processes of --api-server-count under ``api``, each judged alone.
    api_processes: tuple[ProcessInfo, ...] = ()
    # Connections to the server's port holding unread bytes, with their holder
    # where readable (None: the socket table was not read).
    held: tuple[HeldSocket, ...] | None = None
    # Each readable holder's connections to the port (inodes), sampled with ``held``.
    served: Mapping[int, frozenset[int]] = field(default_factory=dict)

    @property
    def api_identity(self) -> tuple[int, float] | None:
        """(pid, start time) of the API server; a change means the server restarted."""
        return None if self.api is None else (self.api.pid, self.api.create_time)

    @property
    def engine_processes(self) -> tuple[ProcessInfo, ...]:
        return self.engines + self.workers


def placed(
    snapshot: ProcessSnapshot, known: Mapping[tuple[int, float], ProcessInfo] | None = None
) -> ProcessSnapshot:
    """The snapshot with every process's whole title and placement filled in.

    A title is read from the command line; a process that lost it (a zombie
    keeps only its 15-character name) keeps what ``known`` (the same pid and
    start time, seen earlier) said. A worker whose title names no engine
    takes its parent engine's: vLLM titles a data-parallel engine's worker
    plain ``VLLM::Worker``.
    """
    memory = known or {}

    def titled(p: ProcessInfo) -> ProcessInfo:
        title = full_title(p.name, p.cmdline)
        earlier = memory.get((p.pid, p.create_time))
        if earlier is not None and earlier.title and len(earlier.title) > len(title):
            return replace(p, title=earlier.title, placement=earlier.placement)
        return replace(p, title=title, placement=Placement.from_title(title))

    engines = tuple(titled(p) for p in snapshot.engines)
    by_pid = {p.pid: p.placement.engine for p in engines if p.placement.engine is not None}
    workers = []
    for worker in (titled(p) for p in snapshot.workers):
        parent = None if worker.ppid is None else by_pid.get(worker.ppid)
        if worker.placement.engine is None and parent is not None:
            worker = replace(worker, placement=replace(worker.placement, engine=parent))
        workers.append(worker)
    coordinators = tuple(titled(p) for p in snapshot.coordinators)
    return replace(snapshot, engines=engines, workers=tuple(workers), coordinators=coordinators)
