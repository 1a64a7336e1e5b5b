"""Elastic EP's scaling gate, read from every path it gates, and when to ask its status route.

vLLM's ``ScalingMiddleware`` answers 503 on the paths it gates while a scale
runs ("The model is currently scaling") or after this rank was retired ("This
data-parallel rank has been retired"): in 0.32 every path, in 0.33+ every
path but ``/health`` and ``POST /is_scaling_elastic_ep``. So a canary's
refusal and a ``/metrics`` 503 with that body are the gate's word (a lifecycle
source: :mod:`sentinel.record.lifecycle`), and an answer from past the
middleware says it is open. The status route (:mod:`sentinel.evidence.elastic_ep`)
is asked only while the gate (or ``/health``'s scaling 503) says a scale, and
while its own last answer said one ran: never on an idle healthy server. On a
retired rank it is asked until it says the scale ended: vLLM marks a rank
retired before its commit returns, and only the route tells a commit still
running (a scale, bounded) from a rank retired for good.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Protocol

from sentinel.canary.refusal import Refusal, refusal_of
from sentinel.canary.result import CanaryResult
from sentinel.evidence.elastic_ep import RUNNING, ElasticEpPoller
from sentinel.record.lifecycle import LifecycleTracker


class Ledger(Protocol):
    """What of the ledger the gate needs (the ledger tells this module each canary)."""

    lifecycle: LifecycleTracker
    epoch: int

    def observe_lifecycle(self, now: float, **readings: object) -> None: ...


GATED = (Refusal.SCALING, Refusal.RETIRED)
# A gate word: (whether the source said anything, the gate it says: None is open).
Word = tuple[bool, Refusal | None]


def gate_of_canary(result: CanaryResult) -> Word:
    """A canary's word on the gate: a scaling or retired refusal, or open if it got past it.

    A canary with no answer at all (a timeout, a refused connection) says nothing.
    """
    if result.refusal in GATED:
        return True, result.refusal
    if result.ok or result.http_status is not None or result.refusal is not None:
        return True, None
    return False, None


def gate_of_scrape(status: int | None, body: str) -> Word:
    """``/metrics``' word: 200 is open, a 503 with the middleware's body the gate."""
    if status is None:
        return False, None
    if 200 <= status < 300:
        return True, None
    refusal = refusal_of(status, _message(body))
    if refusal in GATED:
        return True, refusal
    return False, None


def _message(body: str) -> str:
    """The middleware's ``{"error": "..."}`` message (or the other shape's), or the body."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):  # hostile: nested past the recursion limit
        return body
    inner = value.get("error") if isinstance(value, dict) else None
    if isinstance(inner, dict):
        inner = inner.get("message")
    return inner if isinstance(inner, str) else body


def observe_gate(ledger: Ledger, word: Word, started: float, now: float) -> None:
    """One source's word on the gate into the lifecycle.

    An "open" from a request sent before the gate was last seen up is stale: a
    scale drains the requests already in (they finish with 200 while it runs).
    Opening also forgets the status route's last answer (the next scale asks again).
    """
    said, gate = word
    readings = ledger.lifecycle.readings
    if not said or (gate is None and readings.gate is None):
        return
    if gate is None:
        if readings.gate_at is not None and started < readings.gate_at:
            return
        ledger.observe_lifecycle(now, gate=None, gate_at=None, scale=None, scale_problem="")
        return
    ledger.observe_lifecycle(now, gate=gate, gate_at=now)


def wants_status(ledger: Ledger) -> bool:
    """Whether the status route can matter now: a scale is seen, or a retired rank whose
    scale the route has not said ended (once it has, asking would tell nothing new)."""
    readings = ledger.lifecycle.readings
    scale = readings.scale
    running = scale is not None and (scale.scaling or scale.phase in RUNNING)
    return bool(
        readings.gate is Refusal.SCALING
        or readings.scaling
        or running
        or (readings.gate is Refusal.RETIRED and scale is None)
    )


def status_step(
    ledger: Ledger, poller: ElasticEpPoller, clock: Callable[[], float]
) -> Callable[[], Awaitable[None]]:
    """The observer step: ``POST /is_scaling_elastic_ep`` while :func:`wants_status`."""
    epoch = ledger.epoch

    async def step() -> None:
        nonlocal epoch
        if ledger.epoch != epoch:
            epoch = ledger.epoch
            poller.forget()
        if not wants_status(ledger):
            return
        poll = await poller.poll()
        if ledger.epoch != epoch:  # the server changed under the poll: its word is stale
            return
        if poll.status is not None:
            ledger.observe_lifecycle(clock(), scale=poll.status, scale_problem="")
        elif poll.problem:
            ledger.observe_lifecycle(clock(), scale_problem=poll.problem)

    return step
