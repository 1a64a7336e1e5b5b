"""vLLM fault tolerance: the ``fault_tolerance`` evidence section and the recovery it holds.

One observer step asks vLLM's fault-tolerance status
(:mod:`sentinel.evidence.fault_tolerance`) where it can matter, so the idle
footprint of a server without fault tolerance does not grow:

* the server's command line shows ``--enable-fault-tolerance``: every step
  (the ``/health`` cadence, 2 s), since the frozen-engine window (5 s) must
  find the recovery held first (``--fault-tolerance-config`` alone registers
  no status route: it is not "on" here);
* it does not show it: never;
* it is not in view (no shared process namespace): once per server epoch to
  learn whether the route exists; found, every step; both routes 404 (or a
  401), again only after :data:`~sentinel.evidence.endpoint_poll.ABSENT_RETRY`;
* whatever the above, while canaries are refused with 0.34's faulted 503;
* but never while both routes 404'd within the retry, whatever the flags.

An engine ``unhealthy`` or ``diagnosing`` is a recovery: the lifecycle's
phase ``recovering`` (readiness red naming it, the generation rules off,
windows starting again at ``healthy``), timed from the first read that showed
it; a re-fault before anything is served (a canary success, real progress)
continues that clock, so an orchestrator's retry that never holds is bounded.
Faulted 503s with no status readable are held the same way, with why "cannot
tell", while they are the newest canary answer, the last within
:data:`~sentinel.record.lifecycle.KEEP_WORD`, nothing served since, and no
readable status says every engine healthy (the refusal is then stale). A
status that stops answering keeps its last word for
:data:`~sentinel.record.lifecycle.KEEP_WORD` seconds, then is no evidence: a
wedged API server is not hidden behind a stale "unhealthy". The rule
(:mod:`sentinel.verdict.hangs.fault_tolerance`) judges the section.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import httpx

from sentinel.canary.refusal import Refusal
from sentinel.config.settings import Settings
from sentinel.evidence.fault_tolerance import FaultTolerancePoller, FtPoll
from sentinel.evidence.ft_status import (
    DEAD,
    HEALTHY,
    KNOWN_STATUSES,
    RECOVERING,
    FtEngine,
    fault_tolerance_flags,
)
from sentinel.record.ledger import Ledger
from sentinel.record.lifecycle import KEEP_WORD
from sentinel.record.observers import Observers
from sentinel.verdict.hangs.fault_tolerance import SECTION, FaultToleranceSection
from sentinel.verdict.sections import SectionKey

SHOWN_ENGINES = 16  # engines /status lists; the rest are counted


class FaultToleranceWatch:
    """The provider of the ``fault_tolerance`` section; :meth:`step` is its observer step."""

    key: SectionKey[FaultToleranceSection] = SECTION

    def __init__(
        self, ledger: Ledger, clock: Callable[[], float], *, timeout: float, grace: float
    ) -> None:
        self._ledger = ledger
        self._clock = clock
        self._timeout, self._grace = timeout, grace  # the settings: /status shows the window
        self._epoch = ledger.epoch
        self._section = FaultToleranceSection()
        self._heard_at: float | None = None  # the last poll that read a status
        # The recovery's start, kept past a healthy read until something is served after
        # the last read that showed it (then None): a re-fault meanwhile continues the clock.
        self._recovery_start: float | None = None
        self._recovering_at: float | None = None  # the last read that showed a recovery
        self._healthy_at: float | None = None  # the first read after it that showed none

    @classmethod
    def for_settings(cls, observers: Observers, settings: Settings) -> FaultToleranceWatch:
        """A watch on the observers' ledger and clock; of the settings it reads
        ``fault_tolerance_timeout`` and ``fault_tolerance_grace``."""
        timeout, grace = settings.fault_tolerance_timeout, settings.fault_tolerance_grace
        return cls(observers.ledger, observers.clock, timeout=timeout, grace=grace)

    def observer_step(
        self, client: httpx.AsyncClient, settings: Settings, api_key: str | None
    ) -> tuple[str, float, Callable[[], Awaitable[None]]]:
        """(heartbeat name, interval, step): at the ``/health`` cadence, asking only when due."""
        poller = FaultTolerancePoller(
            client, settings.target, self._clock, api_key=api_key, timeout=settings.health_timeout
        )
        return "fault-tolerance", settings.health_interval, self.step(poller)

    def _flags(self) -> tuple[bool | None, float | None]:
        """What the command line says: on, off or None (not in view), and the timeout shown."""
        snapshot = self._ledger.processes
        api = None if snapshot is None else snapshot.api
        if api is None or not api.cmdline:
            return None, None
        return fault_tolerance_flags(api.cmdline)

    def _served_at(self) -> float | None:
        """When real work last moved or a canary last succeeded, this epoch (None: never)."""
        records = self._ledger.records.values()
        times = [r.finished for record in records for r in record.results if r.ok]
        progress = self._ledger.progress.last_progress_at
        return max([*times, progress] if progress is not None else times, default=None)

    def _faulted(self, now: float, engines: tuple[FtEngine, ...] = ()) -> tuple[float, str] | None:
        """(since, message) of the faulted 503s refusing now; None: none, or over.

        A success ends the ledger's run, but one may not come for long (the
        text canary skipped while clients keep the server busy or asleep, a
        reasoning model's structured canary set aside), so the run counts only
        while it is the newest canary answer, its last refusal within
        KEEP_WORD, nothing served after it, and the status read (``engines``)
        does not say every engine healthy; it is timed from what was served last.
        """
        run = self._ledger.refusals.frozen().get(Refusal.FAULTED)
        if run is None or now - run.at >= KEEP_WORD:
            return None
        if engines and all(e.status == HEALTHY for e in engines):
            return None  # a refusal the status has since overtaken
        records = self._ledger.records.values()
        newest = max(
            (r.finished for rec in records if rec.enabled for r in rec.results), default=None
        )
        served = self._served_at()
        if (newest is not None and newest > run.at) or (served is not None and served > run.at):
            return None
        return max(run.since, served if served is not None else run.since), run.message

    def due(self, poller: FaultTolerancePoller) -> bool:
        """Whether the status is worth asking now (see the module docstring)."""
        enabled, _ = self._flags()
        if poller.missing:  # no status route on this server: flags or refusals change nothing
            return False
        if self._faulted(self._clock()) is not None or enabled:
            return True
        if enabled is False:
            return False
        return bool(self._section.known) or not poller.absent

    def step(self, poller: FaultTolerancePoller) -> Callable[[], Awaitable[None]]:
        async def step() -> None:
            if self._ledger.epoch != self._epoch:
                self._epoch = self._ledger.epoch
                self._section, self._heard_at = FaultToleranceSection(), None
                self._recovery_start = self._recovering_at = self._healthy_at = None
                poller.forget()
            if not self.due(poller):
                now = self._clock()
                if self._section != FaultToleranceSection() or self._faulted(now) is not None:
                    self.observe(FtPoll(absent=True), now)
                return
            self.observe(await poller.poll(), self._clock())

        return step

    def observe(self, poll: FtPoll, now: float) -> None:
        """One poll's outcome into the section and the lifecycle's ``recovering`` word."""
        before = self._section
        enabled, timeout = self._flags()
        known = "command line" if enabled else before.known
        cannot = ""
        if poll.engines is not None:
            engines, self._heard_at = poll.engines, now
            known = known or "status endpoint"
        else:
            kept = self._heard_at is not None and now - self._heard_at < KEEP_WORD
            engines = before.engines if kept and poll.problem else ()
            if poll.problem:
                cannot = "cannot tell: " + poll.problem
                cannot += " (its last word kept)" if engines else ""
            elif enabled:
                cannot = "cannot tell: fault tolerance is on but both status routes answer 404"
        recovering = [e for e in engines if e.status in RECOVERING]
        dead = [e for e in engines if e.status == DEAD]
        # 0.34's faulted 503 where the status does not say why (unreadable, or a status no
        # release has): held as a recovery all the same. One the status says all healthy
        # to is stale (see _faulted).
        faulted = None if recovering or dead else self._faulted(now, engines)
        if faulted is not None and engines and not cannot:
            cannot = "cannot tell: the status says no engine is recovering"
        self._section = FaultToleranceSection(
            known=known,
            path=poll.path or (before.path if engines else ""),
            engines=engines,
            recovering_since=self._recovery_clock(now, bool(recovering)),
            dead_since=_since(before.dead_since, now) if dead else None,
            faulted_since=None if faulted is None else faulted[0],
            faulted_message="" if faulted is None else faulted[1],
            cannot_tell=cannot,
            timeout=timeout,
            unknown=tuple(sorted({e.status for e in engines} - KNOWN_STATUSES)),
        )
        self._ledger.observe_lifecycle(now, recovering=self._why(self._section) or None)

    def _recovery_clock(self, now: float, recovering: bool) -> float | None:
        """When the recovery held now began (None: none held now); see ``_recovery_start``."""
        last = self._recovering_at
        if not recovering and last is not None and self._healthy_at is None:
            self._healthy_at = now  # the first read since the last recovering one that shows none
        served = self._served_at()
        over = served is not None and last is not None and served > last
        if self._healthy_at is not None and over:
            # Served since it was healthy: the recovery is over, a new fault a new clock.
            self._recovery_start = self._recovering_at = self._healthy_at = None
        if not recovering:
            return None
        self._recovering_at, self._healthy_at = now, None
        if self._recovery_start is None:
            self._recovery_start = now
        return self._recovery_start

    def _why(self, section: FaultToleranceSection) -> str:
        """The lifecycle's word while a recovery is held ("" while none is)."""
        route = f"GET {section.path}" if section.path else "the fault-tolerance status"
        waiting = [e.describe() for e in section.engines if e.status in RECOVERING]
        if waiting:
            return (
                f"fault tolerance: {', '.join(waiting[:SHOWN_ENGINES])}, waiting for the "
                f"orchestrator's retry ({route})"
            )
        if section.faulted_since is not None:
            return (
                f"fault tolerance: canaries refused 503 '{section.faulted_message[:120]}'; "
                f"{section.cannot_tell or 'cannot tell: no status read'}"
            )
        return ""

    def section(self, now: float) -> FaultToleranceSection:
        if self._ledger.epoch != self._epoch:
            return FaultToleranceSection()  # the old server's status is no evidence
        return self._section

    def status(self, section: FaultToleranceSection, now: float) -> Mapping[str, Any] | None:
        if not section.known and not section.cannot_tell and section.faulted_since is None:
            return None  # a server without fault tolerance: nothing to show
        timeout = section.timeout if section.timeout is not None else self._timeout
        held = section.held_since
        shown: dict[str, Any] = {
            "known_from": section.known or None,
            "path": section.path or None,
            "engines": [
                {k: v for k, v in _engine_json(e).items() if v not in ("", None)}
                for e in section.engines[:SHOWN_ENGINES]
            ],
            "recovering_for": None if held is None else round(now - held, 3),
            "window": timeout + self._grace,
            "recovery_timeout": timeout,
            "timeout_from": "command line" if section.timeout is not None else "setting",
            "dead_for": None if section.dead_since is None else round(now - section.dead_since, 3),
            "cannot_tell": section.cannot_tell or None,
        }
        if len(section.engines) > SHOWN_ENGINES:
            shown["more_engines"] = len(section.engines) - SHOWN_ENGINES
        if section.faulted_since is not None:
            shown["faulted_refusal"] = section.faulted_message
        if section.unknown:
            shown["unknown_statuses"] = list(section.unknown)
        return shown


def _since(before: float | None, now: float) -> float:
    return now if before is None else before


def _engine_json(engine: Any) -> dict[str, Any]:
    return {
        "id": engine.id,
        "status": engine.status,
        "fault_info": engine.fault_info,
        "ft_state": engine.ft_state,
        "ft_error": engine.ft_error,
    }
