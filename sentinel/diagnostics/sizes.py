"""What a bundle keeps of long texts, and the sizes that decide it, counted without long GIL holds.

A 60 MB exposition or stack dump must never be encoded whole just to learn its
size: sizes are counted a piece at a time, and texts are cut to their byte
budget on a line boundary so the kept part of an exposition still parses. The
daemon uses :func:`kept_metrics` too, to send a capture child only what its
bundle will keep.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

MAX_METRICS_SCRAPES = 3


def cut_text(text: str, limit: int) -> tuple[str, int]:
    """``text`` cut to at most ``limit`` UTF-8 bytes, and how many bytes were cut.

    Measured in pieces, so a 60 MB text is never encoded whole just to learn
    its size; the cut lands on a line boundary when one is near, so the kept
    part of an exposition still parses.
    """
    if len(text) <= limit // 4:  # at most 4 bytes a character: certainly fits
        return text, 0
    size = utf8_size(text)
    if size <= limit:
        return text, 0
    kept = text[:limit]
    while utf8_size(kept) > limit:  # non-ASCII: fewer characters fit
        kept = kept[: len(kept) * 3 // 4]
    newline = kept.rfind("\n")
    if newline >= len(kept) // 2:
        kept = kept[: newline + 1]
    return kept, size - utf8_size(kept)


def utf8_size(text: str, piece: int = 1024 * 1024) -> int:
    return sum(
        len(text[i : i + piece].encode("utf-8", "surrogatepass"))
        for i in range(0, len(text), piece)
    )


def kept_metrics(scrapes: Sequence[tuple[float, str]], limit: int) -> list[tuple[float, str, int]]:
    """The scrapes a bundle keeps, oldest first, as (time, kept text, bytes cut).

    The last :data:`MAX_METRICS_SCRAPES`, newest kept whole first, all of them
    within ``limit`` bytes.
    """
    out: list[tuple[float, str, int]] = []
    left = limit
    for at, text in reversed(scrapes[-MAX_METRICS_SCRAPES:]):
        kept, cut = cut_text(text, max(left, 0))
        left -= utf8_size(kept)
        out.append((at, kept, cut))
    out.reverse()
    return out


def aligned_cuts(cuts: Sequence[int], count: int) -> list[int]:
    """``cuts`` aligned at the newest of ``count`` texts (0 for the older ones without one)."""
    tail = list(cuts[-count:]) if count else []
    return [0] * (count - len(tail)) + tail


def json_size(value: Any) -> int:
    """Bytes of ``value`` as the store writes it (ASCII JSON, indent 1).

    Encoded piece by piece: ``json.dumps`` encodes a whole section in one C
    call that holds the GIL (about 17 ms for 5 MB), long enough to show on a
    probe answered by another thread.
    """
    encoder = json.JSONEncoder(indent=1, default=str)
    return sum(len(piece) for piece in encoder.iterencode(value))
