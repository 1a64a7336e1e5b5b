"""Which process is the target's API server: by the socket's owner, else by its command line.

The first way reads who owns the target's listening socket (every candidate's
``/proc/<pid>/fd``): only that process is the server. In the shipped pod
sentinel runs as uid 10001 beside a root vLLM and the kernel refuses it
another user's descriptors, so a second way asks only what any uid may read:

1. the socket table (:mod:`sentinel.evidence.listen_table`): a socket listens
   on the target's port, created by uid U, with inode I;
2. the candidates: vLLM API servers by their command line, the top-most of a
   process tree (a server's own children, such as the API-server processes
   of ``--api-server-count`` that share its socket, are part of it);
3. a candidate is the server only when its command line claims the port
   (:mod:`sentinel.evidence.server_port`: ``--port``, ``--config``, vLLM's
   default 8000), its uids include U, and its own network namespace holds the
   very socket I (``/proc/<pid>/net/tcp*``, readable by anyone);
4. exactly one candidate may pass: two unrelated servers both claiming the
   port are ambiguous and neither is adopted.

A server whose port cannot be told (``--port 0``, an unreadable ``--config``)
is never adopted: attributing the wrong server would judge an unrelated
engine's processes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from sentinel.evidence.listen_table import ListeningSocket, listening, process_net
from sentinel.evidence.process_table import Row, ancestors, listens_on, system_listeners
from sentinel.evidence.server_port import MAX_CONFIG_BYTES, claimed_port

PROC = Path("/proc")


def fd_owners(port: int, apis: Sequence[Row], parents: dict[int, int | None]) -> set[int]:
    """The PIDs shown to own a socket listening on ``port`` (their descriptors read).

    The vLLM-titled candidates (and their ancestors, which may share the
    socket) are asked first, one cheap read each; every process's sockets are
    read only when none of them owns it, since the owner may wear no vLLM
    title at all. Where that system-wide read is refused, the candidates'
    answer stands.
    """
    owners = {row.pid for row in apis if listens_on(row.pid, port)}
    if owners:
        return owners | {
            a for pid in owners for a in ancestors(pid, parents) if listens_on(a, port)
        }
    found = system_listeners(port)
    return set() if found is None else found


def top_most(
    rows: Sequence[Row], member: Callable[[int], bool], parents: dict[int, int | None]
) -> list[Row]:
    """The rows ``member`` accepts that have no accepted ancestor: one per process tree.

    A server's children (a fork before it sets a title, the API-server
    processes sharing its socket) belong to it.
    """
    return [
        row
        for row in rows
        if member(row.pid) and not any(member(a) for a in ancestors(row.pid, parents))
    ]


def process_uids(pid: int) -> frozenset[int]:
    """A process's real, effective and saved uids (empty when unreadable)."""
    try:
        return frozenset(psutil.Process(pid).uids())
    except (psutil.Error, OSError):
        return frozenset()


def config_reader(pid: int, proc_root: Path = PROC) -> Callable[[str], tuple[str | None, str]]:
    """Reads a server's ``--config`` file as the server sees it: through its root or cwd.

    ``/proc/<pid>/root`` and ``cwd`` need ptrace access to the process (refused
    to another uid without ``CAP_SYS_PTRACE``). An absolute path is then read
    in sentinel's own filesystem, which holds the same file only when the same
    volume is mounted at the same path in both containers; the detail says so.
    """

    def read(path: str) -> tuple[str | None, str]:
        base = proc_root / str(pid) / ("root" if path.startswith("/") else "cwd")
        try:
            with open(base / path.lstrip("/"), encoding="utf-8", errors="replace") as f:
                return f.read(MAX_CONFIG_BYTES), f"read through {base}"
        except PermissionError:
            refused = f"{base} is refused without ptrace access (CAP_SYS_PTRACE)"
        except OSError as exc:
            return None, f"{exc.strerror or exc}"
        if not path.startswith("/"):
            return None, refused
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                return f.read(MAX_CONFIG_BYTES), f"{refused}; read at the same path in sentinel's"
        except OSError as exc:
            return None, f"{refused}; not readable in sentinel's container: {exc.strerror or exc}"

    return read


def socket_owner_unreadable(port: int, sockets: Sequence[ListeningSocket]) -> str:
    """What could not be read when a socket listens but no visible process is shown to own it."""
    uids = ", ".join(str(u) for u in sorted({s.uid for s in sockets}))
    me = os.geteuid()
    if me != 0 and any(s.uid != me for s in sockets):
        return (
            f"the owner of the socket listening on port {port} (uid {uids}): another user's "
            f"/proc/<pid>/fd is refused to uid {me} (it takes CAP_SYS_PTRACE and "
            "CAP_DAC_READ_SEARCH, or the server's uid)"
        )
    return (
        f"the owner of the socket listening on port {port} (uid {uids}): no visible process "
        "holds it (is the PID namespace shared?)"
    )


@dataclass(frozen=True, slots=True)
class CommandLineMatch:
    """The command-line attribution: the server (or None), how it matched or why not."""

    row: Row | None
    detail: str
    uids: frozenset[int] = frozenset()
    sockets: tuple[ListeningSocket, ...] = ()


def by_command_line(
    port: int,
    apis: Sequence[Row],
    proc_root: Path = PROC,
    uids_of: Callable[[int], frozenset[int]] = process_uids,
) -> CommandLineMatch:
    """The one top-most vLLM API server that claims ``port`` and holds its socket (module doc)."""
    sockets = listening(port, proc_root / "net")
    if sockets is None:
        return CommandLineMatch(None, "the socket tables (/proc/net/tcp, tcp6) cannot be read")
    if not sockets:
        pids = ", ".join(str(row.pid) for row in apis)
        others = f" (not adopted: vLLM API server(s) {pids} on other ports)" if pids else ""
        return CommandLineMatch(None, f"nothing listens on port {port}{others}")
    socket_uids = {s.uid for s in sockets}
    inodes = {s.inode for s in sockets}
    matched: list[tuple[Row, str, frozenset[int]]] = []
    rejected: list[str] = []
    for row in apis:
        claim = claimed_port(row.cmdline, config_reader(row.pid, proc_root))
        if claim.port != port:
            rejected.append(f"{row.pid}: {claim.how}")
            continue
        uids = uids_of(row.pid)
        if not uids & socket_uids:
            theirs = ", ".join(str(u) for u in sorted(uids)) or "unreadable"
            rejected.append(f"{row.pid}: uid {theirs}, the socket's {sorted(socket_uids)}")
            continue
        held = listening(port, process_net(row.pid, proc_root))
        if held is None or not {s.inode for s in held} & inodes:
            rejected.append(f"{row.pid}: the socket is not in its network namespace")
            continue
        matched.append((row, claim.how, uids))
    if len(matched) == 1:
        row, how, uids = matched[0]
        detail = (
            f"pid {row.pid} by its command line ({how}) and uid {sorted(uids & socket_uids)[0]}, "
            f"the uid of the socket listening on port {port} (inode "
            f"{', '.join(str(i) for i in sorted(inodes))}), held in its network namespace"
        )
        return CommandLineMatch(row, detail, uids, sockets)
    if matched:
        pids = ", ".join(str(row.pid) for row, _, _ in matched)
        return CommandLineMatch(
            None, f"ambiguous: vLLM API servers {pids} all claim port {port}; none adopted"
        )
    why = f" (not adopted: {'; '.join(rejected)})" if rejected else " (no vLLM API server visible)"
    return CommandLineMatch(None, f"no vLLM API server's command line claims port {port}{why}")


def holds_socket(port: int, pid: int, uids: frozenset[int], proc_root: Path = PROC) -> bool:
    """Whether a socket created by one of ``uids`` listens on ``port`` in ``pid``'s namespace."""
    held = listening(port, process_net(pid, proc_root))
    return bool(held) and any(s.uid in uids for s in held or ())
