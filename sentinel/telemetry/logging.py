"""Log setup: structlog events for sentinel, and every library's stdlib logs through it.

Owns the one logging configuration of the process: JSON lines in production
(one object per line, what log pipelines ingest), a console renderer in a
terminal, and a single processor chain that sentinel's events and the stdlib
records of aiohttp, grpc, httpx and friends all pass through, so redaction
happens in one place.

Redaction is the last step before rendering, after exceptions and stacks
have been rendered into strings, so a secret inside an exception message (or
on any line of a multi-line value) is removed from the traceback that is
written; callers may add their own processors with ``redactors``.

Until :func:`configure_logging` runs (``sentinel probe``, ``diagnose``,
``doctor``), structlog's own default would print unredacted lines to stdout,
which also breaks ``probe --json``. :func:`sentinel.boot.boot`, run by every
entry point, installs a default instead: redacted lines on stderr at INFO.
Every command gets that without asking; ``run`` then replaces it with the
configured one.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any, Literal, TextIO

import structlog
from structlog.typing import Processor

from sentinel.telemetry.redact import REDACTED, structlog_processor

__all__ = [
    "QUIET_LIBRARIES",
    "REDACTED",
    "configure_default_logging",
    "configure_logging",
    "get_logger",
    "redact_secrets",
]

Renderer = Literal["auto", "json", "console"]

# Libraries whose stdlib loggers are noisy at INFO; they follow the chosen
# level but never go below WARNING unless sentinel itself runs at DEBUG.
QUIET_LIBRARIES = ("aiohttp.access", "httpx", "httpcore", "grpc", "asyncio", "kubernetes")

#: The redaction processor: every field of an event, by name and by shape.
redact_secrets: Processor = structlog_processor


def _render_then_redact(extra: Sequence[Processor] = ()) -> list[Processor]:
    """Exceptions and stacks to strings first, then redaction: the order that matters."""
    return [
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
        redact_secrets,
        *extra,
    ]


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
            *_render_then_redact(redactors),
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
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )


def _stderr_logger(*_args: Any) -> structlog.PrintLogger:
    # sys.stderr looked up per call, so a replaced stderr (pytest, a
    # redirecting caller) is honoured.
    return structlog.PrintLogger(sys.stderr)


def configure_default_logging() -> None:
    """Redacted log lines on stderr at INFO, for every command that configures nothing.

    A no-op once structlog is configured (by :func:`configure_logging` or a
    caller of its own).
    """
    if structlog.is_configured():
        return
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            *_render_then_redact(),
            structlog.processors.JSONRenderer(),
        ],
        logger_factory=_stderr_logger,
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    """A named structlog logger; the name shows as ``logger`` in every event."""
    logger: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger(name)
    return logger
