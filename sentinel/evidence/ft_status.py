"""vLLM's fault-tolerance status document and flags, read purely.

The status is what ``GET [/v1]/fault_tolerance/status`` answers (the poller,
:mod:`sentinel.evidence.fault_tolerance`, fetches it); the flags are what the
server's command line says (``--enable-fault-tolerance``,
``--fault-tolerance-config``). Bytes and strings in, frozen values out: the
verdict reads these values, so no I/O lives here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

MAX_ENGINES = 512  # a wide data-parallel deployment, and no more
MAX_TEXT = 120  # fault_info, ft_state, ft_error as /status quotes them

ENABLE_FLAG = "--enable-fault-tolerance"
TIMEOUT_KEY = "engine_recovery_timeout_sec"
CONFIG_FLAG = "--fault-tolerance-config"  # its JSON (or dotted form) holds the timeout

# Statuses that mean a recovery is pending: the rank waits for the orchestrator's retry.
RECOVERING = frozenset({"unhealthy", "diagnosing"})
HEALTHY = "healthy"
DEAD = "dead"
KNOWN_STATUSES = RECOVERING | {HEALTHY, DEAD}


@dataclass(frozen=True, slots=True)
class FtEngine:
    """One engine's entry in the status, as much of it as sentinel reads."""

    id: int
    status: str  # lower case; one of KNOWN_STATUSES, or what an unknown release said
    fault_info: str = ""
    ft_state: str = ""  # 0.34: recovering | failed
    ft_error: str = ""  # after a failed apply

    def describe(self) -> str:
        extra = ", ".join(p for p in (self.fault_info, self.ft_state, self.ft_error) if p)
        return f"engine {self.id} {self.status}" + (f" ({extra})" if extra else "")


def _text(value: object) -> str:
    return value[:MAX_TEXT] if isinstance(value, str) else ""


def parse_status(body: bytes) -> tuple[FtEngine, ...] | None:
    """The engines a status body lists (None: not vLLM's status document)."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):  # deep nesting overflows the decoder's stack
        return None
    if not isinstance(value, dict) or not isinstance(value.get("engines"), list):
        return None
    engines: list[FtEngine] = []
    for entry in value["engines"][:MAX_ENGINES]:
        if not isinstance(entry, dict):
            return None
        ident, status = entry.get("id"), entry.get("status")
        if isinstance(ident, bool) or not isinstance(ident, int) or not isinstance(status, str):
            return None
        engines.append(
            FtEngine(
                ident,
                status.strip().lower()[:MAX_TEXT],
                _text(entry.get("fault_info")),
                _text(entry.get("ft_state")),
                _text(entry.get("ft_error")),
            )
        )
    return tuple(engines)


_FLAG_FORMS = CONFIG_FLAG.replace("-", "[-_]").replace("[-_][-_]", "--", 1)
_CONFIG_JSON = re.compile(_FLAG_FORMS + r"(?:=|\s+)'?\"?(\{.*?\})")
_DOTTED = re.compile(
    _FLAG_FORMS + r"\.engine[-_]recovery[-_]timeout[-_]sec(?:=|\s+)'?\"?(-?[\d.]+)"
)


def fault_tolerance_flags(cmdline: Sequence[str]) -> tuple[bool, float | None]:
    """Whether a vLLM command line turns fault tolerance on, and the recovery timeout it sets.

    Only ``--enable-fault-tolerance`` turns it on here: vLLM registers the
    status route only for that parsed flag (``launchers/api_server/routers.py``),
    so ``--fault-tolerance-config`` alone, which turns the engine's recovery on
    (``EngineArgs.__post_init__``), leaves no status to read (docs/compat-notes.md).
    The timeout comes from the config's JSON (``{"engine_recovery_timeout_sec": 60}``,
    spaces and quotes allowed, one argument or a setproctitle title) or its
    dotted form, the last one winning; None where none shows or it is not a
    positive number (vLLM's default, or a setting, applies).
    """
    args = [arg.strip() for arg in cmdline]
    joined = " ".join(args)
    tokens = [token.replace("_", "-") for arg in args for token in arg.split()]
    enabled = any(t == ENABLE_FLAG or t.startswith(ENABLE_FLAG + "=") for t in tokens)
    timeout: float | None = None
    found: list[tuple[int, str]] = []
    for match in _CONFIG_JSON.finditer(joined):
        try:
            config = json.loads(match.group(1))
        except (ValueError, RecursionError):
            continue
        if isinstance(config, dict) and TIMEOUT_KEY in config:
            found.append((match.start(), str(config[TIMEOUT_KEY])))
    found += [(m.start(), m.group(1)) for m in _DOTTED.finditer(joined)]
    for _, value in sorted(found):
        try:
            seconds = float(value)
        except ValueError:
            continue
        timeout = seconds if 0 < seconds < float("inf") else None
    return enabled, timeout
