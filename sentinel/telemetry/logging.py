"""Log setup: structlog events for sentinel, and every library's stdlib logs through it.

Owns the one logging configuration of the process: JSON lines in production
(one object per line, what log pipelines ingest), a console renderer in a
terminal, and a single processor chain that sentinel's events and the stdlib
records of aiohttp, grpc, httpx and friends all pass through, so redaction
happens in one place.

Redaction is a chain of processors: :func:`redact_secrets` always runs and
drops credentials by key (``Authorization``, api keys, tokens) and masks bearer
tokens inside strings; callers add their own processors (diagnostics adds its
redactor) with ``redactors``.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any, Literal, TextIO

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

Renderer = Literal["auto", "json", "console"]

REDACTED = "[redacted]"
# Keys whose values are credentials, compared case-insensitively with "-" and "_" folded.
SECRET_KEYS = frozenset(
    {
        "authorization",
        "proxyauthorization",
        "apikey",
        "xapikey",
        "token",
        "accesstoken",
        "bearer",
        "password",
        "secret",
        "cookie",
        "setcookie",
    }
)
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+")
_KEY_LIKE = re.compile(r"\bsk-[A-Za-z0-9_-]{8,}")

# Libraries whose stdlib loggers are noisy at INFO; they follow the chosen
# level but never go below WARNING unless sentinel itself runs at DEBUG.
QUIET_LIBRARIES = ("aiohttp.access", "httpx", "httpcore", "grpc", "asyncio", "kubernetes")


def _is_secret_key(key: str) -> bool:
    return key.lower().replace("-", "").replace("_", "") in SECRET_KEYS


def _scrub(value: Any, depth: int = 0) -> Any:
    if depth > 6:
        return value
    if isinstance(value, str):
        return _KEY_LIKE.sub(REDACTED, _BEARER.sub(r"\1 " + REDACTED, value))
    if isinstance(value, Mapping):
        return {
            k: (REDACTED if isinstance(k, str) and _is_secret_key(k) else _scrub(v, depth + 1))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return type(value)(_scrub(v, depth + 1) for v in value)
    return value


def redact_secrets(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """Replace credentials with a marker, by key and inside strings.

    Headers are logged as mappings in practice, so a nested ``Authorization``
    key is caught as well as a top-level ``api_key``.
    """
    scrubbed: MutableMapping[str, Any] = event_dict
    for key in list(scrubbed):
        scrubbed[key] = REDACTED if _is_secret_key(key) else _scrub(scrubbed[key])
    return event_dict


def configure_logging(
    level: str | int = "info",
    *,
    renderer: Renderer = "auto",
    stream: TextIO | None = None,
    redactors: Sequence[Processor] = (),
) -> None:
    """Configure structlog and the stdlib root logger for the whole process.

    ``renderer="auto"`` picks the console renderer when ``stream`` is a TTY and
    JSON otherwise. Calling it again replaces the previous configuration (tests
    and the CLI both rely on that).
    """
    out = stream if stream is not None else sys.stderr
    numeric = logging.getLevelName(level.upper()) if isinstance(level, str) else level
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level: {level!r}")
    console = renderer == "console" or (renderer == "auto" and out.isatty())

    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.stdlib.ExtraAdder(),
        redact_secrets,
        *redactors,
    ]
    final: Processor = (
        structlog.dev.ConsoleRenderer(colors=out.isatty())
        if console
        else structlog.processors.JSONRenderer()
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *([] if console else [structlog.processors.format_exc_info]),
            final,
        ],
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    for name in QUIET_LIBRARIES:
        quiet = numeric if numeric <= logging.DEBUG else max(numeric, logging.WARNING)
        logging.getLogger(name).setLevel(quiet)

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    """A named structlog logger; the name shows as ``logger`` in every event."""
    logger: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger(name)
    return logger
