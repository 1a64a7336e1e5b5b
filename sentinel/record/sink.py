"""The result sink: where every canary result is recorded, once, in one fixed order.

The scheduler runs canaries; it records nothing itself. Each result becomes
one :class:`Outcome` (a late answer is a second outcome of the same canary,
``late``) handed to :meth:`ResultSink.record`, which, in this order:

1. closes the canary's credit in the ledger (its history and its progress
   credit: :meth:`~sentinel.record.ledger.Ledger.canary_done`, or
   :meth:`~sentinel.record.ledger.Ledger.canary_late` for a late answer);
2. closes the late wait (the hook the scheduler's late answers register,
   :class:`Waits`): a timed-out canary's late answer may replace it now, or
   a late answer's slot is free;
3. notes reachability: only a refusal says nothing listens, any other
   outcome (a reset, a timeout, an answer) reached a listener;
4. counts it in the metrics;
5. tells the listener (the daemon's, which wakes a judgement).

The same object is the scheduler's only other door into the ledger: a
canary leaving (:meth:`ResultSink.sent`), one forgotten without a result
(:meth:`ResultSink.abandoned`), and the served-model question's outcome
(:meth:`ResultSink.model_asked`). cloudprober's ``startForTarget`` is the
model: a result becomes one object, recorded and sent down one channel.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.record.ledger import Ledger
from sentinel.telemetry.metrics import SentinelMetrics

__all__ = ["Listener", "Outcome", "ResultSink", "Waits"]

Listener = Callable[[CanaryResult], None]


@dataclass(frozen=True, slots=True)
class Outcome:
    """One canary's result as it is recorded."""

    kind: CanaryKind
    token: int  # the ledger's token, from :meth:`ResultSink.sent`
    result: CanaryResult
    epoch: int  # the server epoch it was sent in (a result of an ended one is not history)
    control: CanaryResult | None = None  # a path canary's control, sent beside it
    late: bool = False  # the late answer of a canary recorded at its deadline


class Waits(Protocol):
    """The late waits' side of recording (:class:`sentinel.scheduling.late.LateAnswers`)."""

    def closed(self, outcome: Outcome) -> None: ...
    def abandon(self, kind: CanaryKind, token: int) -> None: ...


class ResultSink:
    """Records canaries into one ledger; the scheduler's only writer there."""

    def __init__(
        self,
        ledger: Ledger,
        metrics: SentinelMetrics,
        *,
        clock: Callable[[], float],
        listener: Listener | None = None,
    ) -> None:
        self.ledger = ledger
        self.metrics = metrics
        self.clock = clock
        self.listener = listener
        self.waits: Waits | None = None  # registered by the late answers (follow_waits)

    def follow_waits(self, waits: Waits) -> None:
        """Register the late waits, closed with every outcome (step 2)."""
        self.waits = waits

    def sent(self, kind: CanaryKind, budget: Mapping[str, float] | None, engine: int | None) -> int:
        """A canary leaving now; its token (``budget``: the most work it can cause)."""
        return self.ledger.canary_sent(kind, self.clock(), budget, engine=engine)

    def abandoned(self, kind: CanaryKind, token: int) -> None:
        """A canary forgotten without a result (cancelled, or resent unaimed): no late wait."""
        self.ledger.canary_abandoned(kind, token, self.clock())
        if self.waits is not None:
            self.waits.abandon(kind, token)

    def model_asked(self, model: str | None, failure: Reason | None = None) -> None:
        """The served-model question's outcome (:mod:`sentinel.scheduling.served_model`).

        Evidence like a canary's: a refused connection starts the listener-down
        timer; an answer clears it, and the model it names is kept for the epoch.
        """
        if model is None:
            if failure is Reason.CONNECT:
                self.ledger.saw_refusal(self.clock())
            return
        self.ledger.saw_answer()
        self.ledger.model = model

    def record(self, outcome: Outcome) -> None:
        """Record one result: credit, late wait, reachability, metrics, listener."""
        ledger, result = self.ledger, outcome.result
        if outcome.late:
            ledger.canary_late(
                outcome.kind, outcome.token, result, self.clock(), epoch=outcome.epoch
            )
        else:
            ledger.canary_done(
                outcome.kind,
                outcome.token,
                result,
                self.clock(),
                control=outcome.control,
                epoch=outcome.epoch,
            )
        if self.waits is not None:
            self.waits.closed(outcome)
        if result.reason is Reason.CONNECT:
            ledger.saw_refusal(self.clock())
        else:
            ledger.saw_answer()
        self.metrics.observe_canary(result)
        if self.listener is not None:
            self.listener(result)
