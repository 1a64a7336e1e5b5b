"""The inet sockets of the processes a bundle describes, read once for the whole pod.

A connection is shown by its descriptor, state and both ends, so a bundle
tells an API server waiting on its engine's socket from one holding clients.
"""

from __future__ import annotations

from typing import Any

import psutil

# Above this many PIDs (a node, not a pod) sockets are read per process: the
# namespace-wide read visits every process's descriptors.
SOCKET_TABLE_MAX_PIDS = 256


def sockets_by_pid() -> dict[int, list[Any]] | None:
    """Every inet socket by owning PID, read once (None: read per process instead).

    A per-process read parses the network namespace's whole socket tables
    again for each process, CPU work that holds the GIL while probes wait.
    """
    try:
        if len(psutil.pids()) > SOCKET_TABLE_MAX_PIDS:
            return None
        table: dict[int, list[Any]] = {}
        for conn in psutil.net_connections(kind="inet"):
            if conn.pid is not None:
                table.setdefault(conn.pid, []).append(conn)
    except (psutil.Error, OSError):
        return None
    return table


def connection_json(conn: Any) -> dict[str, Any]:
    """One psutil connection as the bundle shows it."""
    laddr = f"{conn.laddr.ip}:{conn.laddr.port}" if conn.laddr else None
    raddr = f"{conn.raddr.ip}:{conn.raddr.port}" if conn.raddr else None
    return {"fd": conn.fd, "status": conn.status, "local": laddr, "remote": raddr}
