"""A free loopback port for a server the harness or a test starts on a port it must know first.

Where a server can bind ``:0`` and report its port, that is better; this is for
servers that must keep one port across restarts (the target sentinel watches).
"""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel just handed out on ``host`` and that nothing listens on now.

    The socket is closed before returning, so another process could take the
    port in between; the kernel cycles through its ephemeral range before it
    reuses a number, which makes that rare enough for tests and scenarios.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
