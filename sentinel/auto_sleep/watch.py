"""Idle auto-sleep: the ``auto_sleep`` evidence section.

Whether the server sleeps when idle (the ``auto_sleep_idle`` setting first,
its command line's ``--sleep-idle-ttl`` or ``--sleep-idle-seconds`` as the
fallback, :mod:`sentinel.auto_sleep.sleep_flags`), when real traffic was last
seen (work beyond sentinel's canaries, real completions, requests waiting or
running beyond sentinel's own in flight), the real requests shown in every
sample since when, and whether anything tells if it sleeps (a sleep gauge or
``/is_sleeping``). The canary hold (:mod:`sentinel.auto_sleep.hold`)
reads it to stop the canaries that would keep the server awake, and tells it
when the hold began, whether the current sleep is an idle one (it began while
the canaries were held) and when a wake was asked of it; the wake rule
(:mod:`sentinel.verdict.hangs.wake`)
judges the frozen section; ``/status`` shows it under
``sections.auto_sleep``. A new server epoch forgets the old one's traffic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from sentinel.auto_sleep.sleep_flags import sleep_idle_ttl
from sentinel.config.settings import Settings
from sentinel.evidence.metrics import SLEEP_PREFIX, MetricsSample
from sentinel.record.observers import Observers
from sentinel.record.reading import LedgerReading
from sentinel.telemetry.logging import get_logger
from sentinel.verdict import Phase
from sentinel.verdict.hangs.wake import SECTION, AutoSleepSection
from sentinel.verdict.sections import SectionKey

log = get_logger("sentinel.auto_sleep")


class AutoSleepWatch:
    """The provider of the ``auto_sleep`` section; :meth:`observe_sample` is a sample listener."""

    key: SectionKey[AutoSleepSection] = SECTION

    def __init__(self, ledger: LedgerReading, configured: float | None, *, hold: float) -> None:
        self._ledger = ledger
        self._configured = configured  # auto_sleep_idle (None: read the command line)
        self.hold = hold  # auto_sleep_hold: real traffic this recent keeps canaries flowing
        self._epoch = ledger.epoch
        self._section = AutoSleepSection()
        self.held_since: float | None = None  # canaries held since; the hold's to write
        # The current sleep, followed by :meth:`follow`:
        self.idle_since: float | None = None  # it began while canaries were held
        self.wake_asked_at: float | None = None  # a sign of a wake during it
        self.wake_sign = ""
        self.woke_idle = False  # the last sleep left was an idle one (woken on request)
        self.woke_at: float | None = None  # when an idle sleep was last left

    @classmethod
    def listening(cls, observers: Observers, settings: Settings) -> AutoSleepWatch:
        """A watch told every sample ``observers`` take, after the ledger; of the settings it
        reads ``auto_sleep_idle`` and ``auto_sleep_hold``."""
        watch = cls(observers.ledger, settings.auto_sleep_idle, hold=settings.auto_sleep_hold)
        observers.sample_listeners.append(watch.observe_sample)
        return watch

    def ttl(self) -> tuple[float, str] | None:
        """The server's idle TTL and who said so (None: it does not auto-sleep, as far as told)."""
        if self._configured is not None:
            return self._configured, "config (auto_sleep_idle)"
        snapshot = self._ledger.processes
        api = None if snapshot is None else snapshot.api
        if api is None or not api.cmdline:
            return None
        found = sleep_idle_ttl(api.cmdline)
        return None if found is None else (found[0], f"command line ({found[1]})")

    def observe_sample(self, sample: MetricsSample) -> None:
        if self._ledger.epoch != self._epoch:
            self._epoch, self._section = self._ledger.epoch, AutoSleepSection()
            self.idle_since = self.wake_asked_at = self.woke_at = None
            self.wake_sign, self.woke_idle = "", False
        before = self._section
        gauges = sample.gauges
        shown = [gauges[k] for k in ("waiting", "running") if k in gauges]
        own = max(self._ledger.progress.own_requests(sample), float(self._ledger.in_flight()))
        real = max(sum(shown) - own, 0.0) if shown else 0.0
        since = before.waiting_since
        real_at = before.real_at
        if real >= 1.0:
            since = sample.at if since is None else since
            real_at = sample.at
        else:
            since = None
        self._section = replace(before, waiting=real, waiting_since=since, real_at=real_at)

    def follow(self, now: float) -> None:
        """Tell an idle sleep from one asked for, and notice a wake asked of it.

        A sleep is idle when it began while the canaries were held: they go out
        every few seconds, well inside any idle TTL, so a sleep that began while
        they flowed was asked for. A wake asked of an idle sleep shows as
        ``/is_sleeping`` unanswered (the wake is an engine call, and the engine
        answers nothing else meanwhile) or real requests shown waiting.
        """
        if self._ledger.epoch != self._epoch:
            return  # observe_sample starts the new epoch's section first
        life = self._ledger.lifecycle.current
        if life.phase is not Phase.ASLEEP:
            idle = self.idle_since
            if life.stalled or idle is not None:
                self.woke_idle = idle is not None
            if idle is not None:
                self.woke_at = now
                log.info("woke_from_idle_sleep", asleep_for=round(now - idle, 3))
            self.idle_since, self.wake_asked_at, self.wake_sign = None, None, ""
            return
        held = self.held_since
        if self.idle_since is None and held is not None and life.since >= held:
            self.idle_since = life.since
        if self.idle_since is None or self.wake_asked_at is not None:
            return
        sign = self._wake_sign()
        if sign:
            self.wake_asked_at, self.wake_sign = now, sign
            log.info("wake_asked", sign=sign, asleep_for=round(now - self.idle_since, 3))

    def _wake_sign(self) -> str:
        unanswered = self._ledger.lifecycle.readings.unanswered
        if any(u.startswith("GET /is_sleeping:") for u in unanswered):
            return "/is_sleeping unanswered while asleep: the engine is busy waking"
        if self.real_waiting():
            return "real requests shown waiting"
        return ""

    def real_at(self) -> float | None:
        """When real traffic was last seen: requests shown, work or completions beyond canaries."""
        progress = self._ledger.progress
        seen = [self._section.real_at, progress.last_progress_at, progress.last_real_completion_at]
        known = [t for t in seen if t is not None]
        return max(known) if known else None

    def real_waiting(self) -> bool:
        """Whether the newest sample shows real requests waiting or running."""
        return self._section.waiting >= 1.0 and self._ledger.epoch == self._epoch

    def sleep_known(self) -> bool:
        """Whether anything tells that the server sleeps: a sleep gauge or ``/is_sleeping``."""
        readings = self._ledger.lifecycle.readings
        gauges = readings.gauges or {}
        return readings.is_sleeping is not None or any(k.startswith(SLEEP_PREFIX) for k in gauges)

    def section(self, now: float) -> AutoSleepSection:
        if self._ledger.epoch != self._epoch:
            return AutoSleepSection()  # the old server's traffic is no evidence
        self.follow(now)
        found = self.ttl()
        known = self.sleep_known()
        return replace(
            self._section,
            ttl=None if found is None else found[0],
            source="" if found is None else found[1],
            sleep_known=known,
            held_since=self.held_since,
            real_at=self.real_at(),
            idle_since=self.idle_since,
            wake_asked_at=self.wake_asked_at,
            wake_sign=self.wake_sign,
            woke_idle=self.woke_idle,
        )

    def status(self, section: AutoSleepSection, now: float) -> Mapping[str, Any] | None:
        if not section.applies:
            return {"auto_sleep": False, "why": "neither configured nor on the command line"}
        ttl = section.ttl or 0.0
        held = section.held_since
        real = section.real_at
        return {
            "auto_sleep": True,
            "idle_ttl": ttl,
            "source": section.source,
            "canaries": (
                f"canaries held: the server auto-sleeps after {ttl:.0f}s idle; "
                "the wake is judged when real traffic arrives"
                if held is not None
                else f"canaries flow: real traffic within the hold ({self.hold:.0f}s)"
                if section.sleep_known
                else "canaries flow, never held: nothing tells whether it sleeps or wakes, "
                "so a held canary could hide a hang"
            ),
            "held_for": None if held is None else round(now - held, 3),
            "real_traffic_ago": None if real is None else round(now - real, 3),
            "sleeps": (
                "told by the sleep gauge or /is_sleeping"
                if section.sleep_known
                else "cannot tell whether it sleeps: no sleep gauge and no /is_sleeping"
            ),
            "asleep_idle": section.asleep_idle,
            "wake_asked": (
                None
                if section.wake_asked_at is None
                else {"ago": round(now - section.wake_asked_at, 3), "sign": section.wake_sign}
            ),
            "real_waiting": section.waiting,
            "real_waiting_for": (
                None if section.waiting_since is None else round(now - section.waiting_since, 3)
            ),
        }
