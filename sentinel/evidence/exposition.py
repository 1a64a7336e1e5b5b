"""One ``/metrics`` exposition read under caps, keeping only the lines sentinel uses.

Owns the caps of one scrape and the incremental reader that enforces them
(:mod:`sentinel.evidence.metrics` parses what it keeps). The cap on kept
series scales with the data-parallel engines the exposition itself shows:
vLLM adds its series once per engine (the ``engine`` label), so a fixed cap
that fits DP 8 refuses every scrape of DP 64 and leaves sentinel blind
(docs/design.md, "Wide data parallelism"). Refusing is loud: the reason names
the engines seen and the cap, for ``/status`` and the scrape-failure metric.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass

from sentinel.evidence.failure import EvidenceFailure

_ENGINE_MARK = b'engine="'


class ScrapeError(Exception):
    """A scrape that produced no sample, and why.

    The scraper does not interpret the failure; the caller does (a refused
    connection means the server restarted or is gone).
    """

    def __init__(
        self, reason: EvidenceFailure, detail: str, status: int | None = None, body: str = ""
    ) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.status = status
        # The head of a non-2xx answer's body (capped): a 503 with a body is a server
        # refusing on purpose (vLLM's elastic EP scaling middleware gates /metrics).
        self.body = body


@dataclass(frozen=True, slots=True)
class ScrapeLimits:
    """What one scrape may cost; each cap hit abandons the scrape with an error."""

    max_bytes: int = 8 * 1024 * 1024  # decoded bytes of the whole exposition
    max_lines: int = 100_000
    max_line_bytes: int = 64 * 1024
    max_series: int = 1_000  # kept sample lines (the signals sentinel reads), engines aside
    # Each data-parallel engine the exposition shows adds this many to
    # max_series, up to max_engines engines (the byte cap bounds them anyway).
    series_per_engine: int = 100
    max_engines: int = 1_024
    keep_bytes: int = 1024 * 1024  # raw text kept for diagnostics bundles
    # Kept lines parsed inline up to this many; more go to a worker thread so
    # the parse never holds the event loop for long.
    inline_parse_lines: int = 200


class ExpositionReader:
    """Reads an exposition chunk by chunk, keeping only the lines sentinel uses.

    Memory is bounded by one chunk, one partial line (``max_line_bytes``), the
    kept lines (:attr:`ExpositionReader.series_cap`) and the text kept for bundles (``keep_bytes``).
    The whole body is checked as UTF-8 as it passes, since a Prometheus
    exposition is UTF-8 and garbage anywhere says the answer is not one.
    """

    def __init__(self, limits: ScrapeLimits, wanted: tuple[str, ...]) -> None:
        self._limits = limits
        self._wanted_bytes = tuple(name.encode() for name in wanted)
        self._wanted = frozenset(wanted)
        self._engines: set[bytes] = set()  # the engine label values among the kept lines
        self._partial = bytearray()
        self._utf8 = codecs.getincrementaldecoder("utf-8")("strict")
        self._kept: list[str] = []
        self._lines = 0
        self._keep = bytearray()
        self.truncated = False  # the text kept for bundles is cut short

    def feed(self, chunk: bytes) -> None:
        """Take the next chunk; raise :class:`ScrapeError` when a cap is hit."""
        try:
            self._utf8.decode(chunk)
        except UnicodeDecodeError as exc:
            raise ScrapeError(EvidenceFailure.BAD_BODY, f"not UTF-8: {exc.reason}") from None
        room = self._limits.keep_bytes - len(self._keep)
        if room > 0:
            self._keep += chunk[:room]
        if len(chunk) > room:
            self.truncated = True
        lines = chunk.split(b"\n")
        if len(lines) == 1:  # no line ends in this chunk
            self._grow_partial(chunk)
            return
        self._partial += lines[0]
        self._line(bytes(self._partial))
        self._partial.clear()
        for line in lines[1:-1]:
            self._line(line)
        self._grow_partial(lines[-1])

    def finish(self) -> tuple[str, str]:
        """(the kept lines, the text kept for bundles) once the body has ended."""
        try:
            self._utf8.decode(b"", final=True)
        except UnicodeDecodeError as exc:
            raise ScrapeError(EvidenceFailure.BAD_BODY, f"not UTF-8: {exc.reason}") from None
        if self._partial:
            self._line(bytes(self._partial))
            self._partial.clear()
        text = self._keep.decode("utf-8", "replace")
        if self.truncated:
            text += f"\n# sentinel: truncated at {self._limits.keep_bytes} bytes\n"
        return "\n".join(self._kept) + "\n", text

    def _grow_partial(self, piece: bytes) -> None:
        if len(self._partial) + len(piece) > self._limits.max_line_bytes:
            raise ScrapeError(
                EvidenceFailure.TOO_LARGE,
                f"a line longer than {self._limits.max_line_bytes} bytes",
            )
        self._partial += piece

    def _line(self, line: bytes) -> None:
        if len(line) > self._limits.max_line_bytes:
            raise ScrapeError(
                EvidenceFailure.TOO_LARGE,
                f"a line longer than {self._limits.max_line_bytes} bytes",
            )
        self._lines += 1
        if self._lines > self._limits.max_lines:
            raise ScrapeError(
                EvidenceFailure.TOO_LARGE, f"more than {self._limits.max_lines} lines"
            )
        if not line.startswith(self._wanted_bytes):
            return
        text = line.decode("utf-8").rstrip("\r")
        if text.split("{", 1)[0].split(" ", 1)[0] not in self._wanted:
            return
        self._kept.append(text)
        self._count_engine(line)
        if len(self._kept) > self.series_cap:
            raise ScrapeError(
                EvidenceFailure.TOO_LARGE,
                f"more than {self.series_cap} series of the signals sentinel reads "
                f"({len(self._engines)} engines seen: {self._limits.max_series} + "
                f"{self._limits.series_per_engine} per engine)",
            )

    @property
    def series_cap(self) -> int:
        """The kept series allowed so far: the base cap plus each engine's allowance."""
        engines = min(len(self._engines), self._limits.max_engines)
        return self._limits.max_series + self._limits.series_per_engine * engines

    def _count_engine(self, line: bytes) -> None:
        at = line.find(_ENGINE_MARK)
        if at < 0 or len(self._engines) >= self._limits.max_engines:
            return
        start = at + len(_ENGINE_MARK)
        end = line.find(b'"', start)
        if end > start:
            self._engines.add(line[start:end])
