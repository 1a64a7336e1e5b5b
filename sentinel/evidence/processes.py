"""The vLLM processes visible through the pod's shared PID namespace.

Owns everything the daemon learns from ``/proc`` (through psutil, and only
here): which process is the API server and since when (a new PID or start time
is a server restart), the state of the engine and worker processes (a stopped,
zombie or vanished engine behind a live API server is a dead engine that vLLM's
own ``/health`` may not report for minutes), and the scheduling policy the
server was started with, which decides whether a canary's ``priority`` is
honoured at all.

Attribution is by the listening socket: only the process that owns the
target's listening socket is its API server, and only that process's
descendants are its engine and workers. On a shared host or node another
vLLM is never adopted, not even as the only candidate; when no process can be
shown to own the socket (none listens, or its sockets are unreadable without
privileges), nothing is attributed, the snapshot says why, and process
evidence is off.

psutil calls block, so the daemon uses :meth:`ProcessWatcher.sample_async`,
which runs them in a worker thread.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import psutil

# The vocabulary lives in its own module; its names are importable from here too.
from sentinel.evidence.process_model import (
    COMM_LENGTH,
    GONE_STATES,
    VLLM_PATTERNS,
    Attribution,
    ProcessInfo,
    ProcessPatterns,
    ProcessRole,
    ProcessSnapshot,
    ProcessState,
    SchedulingPolicy,
    process_state,
    scheduling_policy,
)

__all__ = [
    "COMM_LENGTH",
    "GONE_STATES",
    "VLLM_PATTERNS",
    "Attribution",
    "ProcessInfo",
    "ProcessPatterns",
    "ProcessRole",
    "ProcessSnapshot",
    "ProcessState",
    "ProcessWatcher",
    "SchedulingPolicy",
    "process_state",
    "scheduling_policy",
]


_ATTRS = ["pid", "ppid", "name", "cmdline", "create_time", "status", "cpu_times"]


@dataclass(slots=True)
class _Row:
    pid: int
    ppid: int | None
    name: str
    cmdline: tuple[str, ...]
    create_time: float
    status: str | None
    cpu_seconds: float | None

    @classmethod
    def from_info(cls, info: dict[str, Any]) -> _Row:
        cmdline = tuple(arg for arg in (info.get("cmdline") or ()) if arg)
        cpu = info.get("cpu_times")
        return cls(
            pid=int(info["pid"]),
            ppid=info.get("ppid"),
            name=info.get("name") or "",
            cmdline=cmdline,
            create_time=float(info.get("create_time") or 0.0),
            status=info.get("status"),
            cpu_seconds=None if cpu is None else float(cpu.user + cpu.system),
        )

    def info(self, role: ProcessRole) -> ProcessInfo:
        return ProcessInfo(
            pid=self.pid,
            role=role,
            name=self.name,
            # psutil reports no status for a process it could not read at all,
            # which in a shared PID namespace means it vanished while listed.
            state=ProcessState.GONE if self.status is None else process_state(self.status),
            create_time=self.create_time,
            ppid=self.ppid,
            cpu_seconds=self.cpu_seconds,
            cmdline=self.cmdline,
        )


def _read_table(exclude: Iterable[int]) -> list[_Row]:
    skip = set(exclude)
    rows = []
    for proc in psutil.process_iter(_ATTRS, ad_value=None):
        info = proc.info
        if info.get("pid") is None or info["pid"] in skip:
            continue
        rows.append(_Row.from_info(info))
    return rows


def _ancestors(pid: int, parents: dict[int, int | None]) -> list[int]:
    chain: list[int] = []
    current = parents.get(pid)
    while current is not None and current not in chain:
        chain.append(current)
        current = parents.get(current)
    return chain


def _listens_on(pid: int, port: int) -> bool:
    try:
        connections = psutil.Process(pid).net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return False
    return any(
        c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in connections
    )


def _listeners(port: int, candidates: Iterable[int]) -> set[int]:
    """The PIDs that own a socket listening on ``port``.

    One system-wide read where the platform allows it (its owner PIDs are
    known for every process sentinel may inspect); else each candidate is
    asked. A socket whose owner cannot be read proves nothing about anyone.
    """
    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return {pid for pid in candidates if _listens_on(pid, port)}
    return {
        c.pid
        for c in connections
        if c.pid is not None and c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
    }


def _is_descendant(pid: int, ancestor: int, parents: dict[int, int | None]) -> bool:
    return ancestor in _ancestors(pid, parents)


@dataclass(slots=True)
class ProcessWatcher:
    """Samples the process table and remembers engine processes per API server.

    The memory is what turns "no engine in the table" into ``gone``: an engine
    seen behind the current API server and now missing has died, while one
    never seen may simply not have started yet.
    """

    clock: Callable[[], float]
    patterns: ProcessPatterns = field(default_factory=ProcessPatterns)
    exclude_pids: frozenset[int] = field(default_factory=lambda: frozenset({os.getpid()}))
    # The target's port: only the process owning its listening socket is the
    # target's API server. None (no port known) falls back to the patterns
    # alone, for callers that know the table holds only their server.
    listen_port: int | None = None
    _identity: tuple[int, float] | None = None
    _seen: dict[tuple[int, float], ProcessInfo] = field(default_factory=dict)

    def sample(self) -> ProcessSnapshot:
        """Read the process table (blocking)."""
        rows = _read_table(self.exclude_pids)
        at = self.clock()
        parents = {row.pid: row.ppid for row in rows}
        # A process keeps the role it was first seen with: a zombie's name and
        # command line may no longer say what it was.
        known = {key: info.role for key, info in self._seen.items()}
        roles = {
            row.pid: known.get((row.pid, row.create_time))
            or self.patterns.classify(row.name, row.cmdline)
            for row in rows
        }

        api_row, attribution, detail = self._attribute(rows, roles, parents)
        api = None if api_row is None else api_row.info(ProcessRole.API_SERVER)

        identity = None if api is None else (api.pid, api.create_time)
        if identity != self._identity:
            self._identity = identity
            self._seen = {}

        def belongs(row: _Row) -> bool:
            # Behind a known API server, only its own descendants count; this
            # keeps unrelated vLLM processes (another pod's, a test's) out. A
            # process seen behind it earlier keeps counting once orphaned (a
            # worker whose engine died is reparented but still matters).
            if api_row is None:
                return attribution is Attribution.PATTERNS
            return (row.pid, row.create_time) in self._seen or _is_descendant(
                row.pid, api_row.pid, parents
            )

        engines = [
            row.info(ProcessRole.ENGINE_CORE)
            for row in rows
            if roles[row.pid] is ProcessRole.ENGINE_CORE and belongs(row)
        ]
        workers = [
            row.info(ProcessRole.WORKER)
            for row in rows
            if roles[row.pid] is ProcessRole.WORKER and belongs(row)
        ]

        present = {(p.pid, p.create_time) for p in engines + workers}
        vanished = [
            replace(p, state=ProcessState.GONE, cpu_seconds=None)
            for key, p in self._seen.items()
            if key not in present
        ]
        for p in engines + workers:
            self._seen[(p.pid, p.create_time)] = p
        engines += [p for p in vanished if p.role is ProcessRole.ENGINE_CORE]
        workers += [p for p in vanished if p.role is ProcessRole.WORKER]

        policy: SchedulingPolicy | None = None
        if api is not None:
            policy = scheduling_policy(api.cmdline) or SchedulingPolicy.FCFS
        else:
            for engine in engines:
                policy = policy or scheduling_policy(engine.cmdline)
        return ProcessSnapshot(
            at=at,
            api=api,
            engines=tuple(sorted(engines, key=lambda p: p.pid)),
            workers=tuple(sorted(workers, key=lambda p: p.pid)),
            scheduling_policy=policy,
            attribution=attribution,
            attribution_detail=detail,
        )

    def _attribute(
        self,
        rows: Sequence[_Row],
        roles: dict[int, ProcessRole | None],
        parents: dict[int, int | None],
    ) -> tuple[_Row | None, Attribution, str]:
        """The target's API server, how it was found, and why not when it was not."""
        # The API server is the top-most match: a fork of it (before its child
        # sets a title) or a process it spawns may match the same pattern.
        apis = [
            row
            for row in rows
            if roles[row.pid] is ProcessRole.API_SERVER
            and not any(
                roles.get(a) is ProcessRole.API_SERVER for a in _ancestors(row.pid, parents)
            )
        ]
        if self.listen_port is None:
            best = min(apis, key=lambda r: (r.create_time, r.pid), default=None)
            return best, Attribution.PATTERNS, ""
        owners = _listeners(self.listen_port, (row.pid for row in apis))
        # Any process owning the socket is the server, vLLM-titled or not; the
        # top-most owner, since children of a forking server share the socket.
        owning = [
            row
            for row in rows
            if row.pid in owners and not any(a in owners for a in _ancestors(row.pid, parents))
        ]
        best = min(owning, key=lambda r: (r.create_time, r.pid), default=None)
        if best is not None:
            return best, Attribution.LISTENING_SOCKET, ""
        kept = self._still_attributed(rows)
        if kept is not None:
            detail = f"kept: its listening socket of port {self.listen_port} is closed"
            return kept, Attribution.LISTENING_SOCKET, detail
        detail = f"no process owning the listening socket of port {self.listen_port} is visible"
        if apis:
            pids = ", ".join(str(row.pid) for row in apis)
            detail += f" (not adopted: vLLM API server(s) {pids} on other ports)"
        return None, Attribution.NONE, detail

    def _still_attributed(self, rows: Sequence[_Row]) -> _Row | None:
        """The API server attributed earlier, if the very same process still lives.

        A server whose listener closed is still the target's server: it is
        what the *listener down* rule needs to see alive. Only the same PID and
        start time are kept, and only while it is not a zombie; a process that
        never owned the socket is never adopted this way.
        """
        if self._identity is None:
            return None
        pid, created = self._identity
        for row in rows:
            if row.pid == pid and row.create_time == created:
                state = row.info(ProcessRole.API_SERVER).state
                return None if state in GONE_STATES else row
        return None

    async def sample_async(self) -> ProcessSnapshot:
        """:meth:`sample` off the event loop, so a slow ``/proc`` never stalls probes."""
        return await asyncio.to_thread(self.sample)
