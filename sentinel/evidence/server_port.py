"""The port a vLLM API server's command line says it listens on.

Where the socket's owner cannot be read (another user's ``/proc/<pid>/fd``),
the command line is what ties a server to the target's port: ``--port N``
(``=`` or a space; argparse keeps the last), else a ``port:`` key in the
``--config`` YAML file vLLM reads (its command line wins over the file), else
vLLM's default, 8000. A wrapper shell (``sh -c "vllm serve ..."``) puts the
whole command in one argument, so arguments are split on whitespace too.

Pure but for the config file, which the caller reads (a server's file lives in
its own mount namespace: see :mod:`sentinel.evidence.attribution`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import yaml

VLLM_DEFAULT_PORT = 8000
MAX_CONFIG_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class PortClaim:
    """The port a command line claims (None: it cannot be told) and how it was told."""

    port: int | None
    how: str


def _flag(tokens: Sequence[str], name: str) -> str | None:
    """The last value of ``--name`` (``--name V`` or ``--name=V``), as argparse keeps it."""
    value: str | None = None
    for i, token in enumerate(tokens):
        flag, eq, given = token.partition("=")
        if flag.replace("_", "-") != name:
            continue
        if not eq:
            given = tokens[i + 1] if i + 1 < len(tokens) else ""
        value = given.strip().strip("'\"")
    return value


def _port(text: str) -> int | None:
    try:
        port = int(text)
    except (TypeError, ValueError):
        return None
    return port if 0 < port < 65536 else None


def config_port(text: str) -> int | None:
    """``port`` in a vLLM ``--config`` YAML file (None: not there or not a port)."""
    try:
        data = yaml.safe_load(text[:MAX_CONFIG_BYTES])
    except yaml.YAMLError:
        return None
    if not isinstance(data, dict):
        return None
    value = data.get("port")
    return None if isinstance(value, bool) else _port(str(value))


def claimed_port(
    cmdline: Sequence[str], read_config: Callable[[str], tuple[str | None, str]]
) -> PortClaim:
    """The port ``cmdline`` serves on; ``read_config(path)`` gives (text or None, where/why)."""
    tokens = [token for arg in cmdline for token in arg.split()]
    given = _flag(tokens, "--port")
    if given is not None:
        port = _port(given)
        return PortClaim(port, f"--port {given}" if port else f"--port {given} names no fixed port")
    path = _flag(tokens, "--config")
    if path:
        text, where = read_config(path)
        if text is None:
            return PortClaim(None, f"its --config {path} cannot be read ({where})")
        port = config_port(text)
        if port is not None:
            return PortClaim(port, f"port {port} in its --config {path} ({where})")
        return PortClaim(
            VLLM_DEFAULT_PORT, f"vLLM's default {VLLM_DEFAULT_PORT} (no port in --config {path})"
        )
    return PortClaim(VLLM_DEFAULT_PORT, f"vLLM's default {VLLM_DEFAULT_PORT} (no --port)")
