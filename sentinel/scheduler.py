"""The scheduler owns time for canaries: cadence, jitter, deadlines, idle gating, pairing.

One loop per enabled canary spec, each with at most one canary in flight per
engine, so canaries never pile up. Text canaries are skipped while real traffic has
recently proven the engine alive (idle gating, once startup has passed).
Structured and multimodal canaries run on their own cadence, ungated, each
paired with a text control sent at the same moment and priority, so a path
hang can be told from an engine hang. A canary that missed its deadline is
retried at once instead of waiting a full interval.

Under data parallelism (more than one ``engine`` label in the progress
evidence) every canary is aimed at one engine (vLLM's
``X-data-parallel-rank``), since vLLM's balancer steers new requests away
from an engine whose requests never finish and an unaimed canary would never
reach a stuck one. Each text cadence step sends one canary to every engine
real traffic has not recently proven alive (an engine whose own work, beyond
sentinel's canaries, vouched for it within the idle window needs none), all
at once: each engine gets the single-engine cadence, the per-GPU load a
one-engine server already gets, and detection does not wait for a rotation
that grows with the engine count. A step ends when its last canary does, and
a missed deadline retries the step at once. Each path canary and its control
go together to the next engine in turn: a path is mostly code every engine
shares, its canaries are the heaviest (an image, a grammar), and an engine
that stops serving is the text canaries' to catch. An engine whose aimed
canary is refused as a bad request (a label that is not a rank the server
takes) gets unaimed canaries for the rest of the server epoch.

A late answer is an answer: with ``late_wait`` set, the first canary of a
kind that misses its deadline is still recorded (and retried) at once, but
awaited in the background too (:mod:`sentinel.late`).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import replace

from sentinel.canary.kinds import is_path
from sentinel.canary.result import CanaryKind, CanaryResult, Reason
from sentinel.canary.runner import CanaryRunner, ModelResolutionError
from sentinel.catalog import CanarySpec
from sentinel.late import LateAnswers
from sentinel.ledger import Ledger
from sentinel.progress import canary_budget
from sentinel.telemetry.logging import get_logger
from sentinel.telemetry.metrics import SentinelMetrics

log = get_logger("sentinel.scheduler")

ResultHook = Callable[[CanaryResult], None]
# Told the loop's name and the exception one cadence step raised (the daemon's
# loop-failure record: /status, sentinel_loop_errors_total, a sparse log line).
ErrorHook = Callable[[str, BaseException], None]

DEFAULT_MAX_TOKENS = 16
DEFAULT_PROMPT_ESTIMATE = 2048.0  # before a canary of the kind succeeded (images cost many)
# An ``engine`` label above this is no data-parallel rank a header should carry.
MAX_ENGINE_INDEX = 4096


class Scheduler:
    """Runs the canary loops against one target and records results in the ledger."""

    def __init__(
        self,
        specs: tuple[CanarySpec, ...],
        runner: CanaryRunner,
        ledger: Ledger,
        metrics: SentinelMetrics,
        *,
        idle_window: float,
        configured_model: str | None = None,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]],
        beat: Callable[[str, float], None],
        on_result: ResultHook | None = None,
        on_error: ErrorHook | None = None,
        rng: random.Random | None = None,
        late_wait: float = 0.0,
    ) -> None:
        self.specs = tuple(s for s in specs if s.enabled)
        self.runner = runner
        self.ledger = ledger
        self.metrics = metrics
        self.idle_window = idle_window
        self.configured_model = configured_model
        self.clock = clock
        self.sleep = sleep  # paired with the clock: a virtual clock brings its own sleep
        self.beat = beat
        self.on_result = on_result
        self.on_error = on_error
        self.rng = rng or random.Random()
        self._model_lock = asyncio.Lock()
        self._unresolved: Reason | None = None
        text = [s for s in self.specs if s.kind is CanaryKind.TEXT]
        self.control_spec = text[0] if text else None
        self._last_aim: dict[str, int] = {}  # per loop: the engine its last canary went to
        self._unaimable: set[int] = set()  # engines whose aimed canary was refused, this epoch
        self._aim_epoch = ledger.epoch
        self._aimed_at: tuple[int, ...] = ()  # the engines last announced in the log
        # Timed-out canaries still awaited, up to late_wait seconds past the send (0: none).
        self.late = LateAnswers(
            ledger, late_wait=late_wait, clock=clock, observe=self._observe, failed=self._failed
        )

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
        while True:
            self.beat(name, self._max_gap(spec))
            started = self.clock()
            try:
                retry = await self._tick(spec)
            except Exception as exc:
                # Recorded, then the normal cadence: a step that keeps raising
                # costs one attempt per interval, never a hot loop.
                self._failed(name, exc)
                retry = False
            if retry:
                continue
            delay = spec.interval * (1 + self.rng.uniform(-spec.jitter, spec.jitter))
            await self.sleep(max(0.0, started + delay - self.clock()))

    async def _tick(self, spec: CanarySpec) -> bool:
        """One cadence step; True asks for an immediate retry (a missed deadline)."""
        ledger = self.ledger
        record = ledger.records[spec.kind]
        if not record.enabled:
            self.metrics.canary_skipped("disabled")
            return False
        if is_path(spec.kind) and self.late.awaited(spec.kind):
            # The path's last canary is still awaited: it is the probe of the
            # path until it answers, and another would only queue behind it.
            self.metrics.canary_skipped("awaited")
            return False
        targets = self._targets(spec, self.clock())
        if not targets:
            self.metrics.canary_skipped("busy")
            return False
        model = await self._model(spec)
        if model is None:
            return False
        epoch = ledger.epoch
        if spec.kind is CanaryKind.TEXT or self.control_spec is None:
            results = await self._send_each(spec, model, epoch, targets)
        else:
            control = replace(self.control_spec, priority=spec.priority)
            results = [await self._send_pair(spec, control, model, epoch, targets[0])]
        unsupported = next((r for r in results if r.reason is Reason.UNSUPPORTED), None)
        if unsupported is not None and epoch == ledger.epoch:
            why = unsupported.detail
            ledger.disable(spec.kind, why or "the model does not take this input")
            log.warning("canary_kind_disabled", canary=spec.name, kind=spec.kind.value, why=why)
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
        ledger = self.ledger
        token = ledger.canary_sent(spec.kind, self.clock(), self._budget(spec), engine=engine)
        try:
            result, control = await asyncio.gather(
                self._run(spec, model, epoch, engine, token),
                self._send_recorded(control_spec, model, epoch, engine),
            )
        except BaseException:
            self._abandon(spec.kind, token)
            raise
        ledger.canary_done(spec.kind, token, result, self.clock(), control=control, epoch=epoch)
        self.late.recorded(spec.kind, token)
        self._observe(result)
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

    # -- aiming at data-parallel engines ----------------------------------------
    def engines(self) -> tuple[int, ...]:
        """The data-parallel engines canaries are aimed at; empty: do not aim.

        Aimed only when the progress evidence shows more than one ``engine``
        label and every label is a rank (a small non-negative integer): a
        server with one engine never gets the header.
        """
        if self.ledger.epoch != self._aim_epoch:
            self._aim_epoch = self.ledger.epoch
            self._unaimable.clear()
        labels = tuple(self.ledger.progress.engines)
        if len(labels) < 2 or not all(_rank(label) is not None for label in labels):
            engines: tuple[int, ...] = ()
        else:
            engines = tuple(sorted(int(label) for label in labels))
        if engines != self._aimed_at:
            self._aimed_at = engines
            log.info("canaries_aimed", engines=list(engines))
        return engines

    def _targets(self, spec: CanarySpec, now: float) -> tuple[int | None, ...]:
        """Where this step's canaries go: one per engine named (None: unaimed); empty: none.

        Text canaries go to every engine real traffic has not recently proven
        alive, at once, so each gets the single-engine cadence whatever the
        engine count. A path canary (with its control) goes to one engine, the
        next in turn.
        """
        ledger = self.ledger
        text = spec.kind is CanaryKind.TEXT
        engines = self.engines()
        if not engines:
            if text and ledger.startup_passed and ledger.busy(now, self.idle_window):
                return ()
            return (None,)
        if not text:
            last = self._last_aim.get(spec.name)
            later = [e for e in engines if last is None or e > last]
            engines = (later[0] if later else engines[0],)
            self._last_aim[spec.name] = engines[0]
        elif ledger.startup_passed:
            # The text canary only where real traffic has not recently proven the engine alive.
            engines = tuple(e for e in engines if not self._proven(e, now))
        # An engine that refused its rank gets an unaimed canary; one per step is enough.
        return tuple(dict.fromkeys(None if e in self._unaimable else e for e in engines))

    def _proven(self, engine: int, now: float) -> bool:
        """Whether the engine's own work vouched for it within the idle window.

        Its own work is what sentinel's canaries do not explain, and only its
        decode progress where it counts first tokens: an engine whose decode
        is stuck still prefills what arrives.
        """
        track = self.ledger.progress.engines.get(str(engine))
        moved = None if track is None else track.vouched_at
        return moved is not None and now - moved <= self.idle_window

    def _refused_aim(self, engine: int, result: CanaryResult) -> bool:
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

    async def _send_recorded(
        self, spec: CanarySpec, model: str, epoch: int, engine: int | None = None
    ) -> CanaryResult:
        ledger = self.ledger
        token = ledger.canary_sent(spec.kind, self.clock(), self._budget(spec), engine=engine)
        try:
            result = await self._run(spec, model, epoch, engine, token)
        except BaseException:
            # Cancelled mid-flight: forget the canary rather than leave it outstanding.
            self._abandon(spec.kind, token)
            raise
        if engine is not None and self._refused_aim(engine, result):
            ledger.canary_abandoned(spec.kind, token, self.clock())
            return await self._send_recorded(spec, model, epoch)  # the same canary, unaimed
        ledger.canary_done(spec.kind, token, result, self.clock(), epoch=epoch)
        self.late.recorded(spec.kind, token)
        self._observe(result)
        return result

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

    def _abandon(self, kind: CanaryKind, token: int) -> None:
        """A step ended without recording the canary: forget it, and stop awaiting it late."""
        self.ledger.canary_abandoned(kind, token, self.clock())
        self.late.abandon(kind, token)

    def _budget(self, spec: CanarySpec) -> dict[str, float]:
        """The most work one canary of ``spec`` can cause, per work counter.

        Progress discounts it while the canary is in flight, whatever else the
        server is doing. Taken from recent successes of the same canary (its
        reply length and prompt); before any, from ``max_tokens`` and a
        generous prompt estimate.
        """
        listed = spec.request.get("prompt")
        requests = len(listed) if isinstance(listed, list) and listed else 1  # one per prompt
        max_tokens = float(spec.request.get("max_tokens") or DEFAULT_MAX_TOKENS) * requests
        mine = [r for r in self.ledger.records[spec.kind].results if r.ok and r.name == spec.name]
        replies = [r.completion_tokens for r in mine[-5:] if r.completion_tokens]
        prompts = [r.prompt_tokens for r in mine[-5:] if r.prompt_tokens]
        reply = min(float(max(replies)), max_tokens) if replies else max_tokens
        prompt = float(max(prompts)) if prompts else DEFAULT_PROMPT_ESTIMATE * requests
        return canary_budget(reply_tokens=reply, prompt_tokens=prompt, requests=requests)

    def _observe(self, result: CanaryResult) -> None:
        # Only a refusal says nothing listens; any other outcome (a reset,
        # a timeout, an answer) reached a listener.
        if result.reason is Reason.CONNECT:
            self.ledger.saw_refusal(self.clock())
        else:
            self.ledger.saw_answer()
        self.metrics.observe_canary(result)
        if self.on_result is not None:
            self.on_result(result)

    async def _model(self, spec: CanarySpec) -> str | None:
        """The model to address: configured, given in the spec, or asked of the server."""
        if "model" in spec.request:
            return str(spec.request["model"])
        if self.configured_model:
            return self.configured_model
        async with self._model_lock:
            if self.ledger.model is not None:
                return self.ledger.model
            try:
                model = await self.runner.resolve_model(deadline=spec.deadline)
            except ModelResolutionError as exc:
                if exc.reason is Reason.CONNECT:
                    self.ledger.saw_refusal(self.clock())
                if exc.reason is not self._unresolved:  # once per cause, not every tick
                    self._unresolved = exc.reason
                    log.info("model_unresolved", reason=exc.reason.value, detail=exc.detail)
                return None
            self._unresolved = None
            self.ledger.saw_answer()
            self.ledger.model = model
            log.info("model_resolved", model=model)
            return model


def _rank(label: str) -> int | None:
    """An ``engine`` label as a data-parallel rank, or None when it is none."""
    if not label.isascii() or not label.isdigit() or len(label) > 5:
        return None
    rank = int(label)
    return rank if rank <= MAX_ENGINE_INDEX else None
