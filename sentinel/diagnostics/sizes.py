"""What a bundle keeps of long texts, and the sizes that decide it, counted without long GIL holds.

A 60 MB exposition or stack dump must never be encoded whole just to learn its
size: sizes are counted a piece at a time, and texts are cut to their byte
budget on a line boundary so the kept part of an exposition still parses. The
daemon uses :func:`kept_metrics` too, to send a capture child only what its
bundle will keep. A bundle still over its cap loses whole sections
(:func:`fit`), the long texts first.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

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


class KeptText(NamedTuple):
    """What a bundle keeps of one scrape."""

    at: float  # wall-clock epoch seconds of the scrape
    text: str
    cut: int  # UTF-8 bytes cut from it, here and before it got here
    size: int  # UTF-8 bytes of ``text``


def kept_metrics(
    scrapes: Sequence[tuple[float, str]], limit: int, cut_before: Sequence[int] = ()
) -> list[KeptText]:
    """The scrapes a bundle keeps, oldest first.

    The last :data:`MAX_METRICS_SCRAPES`, newest kept whole first, all of them
    within ``limit`` bytes. ``cut_before`` holds bytes already cut from each
    scrape before it got here, aligned at the newest (empty: none).
    """
    chosen = scrapes[-MAX_METRICS_SCRAPES:]
    earlier = list(cut_before[-len(chosen) :]) if chosen else []
    earlier = [0] * (len(chosen) - len(earlier)) + earlier
    out: list[KeptText] = []
    left = limit
    for (at, text), before in zip(reversed(chosen), reversed(earlier), strict=True):
        kept, cut = cut_text(text, max(left, 0))
        size = utf8_size(kept)
        left -= size
        out.append(KeptText(at, kept, cut + before, size))
    out.reverse()
    return out


def json_size(value: Any) -> int:
    """Bytes of ``value`` as the store writes it (ASCII JSON, indent 1).

    Encoded piece by piece: ``json.dumps`` encodes a whole section in one C
    call that holds the GIL (about 17 ms for 5 MB), long enough to show on a
    probe answered by another thread.
    """
    encoder = json.JSONEncoder(indent=1, default=str)
    return sum(len(piece) for piece in encoder.iterencode(value))


# Sections that may be dropped whole, in the order they go when a bundle is too large.
_TEXTS = ("metrics", "stacks", "watchdog")  # the long texts: dropped first
DROPPABLE_SECTIONS = (*_TEXTS, "samples", "canary_history", "processes", "cgroup", "gpu")


def fit(bundle: dict[str, Any], limit: int) -> None:
    """Drop the largest droppable sections until the bundle's JSON fits ``limit`` bytes."""
    sizes = {
        name: json_size(bundle[name]) for name in DROPPABLE_SECTIONS if bundle.get(name) is not None
    }
    total = json_size(bundle)
    for name, size in sorted(sizes.items(), key=lambda item: -item[1]):
        if total <= limit:
            return
        bundle[name] = {"truncated": True, "truncated_bytes": size}
        total -= size - json_size(bundle[name])
        bundle.setdefault("section_errors", {})[name] = (
            f"dropped: {size} bytes would exceed the bundle cap of {limit} bytes"
        )
