"""Small local files read whole, under a byte cap.

A settings, token or fingerprint file is a few kilobytes; one past its cap is
the wrong file (or a hostile one), and reading it all would only cost memory.
One byte past the cap is read and no more: that tells a file over the cap
from one exactly at it. Each caller words the refusal in its own vocabulary,
so the cap is signalled by :class:`FileTooLarge`, never an ``OSError``, and a
caller's ``except OSError`` (the file cannot be read) stays apart from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

__all__ = ["FileTooLarge", "read_capped_file", "read_capped_stream"]


class FileTooLarge(Exception):
    """A file holding more than its cap; only one byte past the cap was read."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"larger than {limit} bytes")
        self.limit = limit


def read_capped_file(path: Path | str, limit: int) -> bytes:
    """The file's bytes: :class:`FileTooLarge` past ``limit``, ``OSError`` as ``open`` raises it."""
    with open(path, "rb") as handle:
        return read_capped_stream(handle, limit)


def read_capped_stream(handle: BinaryIO, limit: int) -> bytes:
    """The rest of an open file, for a caller that looks at the handle first (its ``fstat``)."""
    raw = handle.read(limit + 1)
    if len(raw) > limit:
        raise FileTooLarge(limit)
    return raw
