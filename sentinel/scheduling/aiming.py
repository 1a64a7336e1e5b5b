"""Aiming canaries at data-parallel engines: which engine a canary is sent to.

Under data parallelism (more than one ``engine`` label in the progress
evidence) every canary is aimed at one engine (vLLM's
``X-data-parallel-rank``), since vLLM's balancer steers new requests away
from an engine whose requests never finish and an unaimed canary would never
reach a stuck one. A server with one engine, or labels that are no ranks,
never gets the header. An engine whose aimed canary is refused as a bad
request (a label that is not a rank the server takes) gets unaimed canaries
for the rest of the server epoch. Which engines a step needs at all (idle
gating) is the scheduler's; the verdict's side of aiming is
:mod:`sentinel.verdict.aim`.
"""

from __future__ import annotations

from collections.abc import Iterable

from sentinel.canary.result import CanaryResult, Reason
from sentinel.record.reading import LedgerReading
from sentinel.telemetry.logging import get_logger

log = get_logger("sentinel.aiming")

# An ``engine`` label above this is no data-parallel rank a header should carry.
MAX_ENGINE_INDEX = 4096


class Aiming:
    """The engines one server's canaries are aimed at, and where each loop aimed last."""

    def __init__(self, ledger: LedgerReading) -> None:
        self.ledger = ledger
        self._last: dict[str, int] = {}  # per loop: the engine its last canary went to
        self._unaimable: set[int] = set()  # engines whose aimed canary was refused, this epoch
        self._epoch = ledger.epoch
        self._announced: tuple[int, ...] = ()  # the engines last announced in the log

    def engines(self) -> tuple[int, ...]:
        """The data-parallel engines canaries are aimed at; empty: do not aim.

        Aimed only when the progress evidence shows more than one ``engine``
        label and every label is a rank (a small non-negative integer).
        """
        if self.ledger.epoch != self._epoch:
            self._epoch = self.ledger.epoch
            self._unaimable.clear()
        labels = tuple(self.ledger.progress.engines)
        if len(labels) < 2 or not all(rank(label) is not None for label in labels):
            engines: tuple[int, ...] = ()
        else:
            engines = tuple(sorted(int(label) for label in labels))
        if engines != self._announced:
            self._announced = engines
            log.info("canaries_aimed", engines=list(engines))
        return engines

    def in_turn(self, loop: str, engines: tuple[int, ...]) -> int:
        """The engine after the one ``loop`` aimed at last (the first, to begin or wrap)."""
        last = self._last.get(loop)
        later = [e for e in engines if last is None or e > last]
        engine = later[0] if later else engines[0]
        self._last[loop] = engine
        return engine

    def targets(self, engines: Iterable[int]) -> tuple[int | None, ...]:
        """``engines`` as sent: one that refused its rank goes unaimed (None), once per step."""
        return tuple(dict.fromkeys(None if e in self._unaimable else e for e in engines))

    def refused(self, engine: int, result: CanaryResult) -> bool:
        """An aimed canary answered 400: the server takes no such rank; aim there no more."""
        if result.reason is not Reason.HTTP_STATUS or result.http_status != 400:
            return False
        self._unaimable.add(engine)
        log.warning(
            "canary_aim_refused",
            engine=engine,
            detail=result.detail,
            why="the server refused the data-parallel rank; canaries for it go unaimed",
        )
        return True


def rank(label: str) -> int | None:
    """An ``engine`` label as a data-parallel rank, or None when it is none."""
    if not label.isascii() or not label.isdigit() or len(label) > 5:
        return None
    value = int(label)
    return value if value <= MAX_ENGINE_INDEX else None
