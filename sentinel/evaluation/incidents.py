"""Incidents: diagnostics captured when a hang is suspected, and the Events that announce them.

An incident opens at the first suspicion (a canary missed its deadline, the
engine process stopped, vLLM's ``/health`` failing) and closes once
everything is healthy again. One bundle is captured per incident, right at
the start, so it is on disk before — or a few seconds after — liveness turns
red and the kubelet destroys the evidence. Capture runs in its own loop and
never delays the verdict or the endpoints; ``sentinel run`` captures in a
child process (:mod:`sentinel.diagnostics.child`), so a capture neither holds
the GIL the probe thread needs nor leaves its imports and allocations in the
daemon's memory.

Hang confirmations become Kubernetes Events on the pod (one log line outside
a cluster), naming the incident bundle when there is one; so do the
evaluator's announcements that are no hang (a canary kind set aside).

Reasons and cause lines quote what sentinel saw (a process title, an error
body), so they are redacted where they enter, and ``/incidents`` is redacted
again on the way out.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from aiohttp import web

from sentinel.config.settings import Settings
from sentinel.diagnostics.bundle import DiagnosticsContext, Trigger, capture
from sentinel.diagnostics.child import ChildCaptureError, StoredIncident, capture_in_child
from sentinel.diagnostics.sections import ProbeTransition
from sentinel.diagnostics.store import (
    IncidentRecord,
    IncidentStore,
    RetentionPolicy,
    incidents_payload,
)
from sentinel.diagnostics.window import SampleWindow
from sentinel.evaluation.node import node_name
from sentinel.telemetry.events import EventReason, EventReporter
from sentinel.telemetry.logging import get_logger
from sentinel.telemetry.metrics import SentinelMetrics
from sentinel.telemetry.redact import redact, redact_document
from sentinel.verdict import Action, Hang, HangKind, Verdict
from sentinel.verdict.cause import describe

log = get_logger("sentinel.incidents")

ContextFactory = Callable[[Trigger], DiagnosticsContext]
# Captures one bundle and stores it; raises (OSError, ChildCaptureError) when none was stored.
Capturer = Callable[[DiagnosticsContext, IncidentStore], Awaitable[StoredIncident]]

# A busy server can miss canary deadlines again and again; one bundle per this
# many seconds is plenty, and the store's retention bounds the rest.
MIN_CAPTURE_GAP = 30.0
# Suspicions that keep coming without a hang (a working server whose canaries
# queue behind its load) are captured ever more rarely: each stored suspicion's
# bundle doubles the gap before the next, up to this; a confirmed hang, or this
# long without a suspicion's capture, starts again at MIN_CAPTURE_GAP. A
# confirmed hang's own capture is never held by it.
MAX_SUSPICION_GAP = 600.0
# The GIL switch interval while a bundle is captured in the daemon's own process
# (sentinel run sets 1 ms otherwise).
CAPTURE_SWITCH_INTERVAL_S = 0.0002


async def capture_here(context: DiagnosticsContext, store: IncidentStore) -> StoredIncident:
    """Capture and store in this process: where no child can start, and in tests."""
    # The capture's worker threads hold the GIL in turn; a shorter switch
    # interval lets the probe listener's thread in sooner meanwhile.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(min(interval, CAPTURE_SWITCH_INTERVAL_S))
    try:
        result = await capture(context)
        return StoredIncident.of(result, await store.write_async(result))
    finally:
        sys.setswitchinterval(interval)


def in_child(*, log_level: str, python: str = sys.executable) -> Capturer:
    """Capture in a child process (:mod:`sentinel.diagnostics.child`); here if none can start."""

    async def run(context: DiagnosticsContext, store: IncidentStore) -> StoredIncident:
        try:
            return await capture_in_child(context, store, log_level=log_level, python=python)
        except ChildCaptureError as exc:
            if exc.started:
                raise
            log.warning("diagnostics_in_process", why=redact(str(exc)))
            return await capture_here(context, store)

    return run


@dataclass(slots=True)
class OpenIncident:
    trigger: Trigger
    opened: float
    record: IncidentRecord | None = None
    confirmed: bool = False  # opened for a confirmed hang, not a suspicion


class IncidentRecorder:
    """Owns the capture queue, the bundle store and the Event reporter."""

    def __init__(
        self,
        store: IncidentStore | None,
        metrics: SentinelMetrics,
        context: ContextFactory,
        *,
        reporter: EventReporter | None = None,
        capturer: Capturer = capture_here,
        clock: Callable[[], float] = time.monotonic,
        node: str = "",
    ) -> None:
        self.store = store
        self.node = node  # the pod's node (sentinel.evaluation.node): '' when not told
        self.capturer = capturer
        self.metrics = metrics
        self.context = context
        self.reporter = reporter
        self.clock = clock
        self.current: OpenIncident | None = None
        self.recent: list[IncidentRecord] = []
        self._last_capture = float("-inf")
        self._last_hang_capture = float("-inf")
        self._suspicion_gap = MIN_CAPTURE_GAP
        self._queue: asyncio.Queue[OpenIncident] = asyncio.Queue()
        self._events: asyncio.Queue[tuple[EventReason, str]] = asyncio.Queue()
        self._answers: Callable[[], Sequence[ProbeTransition]] | None = None
        # The minutes of /metrics samples each capture keeps (fed by the daemon's observers).
        self.samples = SampleWindow()

    @classmethod
    def build(
        cls,
        directory: Path,
        *,
        enabled: bool,
        max_incidents: int,
        max_bytes: int,
        metrics: SentinelMetrics,
        context: ContextFactory,
        capturer: Capturer = capture_here,
    ) -> IncidentRecorder:
        store = (
            IncidentStore(directory, RetentionPolicy(max_incidents, max_bytes)) if enabled else None
        )
        reporter = EventReporter.from_environment()
        return cls(store, metrics, context, reporter=reporter, capturer=capturer, node=node_name())

    @classmethod
    def for_settings(
        cls, settings: Settings, metrics: SentinelMetrics, context: ContextFactory
    ) -> IncidentRecorder:
        """The daemon's recorder: the diagnostics settings, captured in a child process."""
        return cls.build(
            settings.diagnostics_dir,
            enabled=settings.diagnostics,
            max_incidents=settings.diagnostics_max_incidents,
            max_bytes=settings.diagnostics_max_bytes,
            metrics=metrics,
            context=context,
            capturer=in_child(log_level=settings.log_level),
        )

    def follow_answers(self, history: Callable[[], Sequence[ProbeTransition]]) -> None:
        """Where each capture reads the answers' flips: the evaluator's own history.

        Read when a capture starts, not when its incident opens, so a
        confirmed hang's bundle holds the liveness flip of the same evaluation.
        """
        self._answers = history

    # -- called by the evaluation loop (synchronous, never waits) ------------
    def suspect(self, kind: str, reason: str, *, confirmed: bool = False) -> None:
        """Open an incident (and queue its capture) unless one is open already.

        A confirmed hang (``confirmed``) is the incident a restart follows, so
        it always gets a bundle of its own: it takes over an open suspicion
        (a missed deadline, a slow first check during start-up) and is not
        held by the gap after that suspicion's capture, only by the gap after
        another confirmed hang's.
        """
        current = self.current
        if current is not None and (current.confirmed or not confirmed):
            return
        reason = redact(reason)
        incident = OpenIncident(Trigger(kind, reason), self.clock(), confirmed=confirmed)
        self.current = incident
        now = incident.opened
        last = self._last_hang_capture if confirmed else self._last_capture
        if confirmed or now - self._last_capture >= MAX_SUSPICION_GAP:
            self._suspicion_gap = MIN_CAPTURE_GAP
        gap = MIN_CAPTURE_GAP if confirmed else self._suspicion_gap
        capturing = self.store is not None and now - last >= gap
        log.warning("incident_opened", trigger=kind, reason=reason, capturing=capturing)
        if capturing:
            self._last_capture = now
            if confirmed:
                self._last_hang_capture = now
            self._queue.put_nowait(incident)

    def all_clear(self) -> None:
        if self.current is not None:
            log.info("incident_closed", trigger=self.current.trigger.kind)
            self.current = None

    def hang_confirmed(self, hang: Hang, *, enforce: bool, verdict: Verdict) -> None:
        """Queue the Event for a confirmed hang (posting happens in the loop).

        A hang its restarts did not fix says which node to look at, first.
        """
        message = hang.reason
        if verdict.ineffective is not None:
            reason = EventReason.RESTART_INEFFECTIVE
            message = f"{describe(verdict.ineffective)}: {hang.reason}"
        elif verdict.brake_engaged:
            reason = EventReason.RESTART_BRAKE
        elif hang.action is Action.RESTART and not enforce:
            reason = EventReason.WOULD_RESTART
        elif hang.kind == HangKind.CORRUPT:
            reason = EventReason.CORRUPT_OUTPUT
        else:
            reason = EventReason.HANG_DETECTED
        self._events.put_nowait((reason, redact(message)))

    def announce(self, reason: EventReason, message: str) -> None:
        """Queue an Event that is no hang (a canary kind set aside, say); posted in the loop."""
        self._events.put_nowait((reason, redact(message)))

    # -- the loops -------------------------------------------------------------
    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self._capture_loop(), name="diagnostics")
            group.create_task(self._event_loop(), name="events")

    async def _capture_loop(self) -> None:
        while True:
            incident = await self._queue.get()
            assert self.store is not None
            started = self.clock()
            try:
                stored = await self.capturer(self._context(incident.trigger), self.store)
            except Exception as exc:  # no bundle, for whatever reason: counted, never fatal
                self.metrics.diagnostics_finished(self.clock() - started, False)
                error = redact(f"{type(exc).__name__}: {exc}")
                log.error("diagnostics_not_written", error=error)
                continue
            self.metrics.diagnostics_finished(self.clock() - started, stored.complete)
            if not incident.confirmed:  # the next suspicion waits twice as long
                self._suspicion_gap = min(self._suspicion_gap * 2, MAX_SUSPICION_GAP)
            record = stored.record
            incident.record = record
            self.recent = [record, *self.recent][:20]
            log.warning(
                "diagnostics_written",
                incident=record.id,
                path=record.path,
                cause=stored.cause,
                summary=stored.cause_line,
                duration=round(stored.duration_s, 3),
            )
            self._events.put_nowait(
                (EventReason.DIAGNOSTICS, redact(f"{stored.cause_line} (bundle {record.path})"))
            )

    def _context(self, trigger: Trigger) -> DiagnosticsContext:
        context = self.context(trigger)
        if samples := self.samples.recent():  # none kept (no scrape yet): the context as made
            context = replace(context, samples=samples)
        if self._answers is None:
            return context
        return replace(context, probe_answers=tuple(self._answers()))

    async def _event_loop(self) -> None:
        while True:
            reason, message = await self._events.get()
            if self.reporter is None or not self.reporter.enabled:
                log.info("event_not_posted", reason=reason.value, why="not in a cluster")
                continue
            outcome = await self.reporter.post(reason, message)
            if not outcome.posted:
                log.warning("event_failed", reason=reason.value, detail=outcome.detail)

    def close(self) -> None:
        if self.reporter is not None:
            self.reporter.close()

    # -- views -----------------------------------------------------------------
    async def incidents_json(self) -> dict[str, object]:
        records = await self.store.incidents_async() if self.store is not None else []
        return redact_document(incidents_payload(records))

    def routes(self) -> list[web.RouteDef]:
        async def incidents(_request: web.Request) -> web.Response:
            return web.json_response(await self.incidents_json())

        return [web.get("/incidents", incidents)]


def hang_outcome(hang: Hang, *, enforce: bool, braked: bool, held: bool = False) -> str:
    """What a confirmed hang does to the pod, in words for the log."""
    if braked:
        return "brake engaged: unready, not restarting"
    if held:
        return "restart budget exhausted: unready, not restarting until a slot frees"
    if hang.action is Action.RESTART and not enforce:
        return "would restart (observe-only)"
    return {
        Action.RESTART: "liveness failing",
        Action.UNREADY: "readiness failing",
        Action.ALERT: "alert only",
    }[hang.action]
