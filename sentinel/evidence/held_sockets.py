"""Connections the server holds without reading them: a wedged API-server process.

With ``--api-server-count N`` vLLM's API-server processes share one listening
socket: a process whose event loop is stuck accepts nothing new (its peers
take every new connection, so sentinel's fresh canaries pass), but the
connections it already holds (a router's pooled keep-alive connections)
receive requests it never reads. The kernel shows those bytes: the socket
table (``/proc/<pid>/net/tcp*``, readable by any uid) gives each connection's
state, receive queue and inode. A connection to the server's port whose
receive queue stays non-empty and never shrinks is one no process reads.

Naming the process that holds it needs its descriptors (``/proc/<pid>/fd``),
which the kernel refuses a sidecar running as another user: there the
connection is still seen, and reported without an owner.

A working process leaves bytes unread too: uvicorn (vLLM's HTTP server)
pauses reading a connection whose client pipelines a request behind one
still being answered, until that answer ends, so a client pipelining behind
a long stream holds unread bytes on a healthy server for minutes. What a
stuck loop cannot do is accept or close a connection: where the holder's
descriptors are readable, a change in its set of connections to the port
(sentinel's own ``/health`` poll opens a fresh connection every poll) shows
it serving, and the unread connection's clock starts again.

:class:`UnreadTracker` keeps, per connection, since when it has been unread;
the ledger feeds it each process sample and the verdict's API-server rule
(:mod:`sentinel.verdict.api_server`) judges the oldest.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sentinel.evidence.listen_table import (
    TABLES,
    TCP_LISTEN,
    TableRow,
    families_of,
    table_rows,
)

# The kernel's TCP states, as the tables print them: a connection still open
# (ESTABLISHED), or closed by the client and not yet by the server (CLOSE_WAIT:
# the client gave up waiting, the server never read nor closed).
CLOSE_WAIT = "08"
_HELD_STATES = frozenset({"01", CLOSE_WAIT})
MAX_FDS = 65536  # descriptors read per process when naming an owner


@dataclass(frozen=True, slots=True)
class HeldSocket:
    """A connection to the server's port with request bytes no process has read."""

    inode: int
    unread: int  # bytes in the receive queue
    closed_by_client: bool  # CLOSE_WAIT: the client gave up; the server never closed
    owner: int | None = None  # the PID holding it (None: unknown or unreadable)


def unread_connections(
    port: int, net: Path
) -> tuple[tuple[HeldSocket, ...], frozenset[int]] | None:
    """Server-side connections on ``port`` holding unread bytes, and every held connection's
    inode (None: no table readable)."""
    rows = table_rows(port, net)
    return None if rows is None else held_in(rows)


def held_in(rows: Sequence[TableRow]) -> tuple[tuple[HeldSocket, ...], frozenset[int]]:
    """The connections among ``rows`` holding unread bytes, and every connection's inode."""
    unread = tuple(
        HeldSocket(r.inode, r.unread, r.state == CLOSE_WAIT)
        for r in rows
        if r.state in _HELD_STATES and r.unread > 0 and r.inode > 0
    )
    return unread, frozenset(r.inode for r in rows if r.state != TCP_LISTEN and r.inode > 0)


def socket_inodes(pid: int, proc: Path = Path("/proc")) -> frozenset[int] | None:
    """The socket inodes a process holds (None: its descriptors are unreadable)."""
    fd_dir = proc / str(pid) / "fd"
    inodes: set[int] = set()
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return None
    for name in names[:MAX_FDS]:
        try:
            target = os.readlink(fd_dir / name)
        except OSError:
            continue
        if target.startswith("socket:["):
            try:
                inodes.add(int(target[8:-1]))
            except ValueError:
                continue
    return frozenset(inodes)


def with_owners(
    held: Sequence[HeldSocket],
    pids: Iterable[int],
    connections: Iterable[int] = (),
    proc: Path = Path("/proc"),
) -> tuple[tuple[HeldSocket, ...], dict[int, frozenset[int]]]:
    """``held`` with each holder among ``pids`` named where readable, and what each serves.

    The second part maps each readable pid to the ``connections`` (inodes of
    the port's connections) among its descriptors.
    """
    if not held:
        return (), {}
    owners: dict[int, int] = {}
    served: dict[int, frozenset[int]] = {}
    ports = frozenset(connections)
    for pid in pids:
        inodes = socket_inodes(pid, proc)
        if inodes is None:
            continue
        served[pid] = inodes & ports
        for inode in inodes:
            owners.setdefault(inode, pid)
    named = tuple(
        HeldSocket(h.inode, h.unread, h.closed_by_client, owners.get(h.inode)) for h in held
    )
    return named, served


@dataclass(frozen=True, slots=True)
class Unread:
    """The connection unread the longest: since when, what it holds, who holds it."""

    since: float
    sockets: int  # connections unread at the last sample
    unread: int  # bytes waiting on the oldest
    owner: int | None


class UnreadTracker:
    """Since when each connection has held unread bytes that never shrank.

    A receive queue that shrinks between samples is being read (a large body
    arriving slowly), so its clock starts again; one that vanishes from the
    table was read or closed. A sample without the table (``None``) says
    nothing and keeps every clock.
    """

    def __init__(self) -> None:
        self._held: dict[int, tuple[float, HeldSocket]] = {}  # inode -> (unread since, last seen)
        self._served: Mapping[int, frozenset[int]] = {}  # pid -> its connections, last sample

    def observe(
        self,
        held: Sequence[HeldSocket] | None,
        now: float,
        served: Mapping[int, frozenset[int]] | None = None,
    ) -> None:
        """One sample; ``served``: each readable holder's connections (see :func:`with_owners`)."""
        if held is None:
            return
        served = served or {}
        serving = {
            pid
            for pid, connections in served.items()
            if pid in self._served and connections != self._served[pid]
        }
        before = self._held
        self._held, self._served = {}, served
        for h in held:
            since, last = before.get(h.inode, (now, h))
            restart = h.unread < last.unread or h.owner in serving
            self._held[h.inode] = (now if restart else since, h)

    def reset(self) -> None:
        self._held, self._served = {}, {}

    def oldest(self) -> Unread | None:
        """The connection unread the longest, or None when every one is read."""
        if not self._held:
            return None
        since, h = min(self._held.values(), key=lambda entry: entry[0])
        return Unread(since, len(self._held), h.unread, h.owner)


# The connections holding unread bytes (None: cannot tell), and what each holder serves.
Held = tuple[tuple[HeldSocket, ...] | None, dict[int, frozenset[int]]]


@dataclass(slots=True)
class PacedHeld:
    """The held connections of one server, its socket table read at a pace.

    The table lists every connection of the server's network namespace, and its
    read was the largest share of the idle sidecar's CPU. While no connection
    holds unread bytes it is read every ``every`` seconds; once one does, at
    every call, until none does: an unread connection matters only after the
    API window (60 s by default), so a late first sight costs little.
    """

    clock: Callable[[], float]
    every: float = 5.0
    # Each table read walks the kernel's whole connection hash (3 ms per table on
    # a 24 GiB machine, more on a bigger node, whatever the sockets), so only the
    # tables the server listens in are read, all of them every ``relearn`` reads.
    relearn: int = 12
    _due: float = -math.inf
    _last: tuple[int, Held] | None = None  # the API server's pid, and what was read
    _families: tuple[str, ...] = ()  # the tables its listening sockets are in (): unknown
    _reads: int = 0

    def read(self, api: int, port: int, net: Path, pids: Sequence[int]) -> Held:
        now, last = self.clock(), self._last
        if last is not None and last[0] == api and last[1][0] == () and now < self._due:
            return last[1]  # nothing was held at the last read
        if last is None or last[0] != api or self._reads % self.relearn == 0:
            self._families = ()
        rows = table_rows(port, net, self._families or TABLES)
        self._reads += 1
        if rows is None:
            self._last, self._families = None, ()
            return None, {}
        self._families = families_of(rows) if not self._families else self._families
        held, connections = held_in(rows)
        result: Held = with_owners(held, pids, connections)
        self._last, self._due = (api, result), now + self.every
        return result
