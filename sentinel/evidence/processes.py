"""The vLLM processes visible through the pod's shared PID namespace.

Owns everything the daemon learns from ``/proc`` (through psutil, and only
here): which process is the API server and since when (a new PID or start time
is a server restart), the state of the engine and worker processes (a stopped,
zombie or vanished engine behind a live API server is a dead engine that vLLM's
own ``/health`` may not report for minutes), and the scheduling policy the
server was started with, which decides whether a canary's ``priority`` is
honoured at all.

Attribution (:mod:`sentinel.evidence.attribution`): only the process owning
the target's listening socket is its API server, and only its descendants are
its engine and workers; where the owner cannot be read (another user's
descriptors), the socket's uid and namespace and the server's command line
tie them. Another vLLM is never adopted, not even as the only candidate; when
nothing can be attributed the snapshot says why and process evidence is off
(:mod:`sentinel.evidence.process_access` says what each missing read costs).

Following the target is cheap once it is found: each sample reads only the
attributed server, the descendants it had at the last recheck and the
processes seen behind it (:mod:`sentinel.evidence.process_table`). Rechecks
(descendants, the socket) come every ``recheck_interval``, doubling up to
``recheck_max`` while quiet, and at once when the family changes or the port
refuses (:meth:`ProcessWatcher.port_refused`). The whole table is read only
while there is no server to follow, with a growing pause between reads. A
child still its engine's copy (mid-fork) is not an engine. psutil blocks:
the daemon calls :meth:`ProcessWatcher.sample_async`.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from sentinel.evidence.attribution import (
    by_command_line,
    fd_owners,
    holds_socket,
    socket_owner_unreadable,
    top_most,
)
from sentinel.evidence.compilers import compilers_under
from sentinel.evidence.held_sockets import Held, PacedHeld
from sentinel.evidence.listen_table import listening
from sentinel.evidence.process_access import AccessMemo
from sentinel.evidence.process_model import (
    GONE_STATES,
    Attribution,
    ProcessInfo,
    ProcessPatterns,
    ProcessRole,
    ProcessSnapshot,
    ProcessState,
    SchedulingPolicy,
    process_state,
    reasoning_parser,
    scheduling_policy,
)
from sentinel.evidence.process_table import ProcessTable, Row, ancestors, listens_on, unexeced_forks

__all__ = ["ProcessWatcher"]

PROC = Path("/proc")


def _halted(row: Row) -> bool:
    """Stopped, a zombie or unreadable: a state a sample may see once and a recheck explain."""
    state = process_state(row.status)
    return state in GONE_STATES or state in (ProcessState.STOPPED, ProcessState.UNKNOWN)


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
    # The target's port (its API server owns the listening socket); None: patterns alone.
    listen_port: int | None = None
    # Paces the costly reads: the first search again after rescan_after s, each
    # later one twice as late up to rescan_max; a followed server's descendants and
    # socket again after recheck_interval, each quiet one doubling up to recheck_max.
    scan_clock: Callable[[], float] = time.monotonic
    rescan_after: float = 1.0
    rescan_max: float = 16.0
    recheck_interval: float = 15.0
    recheck_max: float = 120.0
    held_every: float = 5.0  # the socket table's pace while nothing is held (PacedHeld)
    # py-spy's path, for the stacks evidence (its file capability), or None.
    stack_tool: str | None = None
    _by: Attribution = Attribution.LISTENING_SOCKET  # how the followed server was found
    _how: str = ""  # and the detail that says so
    _uids: frozenset[int] = frozenset()  # its uids, when found by its command line
    _unreadable: tuple[str, ...] = ()
    _kept_now: bool = False  # the last search kept a server whose listener closed
    _access: AccessMemo = field(default_factory=AccessMemo)
    _identity: tuple[int, float] | None = None
    _seen: dict[tuple[int, float], ProcessInfo] = field(default_factory=dict)
    _table: ProcessTable = field(default_factory=ProcessTable)
    _rescan: float = 0.0
    _scan_due: float = -math.inf
    _detail: str = ""
    _tree: tuple[int, ...] = ()
    _tree_root: tuple[int, float] | None = None
    _recheck_due: float = -math.inf
    _recheck_pause: float = 0.0  # the pause before the next recheck, once one was made
    _family_seen: frozenset[tuple[int, float, bool]] = frozenset()
    _listening: bool = False
    _paced: PacedHeld = field(init=False)

    def __post_init__(self) -> None:
        self._paced = PacedHeld(self.scan_clock, self.held_every)

    def sample(self) -> ProcessSnapshot:
        """Read the target's processes (blocking)."""
        rows, settled = self._rows()
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
        roles.update(dict.fromkeys(unexeced_forks(rows, roles)))

        if settled is None:
            api_row, attribution, detail = self._attribute(rows, roles, parents)
            self._searched(rows, api_row, detail, parents)
        else:
            api_row, attribution, detail = settled
        api = None if api_row is None else api_row.info(ProcessRole.API_SERVER)

        identity = None if api is None else (api.pid, api.create_time)
        if identity != self._identity:
            self._identity = identity
            self._seen = {}

        def belongs(row: Row) -> bool:
            # Behind a known API server, only its own descendants count; this
            # keeps unrelated vLLM processes (another pod's, a test's) out. A
            # process seen behind it earlier keeps counting once orphaned (a
            # worker whose engine died is reparented but still matters).
            if api_row is None:
                return attribution is Attribution.PATTERNS
            return (row.pid, row.create_time) in self._seen or api_row.pid in ancestors(
                row.pid, parents
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
        api_processes = tuple(
            sorted(
                (
                    row.info(ProcessRole.API_PROCESS)
                    for row in rows
                    if roles[row.pid] is ProcessRole.API_PROCESS and belongs(row)
                ),
                key=lambda p: p.pid,
            )
        )
        held, served = self._held(api, api_processes)
        # Shown, never judged: a data-parallel coordinator carries no request.
        coordinators = [
            row.info(ProcessRole.COORDINATOR)
            for row in rows
            if roles[row.pid] is ProcessRole.COORDINATOR and belongs(row)
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
        parser: str | None = None
        if api is not None:
            policy = scheduling_policy(api.cmdline) or SchedulingPolicy.FCFS
            parser = reasoning_parser(api.cmdline)
        else:
            for engine in engines:
                policy = policy or scheduling_policy(engine.cmdline)
                parser = parser or reasoning_parser(engine.cmdline)
        live = [p.pid for p in engines + workers if p.state not in GONE_STATES]
        access = self._access.probe(
            (identity, attribution, live[:1]),
            None if api is None else api.pid,
            live,
            command_line=api is not None and bool(api.cmdline),
            stack_tool=self.stack_tool,
        )
        return ProcessSnapshot(
            unreadable=self._unreadable if attribution is not Attribution.PATTERNS else (),
            access=access,
            compilers=compilers_under(live) if live else (),
            api_processes=api_processes,
            held=held,
            served=served,
            at=at,
            api=api,
            engines=tuple(sorted(engines, key=lambda p: p.pid)),
            workers=tuple(sorted(workers, key=lambda p: p.pid)),
            coordinators=tuple(sorted(coordinators, key=lambda p: p.pid)),
            scheduling_policy=policy,
            reasoning_parser=parser,
            attribution=attribution,
            attribution_detail=detail,
        )

    def _held(self, api: ProcessInfo | None, children: Sequence[ProcessInfo]) -> Held:
        """The connections holding unread bytes, holders named, and what each holder serves."""
        port, net = self.listen_port, PROC / str(api.pid if api else 0) / "net"
        if api is None or port is None:
            return None, {}
        if not children:  # alone, no peer covers it: its stuck loop fails every canary
            return (), {}
        return self._paced.read(api.pid, port, net, [api.pid, *(p.pid for p in children)])

    def _rows(self) -> tuple[list[Row], tuple[Row | None, Attribution, str] | None]:
        """The rows to judge, and the attribution when following the known server settled it."""
        port = self.listen_port
        if port is None:
            return self._table.read_all(self.exclude_pids), None
        now = self.scan_clock()
        api = self._followed()
        if api is None and self._identity is not None:
            # The server is gone: look for its successor now, then back off.
            self._scan_due, self._rescan = now, self.rescan_after
        if api is not None:
            rows = self._family(api, now, port)
            if self._listening:
                return rows, (api, self._by, self._how)
            if now < self._scan_due:
                return rows, (api, self._by, self._kept())
        elif now < self._scan_due:
            return [], (None, Attribution.NONE, self._detail)
        step = max(self._rescan, self.rescan_after)
        self._scan_due, self._rescan = now + step, min(step * 2, self.rescan_max)
        return self._table.read_all(self.exclude_pids), None

    def _followed(self) -> Row | None:
        """The attributed server, read by PID, while the very same process lives."""
        if self._identity is None:
            return None
        pid, created = self._identity
        rows = self._table.read([pid])
        if not rows or rows[0].create_time != created:
            return None
        return None if rows[0].info(ProcessRole.API_SERVER).state in GONE_STATES else rows[0]

    def _family(self, api: Row, now: float, port: int) -> list[Row]:
        """The server, its descendants and the processes seen behind it, each read by PID.

        A child born since the last recheck waits for the next one, and so
        does a closed listener; every known process is read each sample.
        """
        if self._tree_root != api.key or now >= self._recheck_due:
            listening = self._holds(api.pid, port)
            tree = tuple(self._table.descendants(api.pid))
            quiet = (
                self._tree_root == api.key and listening == self._listening and tree == self._tree
            )
            self._listening, self._tree = listening, tree
            pause = min(self._recheck_pause * 2, self.recheck_max) if quiet else 0.0
            self._recheck_pause = max(pause, self.recheck_interval)
            self._tree_root, self._recheck_due = api.key, now + self._recheck_pause
        others = [*self._tree, *(pid for pid, _ in self._seen)]
        rows = [api, *self._table.read(p for p in others if p != api.pid)]
        self._table.forget_except(row.pid for row in rows)
        # Only what a recheck could explain: membership, and a process stopping
        # or dying (a busy engine flips between running and sleeping all along).
        family = frozenset((*row.key, _halted(row)) for row in rows)
        if family != self._family_seen:
            # A process gone, stopped, reaped or new: look again soon, not in minutes.
            self._family_seen = family
            self._recheck_pause = self.recheck_interval
            self._recheck_due = min(self._recheck_due, now + self.recheck_interval)
        return rows

    def port_refused(self) -> None:
        """The target's port refused a connection: ask about the socket at the next sample.

        The evidence loops see a closed listener at once; without this hint the
        watcher would learn it only at its next recheck.
        """
        self._recheck_due = -math.inf
        self._recheck_pause = 0.0

    def _searched(
        self,
        rows: Sequence[Row],
        api_row: Row | None,
        detail: str,
        parents: dict[int, int | None],
    ) -> None:
        """Remember what a whole-table search found, for the samples that follow it."""
        self._detail = detail
        if api_row is None:
            return
        if not self._kept_now:
            self._rescan = self.rescan_after
        self._listening = not self._kept_now
        self._tree = tuple(r.pid for r in rows if api_row.pid in ancestors(r.pid, parents))
        self._recheck_pause = self.recheck_interval
        self._tree_root, self._recheck_due = api_row.key, self.scan_clock() + self.recheck_interval

    def _kept(self) -> str:
        return f"kept: its listening socket of port {self.listen_port} is closed"

    def _attribute(
        self,
        rows: Sequence[Row],
        roles: dict[int, ProcessRole | None],
        parents: dict[int, int | None],
    ) -> tuple[Row | None, Attribution, str]:
        """The target's API server, how it was found, and why not when it was not."""
        # The API server is the top-most match: a fork of it (before its child
        # sets a title) or a process it spawns may match the same pattern.
        apis = top_most(rows, lambda pid: roles.get(pid) is ProcessRole.API_SERVER, parents)
        if self.listen_port is None:
            best = min(apis, key=lambda r: (r.create_time, r.pid), default=None)
            return best, Attribution.PATTERNS, ""
        port, self._kept_now = self.listen_port, False
        sockets = listening(port)
        # Nothing listening: no owner to look for (and no every-process read).
        owners = set() if sockets == () else fd_owners(port, apis, parents)
        # Any process owning the socket is the server, vLLM-titled or not; the
        # top-most owner, since children of a forking server share the socket.
        owning = top_most(rows, owners.__contains__, parents)
        best = min(owning, key=lambda r: (r.create_time, r.pid), default=None)
        if best is not None:
            self._by, self._how, self._unreadable = Attribution.LISTENING_SOCKET, "", ()
            return best, self._by, ""
        kept = self._still_attributed(rows)
        if kept is not None:
            self._kept_now = True
            return kept, self._by, self._kept()
        # The owner unreadable (another user's descriptors): the socket's uid and
        # namespace and the candidates' command lines (sentinel.evidence.attribution).
        self._unreadable = (socket_owner_unreadable(port, sockets),) if sockets else ()
        match = by_command_line(port, apis)
        if match.row is not None:
            self._by, self._how, self._uids = Attribution.COMMAND_LINE, match.detail, match.uids
            return match.row, self._by, match.detail
        detail = f"no process owning the listening socket of port {port} is visible"
        return None, Attribution.NONE, f"{detail}: {match.detail}"

    def _holds(self, pid: int, port: int) -> bool:
        """Whether the followed server still holds a socket listening on ``port``."""
        if self._by is Attribution.COMMAND_LINE:
            return holds_socket(port, pid, self._uids)
        return listens_on(pid, port)

    def _still_attributed(self, rows: Sequence[Row]) -> Row | None:
        """The API server attributed earlier, if the very same process still lives.

        A server whose listener closed is still the target's (the *listener
        down* rule needs it alive): the same PID and start time, not a zombie.
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
