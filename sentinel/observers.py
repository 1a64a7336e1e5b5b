"""The observers: the periodic loops that feed evidence into the ledger.

Each observer step asks one evidence adapter (the ``/metrics`` scraper, the
``/health`` poller, the process watcher) for a sample and hands it to the
ledger; none of them judges anything. :func:`every` runs a step on a cadence
and beats its heartbeat, so a wedged observer turns ``/healthz`` red.

What the observers keep beside the ledger (the last raw ``/metrics`` texts for
diagnostics bundles, the last scrape error for ``/status``) lives in
:class:`Observations`, which the evaluator and the diagnostics context read.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from sentinel.evidence.failure import EvidenceFailure
from sentinel.evidence.metrics import MetricsScraper, ScrapeError
from sentinel.evidence.processes import ProcessWatcher
from sentinel.evidence.vllm_health import VllmHealthPoller
from sentinel.ledger import Ledger

METRICS_KEPT = 5  # recent raw /metrics texts kept for diagnostics bundles

Step = Callable[[], Awaitable[None]]
Sleep = Callable[[float], Awaitable[None]]


@dataclass(slots=True)
class Observations:
    """What the observers saw that the ledger does not keep."""

    metrics_texts: deque[tuple[float, str]] = field(
        default_factory=lambda: deque(maxlen=METRICS_KEPT)
    )  # (wall-clock time, exposition text)
    last_scrape_error: str = ""


async def every(
    name: str,
    interval: float,
    step: Step,
    *,
    beat: Callable[[str, float], None],
    clock: Callable[[], float],
    sleep: Sleep = asyncio.sleep,
) -> None:
    """Run ``step`` every ``interval`` seconds, beating the ``name`` heartbeat.

    A step that overruns delays the next one instead of stacking up; a loop
    that stops beating for several intervals turns ``/healthz`` red.
    """
    while True:
        beat(name, interval * 4 + 5)
        started = clock()
        await step()
        await sleep(max(0.0, started + interval - clock()))


class Observers:
    """Builds the observer steps around one ledger and one clock."""

    def __init__(
        self,
        ledger: Ledger,
        clock: Callable[[], float],
        *,
        scrape_interval: float,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.ledger = ledger
        self.clock = clock
        self.scrape_interval = scrape_interval
        self.wall_clock = wall_clock  # bundles show when a /metrics text was taken
        self.observations = Observations()

    def scrape_step(self, scraper: MetricsScraper) -> Step:
        """One ``/metrics`` sample into the progress tracker; a counter going down is a restart."""
        ledger, seen = self.ledger, self.observations
        interval = self.scrape_interval
        previous_at = float("-inf")

        async def step() -> None:
            nonlocal previous_at
            try:
                sample = await scraper.scrape()
            except ScrapeError as exc:
                seen.last_scrape_error = f"{exc.reason.value}: {exc.detail}"
                if exc.reason is EvidenceFailure.CONNECT:
                    ledger.saw_refusal(self.clock())
                return
            seen.last_scrape_error = ""
            ledger.saw_answer()
            if scraper.last_text is not None:
                seen.metrics_texts.append((self.wall_clock(), scraper.last_text))
            update = ledger.progress.observe(
                sample,
                canaries_moving=ledger.last_canary_activity > previous_at,
                # A canary sent just before the previous sample may show its
                # first work in this interval: look back one more interval.
                sent_budget=ledger.budget_sent_between(previous_at - interval, sample.at),
                own_in_flight=ledger.in_flight(),
            )
            previous_at = sample.at
            if update.restarted:
                ledger.new_epoch("a vLLM counter went down", self.clock())

        return step

    def health_step(self, poller: VllmHealthPoller) -> Step:
        """One ``/health`` poll; a refused connection may open a new epoch."""

        async def step() -> None:
            poll = await poller.poll()
            if poll.failure is EvidenceFailure.CONNECT:
                self.ledger.saw_refusal(self.clock())
            elif poll.status is not None:
                self.ledger.observe_health(poll.status, self.clock())

        return step

    def process_step(self, watcher: ProcessWatcher) -> Step:
        """One process-table sample: engine processes stopped or gone, API server PID changes."""

        async def step() -> None:
            self.ledger.observe_processes(await watcher.sample_async(), self.clock())

        return step
