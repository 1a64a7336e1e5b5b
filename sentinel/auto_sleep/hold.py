"""Canaries held while an auto-sleeping server has no real traffic.

A server that sleeps when idle (docs/design.md, "Idle auto-sleep") counts
every request toward its idle timer, sentinel's canaries included: a text
canary every 5 s would keep it awake for good and defeat the feature. So
once startup has passed, auto-sleep applies
(:class:`~sentinel.auto_sleep.watch.AutoSleepWatch`) and no real traffic
was seen for ``auto_sleep_hold``, every canary kind is held: none is sent,
``sentinel_canaries_skipped_total{reason="auto_sleep"}`` counts each step
skipped, and the log says so once when the hold begins and once when it ends.
Real traffic (requests shown waiting or running, work beyond the canaries)
ends it at once, and so does any sign that a wake was asked of an idle
sleep: the requests a waking vLLM holds wait in its middleware, where no
gauge counts them, but the wake is an engine call, so ``/is_sleeping`` goes
unanswered while it runs, and a completed wake ends the sleep. The canaries
then go out again and are judged as any request is; a wake that never comes
is the ``wake`` rule's. The hold is a time after real traffic, not zero, so a
hang right after a burst is still caught by the canaries, and after a wake the
canaries flow again for that long.

The hold is also the one that tells an idle sleep from one asked for: the
canaries go out every few seconds, well inside any idle TTL, so a sleep that
began while they flowed was asked for (``POST /sleep``, an RL trainer) and
keeps today's rules (unready, the stall bound); only a sleep that began while
they were held is idle, ready because a request wakes it.
"""

from __future__ import annotations

from collections.abc import Callable

from sentinel.auto_sleep.watch import AutoSleepWatch
from sentinel.record.reading import LedgerReading
from sentinel.telemetry.logging import get_logger

log = get_logger("sentinel.scheduler")

SKIP_REASON = "auto_sleep"


class CanaryHold:
    """Whether canaries are held now; the one writer of the watch's ``held_since``.

    The scheduler takes it as its ``hold`` (:class:`~sentinel.scheduling.scheduler.Hold`)
    and counts each step held under :attr:`reason`.
    """

    reason = SKIP_REASON

    def __init__(
        self, watch: AutoSleepWatch, ledger: LedgerReading, *, clock: Callable[[], float]
    ) -> None:
        self.watch = watch
        self.ledger = ledger
        self.clock = clock
        self._quiet_from = clock()  # idle is counted from here before any real traffic

    def held(self, now: float) -> bool:
        """Whether canaries are held at ``now``; logs when the hold begins and ends."""
        self.watch.follow(now)
        hold = self._should_hold(now)
        watch = self.watch
        if hold and watch.held_since is None:
            watch.held_since = now
            found = watch.ttl()
            log.info(
                "canaries_held",
                why="the server auto-sleeps; the wake is judged when real traffic arrives",
                idle_ttl=None if found is None else found[0],
                source=None if found is None else found[1],
            )
        elif not hold and watch.held_since is not None:
            log.info("canaries_resumed", held_for=round(now - watch.held_since, 3))
            watch.held_since = None
        return hold

    def _should_hold(self, now: float) -> bool:
        if self.watch.ttl() is None or not self.ledger.plan.startup_passed:
            return False
        if not self.watch.sleep_known():
            return False  # blind to the sleep and the wake: held canaries would hide a hang
        if self.watch.wake_asked_at is not None:
            return False  # a wake was asked: the canaries judge it too
        if self.ledger.lifecycle.refused(now):
            return False  # paused by the canaries' word: only a canary sees the pause end
        if self.watch.real_waiting():
            return False  # real requests: the wake is judged, by the canaries too
        seen = [self._quiet_from, self.watch.real_at(), self.watch.woke_at]
        last = max(t for t in seen if t is not None)  # the canaries flow a hold after a wake
        return now - last >= self.watch.hold
