"""``sentinel run``'s listen addresses, tried before anything starts.

A listener that cannot bind (another sentinel, a leftover process, a port
below 1024) is the commonest first-start failure, and the deepest in the
daemon: the HTTP server binds on its own thread, gRPC's C core prints its
own error line. So each address is tried here first and a failure is one
line naming where the address came from (a flag, a ``SENTINEL_*`` variable,
the settings file or the default) and what is wrong with it:
``sentinel: --listen: address 0.0.0.0:8471 already in use``. A bind that
still fails later, in the moment between this check and the daemon's
start, is recognised in the daemon's failure by
:meth:`ListenAddresses.bind_failure`, in the same words.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sentinel.config.loader import env_name
from sentinel.config.settings import Settings, split_host_port

LISTENERS = ("listen", "grpc_listen")
_WORDS = {
    errno.EADDRINUSE: "already in use",
    errno.EACCES: "not allowed (a port below 1024 needs CAP_NET_BIND_SERVICE)",
    errno.EADDRNOTAVAIL: "not an address of this host",
}


def origin(
    field: str, flags: Mapping[str, object], env: Mapping[str, str], config: Path | None
) -> str:
    """Where ``field``'s value came from, highest precedence first, as a person would name it."""
    if flags.get(field) is not None:
        return "--" + field.replace("_", "-")
    if env_name(field) in env:
        return env_name(field)
    if config is not None:
        return f"{config}: {field}"
    return f"{field} (default)"


def _problem(address: str) -> str | None:
    """Why ``address`` (``HOST:PORT``) cannot be listened on, or None."""
    host, port = split_host_port(address)
    if port == 0:
        return None  # any free port: nothing to be in use
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return f"host {host!r} does not resolve ({exc.strerror})"
    for family, kind, proto, _, where in infos:
        with socket.socket(family, kind, proto) as sock:
            # As the HTTP server binds: a port in TIME_WAIT is free, one listened on is not.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # asyncio's servers listen on IPv6 alone there
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(where)
            except OSError as exc:
                return _WORDS.get(exc.errno or 0, exc.strerror or str(exc))
    return None


@dataclass(frozen=True, slots=True)
class ListenAddresses:
    """``sentinel run``'s listen addresses, each named by where it came from.

    ``flags`` are the command line's values, ``config`` the settings file (None:
    none), ``env`` the environment the ``SENTINEL_*`` variables were read from.
    """

    settings: Settings
    flags: Mapping[str, object]
    config: Path | None
    env: Mapping[str, str] = field(default_factory=lambda: os.environ)

    def check(self) -> str | None:
        """The one line to print when a listen address cannot be bound, else None."""
        for name in LISTENERS:
            address = getattr(self.settings, name)
            problem = None if address is None else _problem(address)
            if problem is not None:
                return self._line(name, problem)
        return None

    def bind_failure(self, exc: BaseException) -> str | None:
        """The one line for a listener that failed to bind after the check passed, else None."""
        if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
            return self._line("listen", _WORDS[errno.EADDRINUSE])
        if isinstance(exc, RuntimeError) and "Failed to bind" in str(exc):
            return self._line("grpc_listen", "cannot be bound")  # grpc's words for any bind failure
        return None

    def _line(self, name: str, problem: str) -> str:
        where = origin(name, self.flags, self.env, self.config)
        return f"sentinel: {where}: address {getattr(self.settings, name)} {problem}"
