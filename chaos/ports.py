"""A free loopback port for a server the harness starts on a port it must know first.

Where a server can bind ``:0`` and report its port, that is better; this is for
servers that must keep one port across restarts (the target sentinel watches).
"""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago (the caller binds it soon)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
