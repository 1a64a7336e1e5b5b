"""The listening TCP sockets of a network namespace, read from ``/proc/net/tcp`` and ``tcp6``.

Owns the one read that works whoever owns the socket. The kernel refuses a
non-root sidecar another user's ``/proc/<pid>/fd`` (so psutil cannot say which
process owns a socket), but every socket's table row stays readable: its
local port, state, the uid that created it and its inode. A process's own
``/proc/<pid>/net/tcp*`` shows the table of *its* network namespace, and an
inode names one socket on the whole host, so a candidate whose namespace holds
the very socket sentinel sees is in the same namespace (another pod's server on
the same port is not).

psutil parses these tables only on the way to mapping sockets to processes
(every process's descriptors, the read that is refused here), so the handful
of fields needed are read here directly: each line is split on whitespace,
nothing else is parsed, and a table is capped in size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

TCP_LISTEN = "0A"  # the kernel's TCP_LISTEN state, as the tables print it
MAX_TABLE_BYTES = 16 * 1024 * 1024  # a node's worth of sockets; beyond this, the rest is unread
TABLES = ("tcp", "tcp6")


@dataclass(frozen=True, slots=True)
class ListeningSocket:
    """One listening socket: its port, the uid that created it and its inode."""

    port: int
    uid: int
    inode: int
    family: str  # "tcp" or "tcp6"


@dataclass(frozen=True, slots=True)
class TableRow:
    """One socket of the table on a port: its state, unread bytes, creator uid and inode."""

    port: int
    state: str  # the kernel's state, as the table prints it ("0A": listening)
    unread: int  # bytes in the receive queue
    uid: int
    inode: int  # 0: no process holds it yet (a connection waiting to be accepted)
    family: str  # "tcp" or "tcp6"


def _lines_on(text: str, port: int) -> list[str]:
    """The table lines that name ``port`` (as a local or a remote address).

    A pod busy with clients has thousands of rows; ``str.find`` skips to the
    port's in C, so the GIL is not held through a Python loop over all of them
    (the probe listener's thread waits on it: :mod:`sentinel.serve.probe_thread`).
    """
    needle = f":{port:04X} "
    lines: list[str] = []
    at = text.find(needle)
    while at != -1:
        start = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at)
        end = len(text) if end == -1 else end
        lines.append(text[start:end])
        at = text.find(needle, end)
    return lines


def _parse(text: str, family: str, port: int) -> list[TableRow]:
    found: list[TableRow] = []
    for line in _lines_on(text, port):
        fields = line.split()
        # sl local rem st tx:rx tr:tm retrnsmt uid timeout inode ...
        if len(fields) < 10:
            continue
        try:
            if int(fields[1].rpartition(":")[2], 16) != port:
                continue  # the port is the remote end's
            unread = int(fields[4].partition(":")[2], 16)
            found.append(TableRow(port, fields[3], unread, int(fields[7]), int(fields[9]), family))
        except ValueError:
            continue
    return found


def table_rows(
    port: int, net: Path = Path("/proc/net"), families: Sequence[str] = TABLES
) -> tuple[TableRow, ...] | None:
    """Every socket on local port ``port`` in the namespace whose tables are under ``net``.

    None when no table could be read at all (a process gone, or a kernel
    without them); a missing ``tcp6`` (IPv6 off) is no table, not an error.
    ``families``: the tables to read (each read walks the kernel's whole
    connection hash, milliseconds whatever the sockets: :func:`families_of`).
    """
    found: list[TableRow] = []
    read_any = False
    for family in families:
        try:
            with open(net / family, encoding="ascii", errors="replace") as table:
                text = table.read(MAX_TABLE_BYTES)
        except OSError:
            continue
        read_any = True
        found.extend(_parse(text, family, port))
    return tuple(found) if read_any else None


def families_of(rows: Sequence[TableRow]) -> tuple[str, ...]:
    """The tables a server listening in ``rows`` can hold connections in: those of its
    listening sockets (a dual-stack ``[::]`` listener's IPv4 clients are in ``tcp6``);
    every table where none listens."""
    listening = tuple(
        f for f in TABLES if any(r.family == f and r.state == TCP_LISTEN for r in rows)
    )
    return listening or TABLES


def listening(port: int, net: Path = Path("/proc/net")) -> tuple[ListeningSocket, ...] | None:
    """The sockets listening on ``port`` in the namespace whose tables are under ``net``.

    ``net`` is ``/proc/net`` for sentinel's own namespace and
    ``/proc/<pid>/net`` for a process's; None when no table could be read.
    """
    rows = table_rows(port, net)
    if rows is None:
        return None
    return tuple(
        ListeningSocket(r.port, r.uid, r.inode, r.family) for r in rows if r.state == TCP_LISTEN
    )


def process_net(pid: int, proc_root: Path = Path("/proc")) -> Path:
    """Where a process's own network namespace's tables are (readable for any uid)."""
    return proc_root / str(pid) / "net"
