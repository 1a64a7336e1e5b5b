"""A free loopback port for a server the harness or a test starts on a port it must know first.

Where a server can bind ``:0`` and report its port, that is better; this is for
servers that must keep one port across restarts (the target sentinel watches).
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

# Linux's ephemeral range: where the kernel picks a port for ``bind(:0)`` and for
# every outgoing connection. A port chosen below it is never handed out by the
# kernel, so a server that binds it seconds later (a simulated model load, a
# restarted container) does not find it taken by another test's listener.
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 10_000  # below the range: the ports of well-known local services stay clear
TRIES = 64


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now on ``host``, outside the kernel's ephemeral range.

    The socket is closed before returning, so another process could still bind
    the port in between; only another caller of this function would pick it,
    since the kernel never hands out a port outside its ephemeral range. Where
    the range cannot be read (not Linux) or leaves no room below it, the kernel
    picks one.
    """
    below = _ephemeral_floor()
    if below is not None and below > LOWEST:
        for _ in range(TRIES):
            port = random.randrange(LOWEST, below)  # a test port, not a secret
            if _bindable(host, port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _ephemeral_floor() -> int | None:
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return low


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True
