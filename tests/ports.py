"""Local TCP ports for tests.

A test that needs a port before its server starts (a subprocess told
``--port N``, a server restarted on the same port) or a port where nothing
listens (a refused connection) asks the kernel for one through ``:0``, here,
instead of guessing a number.
"""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel just handed out on ``host`` and that nothing listens on now.

    The socket is closed before returning, so another process could take the
    port in between; the kernel cycles through its ephemeral range before it
    reuses a number, which makes that rare enough for tests.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port
