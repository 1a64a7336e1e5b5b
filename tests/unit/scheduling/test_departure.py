"""A server that stops listening is let go: sentinel's requests in flight then end at once.

uvicorn stops listening when told to stop, then waits for every open request
before it exits; a canary left open on a hung engine held a real vLLM's
shutdown for its whole 10 s grace in every engine-hang run. On a virtual
clock: a canary on a hung server, the first refused connection, and the
canary closed then and recorded as the refusal it met, never as a timeout.
"""

from __future__ import annotations

import asyncio

from sentinel.canary.result import Reason
from sentinel.canary.spec import CanaryKind
from sentinel.scheduling.departure import LET_GO, Departure, unless_left
from tests.unit.scheduling.test_scheduler import T0, FakeVllm, _specs, scheduling

TEXT = CanaryKind("text")
HUNG = _specs(text={"interval": 5.0, "jitter": 0.0, "deadline": 8.0})


def hung(clock: object) -> FakeVllm:
    return FakeVllm(clock, latency=1000.0)  # type: ignore[arg-type]


async def test_a_canary_in_flight_is_let_go_when_the_server_stops_listening() -> None:
    departure = Departure()
    async with scheduling(HUNG, server=hung, departure=departure) as h:
        await h.clock.run_until(T0 + 3)
        assert h.results == []  # in flight on the hung engine
        h.ledger.saw_refusal(h.clock())  # a scrape met the closed listener
        await h.clock.run_until(T0 + 3)  # no virtual time passes: the loop settles
        first = h.results[0]
    assert first.reason is Reason.CONNECT
    assert first.detail == LET_GO
    assert first.started == T0
    assert first.duration == 3.0
    assert departure.count == 1


async def test_without_a_refusal_the_canary_runs_to_its_deadline() -> None:
    async with scheduling(HUNG, server=hung, departure=Departure()) as h:
        await h.clock.run_until(T0 + 3)
        assert h.results == []
        h.ledger.saw_answer()  # an answer lets nothing go
        await h.clock.run_until(T0 + 3)
        assert h.results == []


async def test_only_what_was_in_flight_at_the_departure_is_let_go() -> None:
    departure = Departure()
    departure.left()  # nobody waited: nothing to let go, and no later request is touched

    async def answer() -> str:
        await asyncio.sleep(0)
        return "served"

    assert await unless_left(departure, answer()) == "served"
    assert await unless_left(None, answer()) == "served"

    stopped = asyncio.Event()

    async def forever() -> str:
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()  # cancelled: its connection would close here
        return "never"

    pending = asyncio.ensure_future(unless_left(departure, forever()))
    await asyncio.sleep(0)
    departure.left()
    assert await pending is None
    assert stopped.is_set()
    assert departure.count == 2
