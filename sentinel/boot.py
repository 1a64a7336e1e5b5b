"""The one start-up step that changes process-global state, run by each entry point.

Importing a sentinel module changes nothing outside it; a process that runs
sentinel (the ``sentinel`` command, ``python -m sentinel``, the diagnostics
child) calls :func:`boot` first, before it imports anything heavy, and gets:

- httpx and structlog imported with ``rich`` and ``click`` hidden
  (:func:`import_without_optional_extras`);
- httpcore's per-exchange ``import sniffio`` made cheap
  (:func:`settle_async_library_detection`);
- redacted log lines on stderr until a command configures its own
  (:func:`~sentinel.telemetry.logging.configure_default_logging`).

Each step is idempotent, so a second call (``main()`` called again in one
process, as tests do) changes nothing. This module imports only the standard
library at import time: importing it must not import httpx or structlog before
the first step has hidden their extras.
"""

from __future__ import annotations

import importlib.util
import sys

__all__ = ["boot", "import_without_optional_extras", "settle_async_library_detection"]


def boot() -> None:
    """Prepare the interpreter for sentinel: call once, first thing, from an entry point."""
    import_without_optional_extras()
    settle_async_library_detection()
    from sentinel.telemetry.logging import configure_default_logging

    configure_default_logging()


def import_without_optional_extras() -> None:
    """Import structlog and httpx with ``rich`` and ``click`` hidden.

    Both libraries import them opportunistically at import time and never need
    them here: structlog's console renderer for its prettier tracebacks (rich,
    and pygments under it), httpx for its command-line client (click, then
    pygments and rich). Every pod would carry about 6 MB of them and a tenth of
    a second of start. Hidden only for these two imports: ``sentinel probe``
    imports rich for its table as usual. A no-op once both are imported.
    """
    hidden = [name for name in ("rich", "click") if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # import fails: ImportError
    try:
        import httpx  # noqa: F401
        import structlog  # noqa: F401
    finally:
        for name in hidden:
            if sys.modules.get(name, ...) is None:
                del sys.modules[name]


def settle_async_library_detection() -> bool:
    """Make httpcore's per-exchange ``import sniffio`` cheap when sniffio is not installed.

    httpcore asks which async library runs it by importing sniffio inside
    every lock, event and shielded close (several times per request). With
    sniffio absent (anyio does not need it), each of those imports fails the
    slow way, searching every ``sys.path`` entry again, because a failed import
    is not remembered: about 40 us each, a sixth of the CPU a scrape, a
    ``/health`` poll or a canary costs. A ``None`` entry in ``sys.modules`` is
    Python's own record of "no such module": the import then fails at once,
    and httpcore takes its documented fallback (asyncio). Nothing changes where
    sniffio is installed.

    Returns whether the entry was made.
    """
    if "sniffio" in sys.modules or importlib.util.find_spec("sniffio") is not None:
        return False
    sys.modules["sniffio"] = None  # type: ignore[assignment]
    return True
