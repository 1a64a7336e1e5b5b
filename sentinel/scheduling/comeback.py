"""A server's comeback: every canary kind at once, the moment its port answers in a new epoch.

A restarted server loads its model with its port closed; each canary loop
meanwhile fails fast (connection refused) and sleeps its interval (text 5 s,
the path kinds 10 s). Left to their cadence, the first canaries reach the new
server up to an interval after it could serve, one kind after another, and
the kubelet's startup and readiness wait on the slowest. Instead, the first
``/metrics`` answer of an epoch before startup (the server is back) ends every
loop's wait at once: each kind not yet passed in the epoch sends its canary
now, all in parallel (a paired kind with its text control, as always), and
the verdict passes startup on the first served text canary
(:func:`sentinel.verdict.decide.evaluate`). Each of those results is judged
as it lands (:meth:`Comeback.judge_soon`), and ``/startupz`` and ``/readyz``
hold their "not yet" while it settles, so the kubelet's probe that asks
meanwhile passes instead of failing a period.

Once per loop per epoch, and only for a kind that has not passed in it: a
comeback never adds a canary to a server already judged, and a kind that
fails its first canary returns to its own cadence (no hot loop against a
server that answers but does not serve). While connections are refused before
startup, ``/metrics`` is read every :data:`COMEBACK_SCRAPE_S` instead of the
scrape interval, so the port answering is seen within that; a refused connect
costs the server nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from sentinel.canary.spec import CanaryKind
from sentinel.evidence.metrics import MetricsSample
from sentinel.record.reading import LedgerReading

COMEBACK_SCRAPE_S = 0.1  # the scrape interval while the server refuses before startup

Sleep = Callable[[float], Awaitable[None]]


async def sleep_or_wake(event: asyncio.Event, seconds: float, sleep: Sleep) -> None:
    """Sleep ``seconds`` with the caller's ``sleep``, or less when ``event`` is set first."""
    waiter = asyncio.ensure_future(event.wait())
    sleeper = asyncio.ensure_future(sleep(seconds))
    try:
        await asyncio.wait({waiter, sleeper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (waiter, sleeper):
            task.cancel()
        await asyncio.gather(waiter, sleeper, return_exceptions=True)


class Comeback:
    """Raised by the first answer of an epoch before startup; taken once by each canary loop."""

    def __init__(self, ledger: LedgerReading) -> None:
        self.ledger = ledger
        self.epoch: int | None = None  # the epoch whose server was seen answering
        self._wake: asyncio.Event | None = None  # made inside the event loop that waits
        self.rounds = 0  # comebacks raised (each sent every unpassed kind at once)
        self._judge: asyncio.Event | None = None  # wakes the verdict's loop
        self._judged: int | None = None  # the epoch whose every kind has passed

    def observe(self, sample: MetricsSample | None = None) -> None:
        """The server answered (a ``/metrics`` sample): the first of an epoch raises a comeback."""
        ledger = self.ledger
        if ledger.plan.startup_passed or self.epoch == ledger.epoch:
            return
        self.epoch = ledger.epoch
        self.rounds += 1
        if self._wake is not None:
            self._wake.set()  # wakes every loop waiting now; a fresh event for the next
            self._wake = None

    def due(self, kind: CanaryKind, taken: int | None) -> bool:
        """Whether a loop that took the comeback of epoch ``taken`` should send ``kind`` now."""
        ledger = self.ledger
        if self.epoch is None or self.epoch != ledger.epoch or taken == self.epoch:
            return False
        record = ledger.records.get(kind)
        return record is not None and not any(r.ok for r in record.results)

    def sleeper(self, kind: CanaryKind, sleep: Sleep) -> Sleep:
        """``sleep`` for one canary loop, cut short once per epoch by a comeback."""
        taken: int | None = None

        async def wait(seconds: float) -> None:
            nonlocal taken
            if not self.due(kind, taken):
                if self._wake is None:
                    self._wake = asyncio.Event()
                await sleep_or_wake(self._wake, seconds, sleep)
            if self.due(kind, taken):
                taken = self.epoch

        return wait

    def judge_soon(self) -> None:
        """A canary result landed: while a comeback's kinds have not all passed, judge now.

        The verdict runs every ``eval_interval``; a comeback's results wait for
        it no longer, so ``/startupz`` and ``/readyz`` (which hold a settling
        answer: :mod:`sentinel.serve.http`) turn the moment they can. The wake
        after the result that proved the last kind is the epoch's last.
        """
        ledger = self.ledger
        if self.epoch is None or self.epoch != ledger.epoch or self._judged == ledger.epoch:
            return
        plan = ledger.plan
        records = [record for kind, record in ledger.records.items() if plan.runs(kind)]
        if all(any(r.ok for r in record.results) for record in records):
            self._judged = ledger.epoch
        if self._judge is not None:
            self._judge.set()

    def judge_sleeper(self, sleep: Sleep) -> Sleep:
        """``sleep`` for the verdict's loop, cut short by :meth:`judge_soon`."""

        async def wait(seconds: float) -> None:
            if self._judge is None:
                self._judge = asyncio.Event()
            await sleep_or_wake(self._judge, seconds, sleep)
            self._judge.clear()

        return wait

    def scrape_interval(self, usual: float) -> float:
        """The next scrape's interval: short while connections are refused before startup."""
        ledger = self.ledger
        waiting = ledger.refused_since is not None and not ledger.plan.startup_passed
        return min(usual, COMEBACK_SCRAPE_S) if waiting else usual
