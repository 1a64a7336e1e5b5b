"""Late answers, the scheduler's side: the canaries still awaited past their deadline.

A late answer is an answer. A canary that missed its deadline is recorded as
a TIMEOUT at once (and its step retried at once), but with ``late_wait`` set
the first such canary of a kind is left running, ``awaiting_late``, and
awaited in the background for up to ``late_wait`` seconds past its send (the
runner's side is :mod:`sentinel.canary.late`). Any other canary of that kind
that misses its deadline meanwhile is closed at its deadline, as always.

The background waits are tasks of the scheduler's task group
(:attr:`LateAnswers.group`, set while :meth:`Scheduler.run
<sentinel.scheduling.scheduler.Scheduler.run>` runs): leaving it cancels them, which
closes their connections; nothing outlives the run and nothing raises out of
it. When a wait ends, its result goes the way of every result, as an
outcome flagged ``late``: into the result sink (:class:`~sentinel.record.sink.ResultSink`:
the ledger replaces the timed-out entry and closes the canary's progress
credit, open until then; then this side's :meth:`LateAnswers.closed`, the
metrics and the listener).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Container
from dataclasses import dataclass, field

from sentinel.canary.late import Adopter, LateCanary
from sentinel.canary.spec import CanaryKind, CanarySpec
from sentinel.record.sink import Outcome, ResultSink
from sentinel.scheduling.departure import Departure, unless_left
from sentinel.telemetry.logging import get_logger

__all__ = ["LateAnswers"]

log = get_logger("sentinel.late")


@dataclass(slots=True)
class _Wait:
    """The one late canary of a kind being awaited."""

    token: int  # the ledger's token of the canary
    deadline: float  # its spec's (how late the answer came is said from it)
    task: asyncio.Task[None] | None = None  # its follower, in the group
    # Set once the timed-out result is in the ledger (a path canary is recorded
    # with its control, maybe after its late answer came): the late result waits for it.
    recorded: asyncio.Event = field(default_factory=asyncio.Event)


class LateAnswers:
    """The canaries a scheduler still awaits past their deadline: at most one per kind."""

    def __init__(
        self,
        sink: ResultSink,
        *,
        late_wait: float,
        outstanding: Callable[[CanaryKind], Container[int]],
        failed: Callable[[str, Exception], None],
        departure: Departure | None = None,
    ) -> None:
        self.sink = sink  # every result's way in; it closes our waits (closed, abandon)
        self.departure = departure  # the server stopped listening: stop awaiting late
        sink.follow_waits(self)
        self.late_wait = late_wait  # seconds past the send (0: never await late)
        self.outstanding = outstanding  # a kind's canaries still in their step (tokens)
        self.failed = failed  # a follower's own failure, recorded like a loop's
        self.group: asyncio.TaskGroup | None = None  # the owner's, while it runs
        self._waits: dict[CanaryKind, _Wait] = {}
        self._adopted: list[LateCanary] = []  # whose exchanges may still run

    def awaited(self, kind: CanaryKind) -> bool:
        """Whether a canary of ``kind`` is being awaited late right now."""
        return kind in self._waits

    def adopter(self, spec: CanarySpec, token: int, epoch: int) -> Adopter | None:
        """What to offer ``spec``'s canary to at its deadline (None: no late waits at all)."""
        if self.late_wait <= 0:
            return None

        def adopt(late: LateCanary) -> bool:
            return self._adopt(spec, token, epoch, late)

        return adopt

    async def close(self) -> None:
        """Stop every late exchange still running and wait until it ended (the run's exit)."""
        adopted, self._adopted = self._adopted, []
        for late in adopted:
            await late.close()

    def closed(self, outcome: Outcome) -> None:
        """An outcome is in the ledger (the sink's step 2).

        A canary's timed-out result: its late result may replace it now. A
        late answer: its kind's slot is free before anyone hears of it.
        """
        kind, wait = outcome.kind, self._waits.get(outcome.kind)
        if wait is None or wait.token != outcome.token:
            return
        if not outcome.late:
            wait.recorded.set()
            return
        del self._waits[kind]
        result = outcome.result
        log.info(
            "canary_late_answer",
            canary=result.name,
            kind=kind.value,
            reason=result.reason.value,
            seconds_past_deadline=round(result.duration - wait.deadline, 3),
            engine=result.engine,
        )

    def abandon(self, kind: CanaryKind, token: int) -> None:
        """The canary's step ended without recording it: stop awaiting it (if it was)."""
        wait = self._waits.get(kind)
        if wait is not None and wait.token == token and wait.task is not None:
            wait.task.cancel()

    def _adopt(self, spec: CanarySpec, token: int, epoch: int, late: LateCanary) -> bool:
        """Await ``late`` in the background unless its kind already has one (or we are ending)."""
        group = self.group
        if group is None or spec.kind in self._waits:
            return False
        if token not in self.outstanding(spec.kind):
            return False  # its step already ended without it (abandoned)
        wait = _Wait(token, spec.deadline)
        follow = self._follow(spec, epoch, late, wait)
        try:
            wait.task = group.create_task(follow, name=f"canary-late:{spec.name}")
        except RuntimeError:  # the group is shutting down
            follow.close()
            return False
        wait.task.add_done_callback(functools.partial(self._ended, spec.kind, wait, late))
        self._waits[spec.kind] = wait
        self._adopted = [a for a in self._adopted if not a.done()]
        self._adopted.append(late)
        return True

    def _ended(
        self, kind: CanaryKind, wait: _Wait, late: LateCanary, _: asyncio.Task[None]
    ) -> None:
        """However the follower ended, even cancelled before it ran: leave nothing behind.

        Frees the kind's slot, closes the canary's credit and stops its
        exchange; the last two do nothing once its late result was delivered.
        """
        if self._waits.get(kind) is wait:
            del self._waits[kind]
        self.sink.abandoned(kind, wait.token)
        late.cancel()

    async def _follow(self, spec: CanarySpec, epoch: int, late: LateCanary, wait: _Wait) -> None:
        """Await a late canary's answer and deliver it like any result; never raises.

        Cancelled (the run ends), the connection is closed and the canary is
        forgotten like any cancelled one (:meth:`_ended`): nothing is delivered.
        """
        name = f"canary-late:{spec.name}"
        try:  # the cleanup, however it ends, is _ended's
            result = await unless_left(self.departure, late.answer())
            if result is None:
                return  # the server is going away: its shutdown must not wait on us
            await wait.recorded.wait()
        except Exception as exc:
            self.failed(name, exc)
            return
        try:  # its metrics: sentinel_canary_late_answers_total
            self.sink.record(Outcome(spec.kind, wait.token, result, epoch, late=True))
        except Exception as exc:  # a broken hook must not take the task group down
            self.failed(name, exc)
