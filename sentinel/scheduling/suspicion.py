"""Suspicion that acts: the text canary goes out at once when a scrape shows work standing still.

A hang shows in ``/metrics`` before any canary can prove it: the engine holds
requests (its running gauge above 0) and no work counter moved since the
previous sample. The text canary's cadence (5 s) and its idle gating (real
completions within the idle window) would make the confirming canary wait;
a suspicion ends that wait, once per standstill (a counter moving, or the
running gauge emptying, ends one). The canary it sends is an ordinary one
(priority, deadline), and the verdict's windows count from its send as from
any other's, so a suspicion never confirms anything by itself.

While a text canary waits unanswered past :data:`WAITING_S`, ``/metrics`` is
read every :data:`SUSPECT_SCRAPE_S` instead of the scrape interval, so the
evidence covering its window is fresh when the window ends; the ordinary
interval returns once it is answered. An idle server answers its canaries
within a fraction of a second, so the idle cost does not change.

The same samples say when a restarted server is back: a suspicion carries
the :class:`~sentinel.scheduling.comeback.Comeback` (every kind at once, the
moment the port answers), fed and consulted where the suspicion is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from sentinel.canary import kinds
from sentinel.evidence.metrics import MetricsSample
from sentinel.record.reading import LedgerReading
from sentinel.scheduling.comeback import Comeback, sleep_or_wake

SUSPECT_SCRAPE_S = 0.5  # the scrape interval while a text canary waits
WAITING_S = 1.0  # a text canary unanswered this long is waiting


class Suspicion:
    """Raised by a standstill in the samples; taken by the text canary's loop."""

    def __init__(self, ledger: LedgerReading, clock: Callable[[], float]) -> None:
        self.ledger = ledger
        self.clock = clock
        self._raised = False
        self._wake: asyncio.Event | None = None  # made inside the event loop that waits
        self._standstill = False
        self.raised = 0  # standstills seen (each sent its canary early at most once)
        self.comeback = Comeback(ledger)  # the server back: every kind at once

    def observe(self, sample: MetricsSample) -> None:
        """After the ledger took ``sample``: does it begin a standstill with work inside?"""
        self.comeback.observe(sample)
        progress = self.ledger.progress
        compared = bool(progress.last_update.signals)  # a previous sample to compare with
        moved = sample.at in (progress.last_beat_at, progress.last_progress_at)  # own work too
        running = progress.gauges.get("running", 0.0)
        if not compared or moved or running <= 0 or not self.ledger.plan.startup_passed:
            self._standstill = False
            return
        if self._standstill:
            return  # this standstill already raised its suspicion
        self._standstill = True
        self.raised += 1
        self._raised = True
        if self._wake is not None:
            self._wake.set()

    def take(self) -> bool:
        """Whether a suspicion is raised; taking it lowers it (a canary is going out)."""
        raised, self._raised = self._raised, False
        if self._wake is not None:
            self._wake.clear()
        return raised

    async def pause(self, seconds: float, sleep: Callable[[float], Awaitable[None]]) -> bool:
        """Sleep up to ``seconds`` (with the caller's sleep); True when a suspicion cut it short."""
        if self._raised:
            return True
        if self._wake is None:
            self._wake = asyncio.Event()
        await sleep_or_wake(self._wake, seconds, sleep)
        return self._raised

    def scrape_interval(self, usual: float) -> float:
        """The interval for the next scrape: shorter while a text canary waits unanswered
        (or while a server refuses before startup: :meth:`Comeback.scrape_interval`)."""
        usual = self.comeback.scrape_interval(usual)
        record = self.ledger.records.get(kinds.CONTROL)
        if record is None or not record.outstanding:
            return usual
        waited = self.clock() - min(record.outstanding.values())
        return min(usual, SUSPECT_SCRAPE_S) if waited >= WAITING_S else usual
