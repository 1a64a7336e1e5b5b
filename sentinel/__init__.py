"""sentinel: is this inference server still producing tokens?

Importing the package first imports structlog and httpx with ``rich`` and
``click`` hidden. Both libraries import them opportunistically at import time
and never need them here: structlog's console renderer for its prettier
tracebacks (rich, and pygments under it), httpx for its command-line client
(click, then pygments and rich). Every pod would carry about 6 MB of them and
a tenth of a second of start. Hidden only for these two imports: ``sentinel
probe`` imports rich for its table as usual.
"""

import sys

__version__ = "0.1.0"


def _import_without_optional_extras() -> None:
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


_import_without_optional_extras()
