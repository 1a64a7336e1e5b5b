"""The scheduler owns time for canaries: cadence, jitter, deadlines, idle gating, pairing.

One loop per enabled canary spec, each with at most one canary in flight per
engine, so canaries never pile up. What each kind gets is the kind
registry's word (:mod:`sentinel.canary.kinds`); no code here names a kind. An
idle-gated kind (text) is skipped while real traffic has recently proven the
engine alive (once startup has passed, unless the lifecycle waits on it: a
pause read from refusals, a resume it has not passed since); every other kind
runs on its own cadence, ungated. A paired kind (every path kind, and
correctness) goes out with a control canary (text) sent at the same moment and
priority, so a path hang can be told from an engine hang; an unpaired kind
goes out alone. A canary that missed its deadline is retried at once.

Under data parallelism canaries are aimed at one engine each
(:mod:`sentinel.scheduling.aiming`). Each idle-gated cadence step sends one canary to
every engine real traffic has not recently proven alive (an engine whose own
work, beyond sentinel's canaries, vouched for it within the idle window needs
none), all at once: each engine gets the single-engine cadence, the per-GPU
load a one-engine server already gets, and detection does not wait for a
rotation that grows with the engine count. A step ends when its last canary
does, and a missed deadline retries the step at once. Each canary of any
other kind (with its control) goes to the next engine in turn: a path is
mostly code every engine shares, its canaries are the heaviest (an image, a
grammar), and an engine that stops serving is the text canaries' to catch.
The model each canary addresses is :mod:`.served_model`'s. A text canary refused
on chat as a capability (a base model without a chat template) moves, with every
control, to a plain completion for the epoch (:mod:`.text_fallback`).

The scheduler records nothing itself: each result goes to the result sink
(:mod:`sentinel.record.sink`), and what a step's results mean for the kinds
(set aside, fall back) is the planner's (:mod:`sentinel.record.planner`),
told when each step ends; what the scheduler goes by is the plan it
publishes (:class:`~sentinel.record.plan.Plan`).

A late answer is an answer: with ``late_wait`` set, a kind's first canary past its
deadline is also awaited in the background (:mod:`.late`); a server back gets every
kind at once (:mod:`.comeback`).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Protocol

from sentinel.canary import kinds
from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.runner import CanaryRunner
from sentinel.canary.spec import CanaryKind, CanarySpec
from sentinel.progress.tracker import canary_budget
from sentinel.record.planner import Planner
from sentinel.record.reading import LedgerReading
from sentinel.record.sink import Outcome, ResultSink
from sentinel.scheduling.aiming import Aiming
from sentinel.scheduling.departure import LET_GO, Departure, unless_left
from sentinel.scheduling.late import LateAnswers
from sentinel.scheduling.served_model import ServedModel
from sentinel.scheduling.suspicion import Suspicion
from sentinel.scheduling.text_fallback import TextRoute
from sentinel.telemetry.logging import get_logger
from sentinel.telemetry.metrics import SentinelMetrics

log = get_logger("sentinel.scheduler")

# Told the loop's name and the exception one cadence step raised (the daemon's
# loop-failure record: /status, sentinel_loop_errors_total, a sparse log line).
ErrorHook = Callable[[str, BaseException], None]


class Hold(Protocol):
    """Every canary held while it says so: an auto-sleeping server's idle (sentinel.auto_sleep)."""

    @property
    def reason(self) -> str:
        """The skipped canaries' reason label (``sentinel_canaries_skipped_total``)."""
        ...

    def held(self, now: float) -> bool: ...


DEFAULT_MAX_TOKENS = 16
DEFAULT_PROMPT_ESTIMATE = 2048.0  # before a canary of the kind succeeded (images cost many)


class Scheduler:
    """Runs the canary loops against one target and records results in the ledger."""

    def __init__(
        self,
        specs: tuple[CanarySpec, ...],
        runner: CanaryRunner,
        ledger: LedgerReading,
        metrics: SentinelMetrics,
        *,
        sink: ResultSink,
        planner: Planner,
        idle_window: float,
        configured_model: str | None = None,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]],
        beat: Callable[[str, float], None],
        on_error: ErrorHook | None = None,
        rng: random.Random | None = None,
        late_wait: float = 0.0,
        suspicion: Suspicion | None = None,
        hold: Hold | None = None,
        departure: Departure | None = None,
    ) -> None:
        self.specs = tuple(s for s in specs if s.enabled)
        self.runner = runner
        self.ledger = ledger
        self.metrics = metrics
        # Where every result is recorded (the ledger, late waits, reachability, metrics,
        # the daemon's listener) and what decides the kinds' plan after each step: both
        # the daemon's, so the scheduler only reads the ledger.
        self.sink = sink
        self.planner = planner
        self.idle_window = idle_window
        self.clock = clock
        self.sleep = sleep  # paired with the clock: a virtual clock brings its own sleep
        self.beat = beat
        self.on_error = on_error
        self.rng = rng or random.Random()
        self.hold = hold  # an auto-sleeping server's idle: no canary wakes it
        self.suspicion = suspicion  # a standstill in the samples sends the text canary at once
        self.served_model = ServedModel(runner, self.sink, configured=configured_model)
        self.aim = Aiming(ledger)
        controls = [s for s in self.specs if s.kind == kinds.CONTROL]
        self.control_spec = controls[0] if controls else None
        self.route = TextRoute(self.specs)  # chat, or a plain completion for this epoch
        # Timed-out canaries still awaited, up to late_wait seconds past the send (0: none).
        self.late = LateAnswers(
            self.sink,
            late_wait=late_wait,
            outstanding=lambda kind: ledger.records[kind].outstanding,
            failed=self._failed,
            departure=departure,
        )
        self.departure = departure  # the server stopped listening: let go of what is in flight

    async def run(self) -> None:
        """One loop per enabled spec until cancelled.

        A step that raises is recorded and its loop carries on
        (:meth:`_loop`), so one kind's bug never cancels the other kinds'
        canaries in flight; only a loop dying outside a step ends them all.
        Late canaries are awaited by tasks of the same group: leaving it
        (cancelled) cancels them too, which closes their connections.
        """
        try:
            async with asyncio.TaskGroup() as group:
                self.late.group = group
                for spec in self.specs:
                    group.create_task(self._loop(spec), name=f"canary:{spec.name}")
        finally:
            self.late.group = None
            await self.late.close()

    @staticmethod
    def _max_gap(spec: CanarySpec) -> float:
        # A loop is awaiting its canary for at most one deadline (twice for the
        # multimodal baseline) between beats; add an interval and slack.
        return spec.interval * (1 + spec.jitter) + 2 * spec.deadline + 10.0

    async def _loop(self, spec: CanarySpec) -> None:
        name = f"canary:{spec.name}"
        suspected = False
        suspicion = self.suspicion  # it carries the comeback: every kind at once, back
        sleep = suspicion.comeback.sleeper(spec.kind, self.sleep) if suspicion else self.sleep
        while True:
            self.beat(name, self._max_gap(spec))
            started = self.clock()
            try:
                retry = await self._tick(spec, suspected)
            except Exception as exc:
                # Recorded, then the normal cadence: a step that keeps raising
                # costs one attempt per interval, never a hot loop.
                self._failed(name, exc)
                retry = False
            if retry:
                continue
            delay = spec.interval * (1 + self.rng.uniform(-spec.jitter, spec.jitter))
            wait = max(0.0, started + delay - self.clock())
            if self.suspicion is not None and kinds.is_idle_gated(spec.kind):
                suspected = await self.suspicion.pause(wait, sleep)
            else:
                await sleep(wait)

    async def _tick(self, spec: CanarySpec, suspected: bool = False) -> bool:
        """One cadence step; True asks for an immediate retry (a missed deadline).

        ``suspected``: a standstill in the samples cut the wait short
        (:mod:`sentinel.scheduling.suspicion`), so idle gating does not hold this one back.
        """
        ledger = self.ledger
        if not self.planner.plan.runs(spec.kind):
            self.metrics.canary_skipped("disabled")
            return False
        if kinds.is_path(spec.kind) and self.late.awaited(spec.kind):
            # The path's last canary is still awaited: it is the probe of the
            # path until it answers, and another would only queue behind it.
            self.metrics.canary_skipped("awaited")
            return False
        if self.hold is not None and self.hold.held(self.clock()):
            self.metrics.canary_skipped(self.hold.reason)  # any request would wake it
            return False
        targets = self._targets(spec, self.clock(), suspected)
        if not targets:
            self.metrics.canary_skipped("busy")
            return False
        if self.suspicion is not None and kinds.is_idle_gated(spec.kind):
            self.suspicion.take()  # the canary going out is the suspicion's answer
        model = await self.served_model.resolve(spec)
        if model is None:
            return False
        epoch = ledger.epoch
        text = self.planner.plan.fallback(kinds.CONTROL)
        if not kinds.is_paired(spec.kind) or self.control_spec is None:
            results = await self._send_each(self.route.spec(spec, text), model, epoch, targets)
        else:
            control = self.route.spec(replace(self.control_spec, priority=spec.priority), text)
            results = [await self._send_pair(spec, control, model, epoch, targets[0])]
        self.planner.after_step(spec, results, epoch)  # set aside, fall back
        return any(r.reason is Reason.TIMEOUT for r in results)

    async def _send_each(
        self, spec: CanarySpec, model: str, epoch: int, targets: tuple[int | None, ...]
    ) -> list[CanaryResult]:
        """One canary of ``spec`` to each target at once; every one ends (or is cancelled) here."""
        if len(targets) == 1:
            return [await self._send_recorded(spec, model, epoch, targets[0])]
        async with asyncio.TaskGroup() as group:
            sends = [
                group.create_task(self._send_recorded(spec, model, epoch, engine))
                for engine in targets
            ]
        return [send.result() for send in sends]

    async def _send_pair(
        self,
        spec: CanarySpec,
        control_spec: CanarySpec,
        model: str,
        epoch: int,
        engine: int | None,
    ) -> CanaryResult:
        """A path canary and its text control, together at the same priority and engine.

        The control is recorded as soon as it ends, the pair once both have.
        """
        token = self.sink.sent(spec.kind, self._budget(spec), engine)
        try:
            result, control = await asyncio.gather(
                self._run(spec, model, epoch, engine, token),
                self._send_recorded(control_spec, model, epoch, engine),
            )
        except BaseException:
            self.sink.abandoned(spec.kind, token)
            raise
        self.sink.record(Outcome(spec.kind, token, result, epoch, control=control))
        return result

    def _failed(self, loop: str, exc: Exception) -> None:
        """One cadence step raised: count it where the observers' failures show; never raises."""
        try:
            if self.on_error is not None:
                self.on_error(loop, exc)
            else:
                self.metrics.loop_failed(loop)
                log.error("loop_error", loop=loop, error=f"{type(exc).__name__}: {exc}")
        except Exception:  # a broken hook must not take the loop down with it
            log.exception("loop_error_unrecorded", loop=loop)

    def _targets(
        self, spec: CanarySpec, now: float, suspected: bool = False
    ) -> tuple[int | None, ...]:
        """Where this step's canaries go: one per engine named (None: unaimed); empty: none.

        An idle-gated kind goes to every engine real traffic has not recently
        proven alive, at once, so each gets the single-engine cadence whatever
        the engine count. Any other kind's canary (with its control) goes to
        one engine, the next in turn. Real traffic holds no idle-gated canary
        back while the lifecycle waits on one (:meth:`_lifecycle_waits`).
        """
        ledger = self.ledger
        gated = kinds.is_idle_gated(spec.kind) and not suspected
        # Real traffic vouches for the engines once startup passed, unless the lifecycle waits.
        vouch = self.planner.plan.startup_passed and not (
            gated and self._lifecycle_waits(spec.kind, now)
        )
        engines = self.aim.engines()
        if not engines:
            if gated and vouch and ledger.busy(now, self.idle_window):
                return ()
            return (None,)
        if not gated:
            engines = (self.aim.in_turn(spec.name, engines),)
        elif vouch:
            # Only where real traffic has not recently proven the engine alive.
            engines = tuple(e for e in engines if not self._proven(e, now))
        return self.aim.targets(engines)

    def _lifecycle_waits(self, kind: CanaryKind, now: float) -> bool:
        """Whether the lifecycle needs this kind's canary whatever the traffic: the phase
        is a paused refusal's word (only a canary sees the pause end), or the kind has not
        passed since the last resume (readiness waits on it)."""
        life = self.ledger.lifecycle
        resumed = life.current.resumed_at
        results = self.ledger.records[kind].results
        unproven = resumed is not None and not any(r.ok and r.started >= resumed for r in results)
        return life.refused(now) or unproven

    def _proven(self, engine: int, now: float) -> bool:
        """Whether the engine's own work vouched for it within the idle window.

        Its own work is what sentinel's canaries do not explain, and only its
        decode progress where it counts first tokens: an engine whose decode
        is stuck still prefills what arrives.
        """
        track = self.ledger.progress.engines.get(str(engine))
        moved = None if track is None else track.vouched_at
        return moved is not None and now - moved <= self.idle_window

    async def _send_recorded(
        self, spec: CanarySpec, model: str, epoch: int, engine: int | None = None
    ) -> CanaryResult:
        sent = self.clock()
        token = self.sink.sent(spec.kind, self._budget(spec), engine)
        try:
            ran = await unless_left(self.departure, self._run(spec, model, epoch, engine, token))
            result = ran if ran is not None else self._let_go(spec, sent, engine)
        except BaseException:
            # Cancelled mid-flight: forget the canary rather than leave it outstanding.
            self.sink.abandoned(spec.kind, token)
            raise
        if engine is not None and self.aim.refused(engine, result):
            self.sink.abandoned(spec.kind, token)
            return await self._send_recorded(spec, model, epoch)  # the same canary, unaimed
        self.sink.record(Outcome(spec.kind, token, result, epoch))
        return result

    def _let_go(self, spec: CanarySpec, sent: float, engine: int | None) -> CanaryResult:
        """A canary closed because the server stopped listening: what it met, a refusal."""
        duration = max(0.0, self.clock() - sent)
        return CanaryResult(
            spec.name, spec.kind, Reason.CONNECT, sent, duration, LET_GO, engine=engine
        )

    async def _run(
        self, spec: CanarySpec, model: str, epoch: int, engine: int | None, token: int
    ) -> CanaryResult:
        """One canary through the runner; past its deadline it may be awaited late."""
        return await self.runner.run(
            spec,
            model=model,
            deadline=spec.deadline,
            engine=engine,
            late_wait=self.late.late_wait,
            adopt_late=self.late.adopter(spec, token, epoch),
        )

    def _budget(self, spec: CanarySpec) -> dict[str, float]:
        """The most work one canary of ``spec`` can cause, per work counter.

        Progress discounts it while the canary is in flight, whatever else the
        server is doing: its whole ``max_tokens`` (a reply longer than the
        recent ones is still its own; what it did not cause is given back once
        its usage is known), and its prompt from recent successes of the same
        canary, before any a generous estimate.
        """
        listed = spec.request.get("prompt")
        requests = len(listed) if isinstance(listed, list) and listed else 1  # one per prompt
        max_tokens = float(spec.request.get("max_tokens") or DEFAULT_MAX_TOKENS) * requests
        mine = [r for r in self.ledger.records[spec.kind].results if r.ok and r.name == spec.name]
        prompts = [r.prompt_tokens for r in mine[-5:] if r.prompt_tokens]
        reply = max_tokens
        prompt = float(max(prompts)) if prompts else DEFAULT_PROMPT_ESTIMATE * requests
        # The multimodal canary's baseline (its prompt without the image, sent
        # once per server) is a side request of sentinel's too.
        side = 1 if spec.image is not None else 0
        return canary_budget(
            reply_tokens=reply, prompt_tokens=prompt, requests=requests, side_requests=side
        )
