"""Reading the process table and listening sockets cheaply, through psutil.

Owns the reads behind :class:`~sentinel.evidence.processes.ProcessWatcher`
and what makes them affordable every second: a system-wide read of ``/proc``
(every process's stat and command line, every process's file descriptors for
the TCP tables) costs tens of milliseconds, while the same questions for the
handful of processes that make up the target cost a fraction of one. So the
watcher asks system-wide only to find its target, and per process after that;
and a command line, which a process changes only by retitling itself (which
changes its ``comm`` too), is read once per process, start time and name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import psutil

from sentinel.evidence.process_model import ProcessInfo, ProcessRole, ProcessState, process_state

# Everything but the command line comes from one read of /proc/<pid>/stat
# under psutil's oneshot (the name too, unless it fills all 15 bytes of comm).
_STAT_ATTRS = ["pid", "ppid", "name", "create_time", "status", "cpu_times"]

CmdlineKey = tuple[int, float, str]


@dataclass(slots=True)
class Row:
    """One process as read at one sample: the raw material of a ProcessInfo."""

    pid: int
    ppid: int | None
    name: str
    cmdline: tuple[str, ...]
    create_time: float
    status: str | None
    cpu_seconds: float | None

    @classmethod
    def from_info(cls, info: dict[str, Any], cmdline: Iterable[str] | None) -> Row:
        cpu = info.get("cpu_times")
        return cls(
            pid=int(info["pid"]),
            ppid=info.get("ppid"),
            name=info.get("name") or "",
            cmdline=tuple(arg for arg in (cmdline or ()) if arg),
            create_time=float(info.get("create_time") or 0.0),
            status=info.get("status"),
            cpu_seconds=None if cpu is None else float(cpu.user + cpu.system),
        )

    @property
    def key(self) -> tuple[int, float]:
        return self.pid, self.create_time

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


# The roles whose processes are never run under one of the same title.
_TITLED = (ProcessRole.ENGINE_CORE, ProcessRole.WORKER)


def unexeced_forks(rows: Iterable[Row], roles: Mapping[int, ProcessRole | None]) -> list[int]:
    """Children that are still their parent's copy: forked, not yet exec'd or retitled.

    A compiler (a Triton autotuning storm starts one after another) or a
    forked worker is, until its exec or its own title, a copy of the engine
    with the engine's title. Taken for an engine, it would be an engine that
    vanishes a moment later: dead. vLLM never runs an engine or a worker
    under a parent of the same role and title.
    """
    by_pid = {row.pid: row for row in rows}
    return [
        row.pid
        for row in by_pid.values()
        if roles.get(row.pid) in _TITLED
        and (parent := by_pid.get(row.ppid or -1)) is not None
        and roles.get(parent.pid) is roles.get(row.pid)
        and parent.cmdline == row.cmdline
    ]


def ancestors(pid: int, parents: dict[int, int | None]) -> list[int]:
    chain: list[int] = []
    current = parents.get(pid)
    while current is not None and current not in chain:
        chain.append(current)
        current = parents.get(current)
    return chain


def listens_on(pid: int, port: int) -> bool:
    """Whether this one process owns a socket listening on ``port`` (a cheap read)."""
    try:
        connections = psutil.Process(pid).net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return False
    return any(
        c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in connections
    )


def system_listeners(port: int) -> set[int] | None:
    """The PIDs owning a socket listening on ``port``, read system-wide (costly).

    None where the platform refuses the system-wide read. A socket whose owner
    cannot be read proves nothing about anyone, so it names no PID.
    """
    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    return {
        c.pid
        for c in connections
        if c.pid is not None and c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
    }


@dataclass(slots=True)
class ProcessTable:
    """Reads rows whole-table or by PID, remembering command lines.

    The memory holds live processes only: each whole-table read replaces it,
    and :meth:`forget_except` trims it to the processes still followed.
    """

    _cmdlines: dict[CmdlineKey, tuple[str, ...]] = field(default_factory=dict)

    def read_all(self, exclude: Iterable[int]) -> list[Row]:
        """Every visible process (one ``/proc`` walk)."""
        skip = set(exclude)
        rows: list[Row] = []
        cmdlines: dict[CmdlineKey, tuple[str, ...]] = {}
        for proc in psutil.process_iter(_STAT_ATTRS, ad_value=None):
            info = proc.info
            if info.get("pid") is None or info["pid"] in skip:
                continue
            rows.append(self._row(proc, info, cmdlines))
        self._cmdlines = cmdlines
        return rows

    def read(self, pids: Iterable[int]) -> list[Row]:
        """These processes only (those still alive), each from its own stat."""
        rows: list[Row] = []
        cmdlines: dict[CmdlineKey, tuple[str, ...]] = {}
        for pid in dict.fromkeys(pids):
            try:
                # A fresh handle each time: psutil's handle remembers the start
                # time it first read, so a reused PID would pass for the old one.
                proc = psutil.Process(pid)
                info = proc.as_dict(_STAT_ATTRS, ad_value=None)
            except (psutil.Error, OSError):
                continue
            rows.append(self._row(proc, info, cmdlines))
        self._cmdlines.update(cmdlines)
        return rows

    def descendants(self, pid: int) -> list[int]:
        """The PIDs below ``pid`` (a walk of every process's parent; not every tick)."""
        try:
            return [child.pid for child in psutil.Process(pid).children(recursive=True)]
        except (psutil.Error, OSError):
            return []

    def forget_except(self, pids: Iterable[int]) -> None:
        """Drop the command lines of processes no longer followed."""
        keep = set(pids)
        self._cmdlines = {key: cmd for key, cmd in self._cmdlines.items() if key[0] in keep}

    def _row(
        self,
        proc: psutil.Process,
        info: dict[str, Any],
        fresh: dict[CmdlineKey, tuple[str, ...]],
    ) -> Row:
        key = (int(info["pid"]), float(info.get("create_time") or 0.0), info.get("name") or "")
        cmdline = self._cmdlines.get(key)
        if cmdline is None:
            try:
                cmdline = tuple(proc.cmdline())
            except (psutil.Error, OSError):
                cmdline = ()
        # An empty command line (a zombie's, or one unreadable for a moment)
        # is asked again next time rather than remembered.
        if cmdline:
            fresh[key] = cmdline
        return Row.from_info(info, cmdline)
