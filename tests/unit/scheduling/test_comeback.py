"""A server's comeback on a virtual clock: every kind at once, the moment its port answers.

The server answers, goes away (the epoch ends, as :meth:`Ledger.end_if_gone`
ends it), and comes back between two cadence ticks: both kinds go out at the
sample that saw it back, not at their next tick. A server that answers
``/metrics`` but refuses every canary gets one comeback round, then the
cadence (no hot loop). The scheduler's harness is
:mod:`tests.unit.scheduling.test_scheduler`'s (virtual clock, ``httpx.MockTransport``).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import httpx

from sentinel.evidence.metrics import MetricsSample
from sentinel.scheduling.comeback import COMEBACK_SCRAPE_S
from tests.unit.scheduling.test_scheduler import (
    T0,
    FakeVllm,
    Harness,
    Sent,
    VirtualClock,
    _kind_of,
    _specs,
    scheduling,
)

SPECS = _specs(
    text={"interval": 5.0, "jitter": 0.0},
    structured={"interval": 10.0, "jitter": 0.0},
)


@dataclass
class Restarting(FakeVllm):
    """Refuses connections while ``down``; answers 503 to canaries while ``unserving``."""

    down: bool = False
    unserving: bool = False

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        if self.unserving:
            self.sent.append(Sent(self.clock(), _kind_of(json.loads(request.content)), None))
            return httpx.Response(503, json={"error": {"message": "loading", "code": 503}})
        return await super().handle(request)


def restarting(clock: VirtualClock) -> Restarting:
    return Restarting(clock)


async def _away_and_back(h: Harness, server: Restarting, back_at: float) -> None:
    """Up and started at T0, gone at T0+3 (a new epoch at T0+4), back at ``back_at``."""
    await h.clock.run_until(T0 + 1)
    h.ledger.startup_judged(True)  # the evaluator's word: every kind passed
    server.down = True
    await h.clock.run_until(T0 + 4)
    h.ledger.new_epoch("server went away", h.clock())
    await h.clock.run_until(back_at)
    server.down = False
    assert h.suspicion is not None
    h.suspicion.observe(MetricsSample(h.clock(), counters={}, gauges={}))


async def test_the_server_back_gets_every_kind_at_once() -> None:
    async with scheduling(SPECS, server=restarting, suspicion=True) as h:
        server = h.server
        assert isinstance(server, Restarting)
        assert h.suspicion is not None
        await _away_and_back(h, server, T0 + 17.3)
        await h.clock.run_until(T0 + 19.9)
        comeback = h.suspicion.comeback
    back = [round(t, 1) for t in h.times("text") if t > 16]
    # The text canary and the structured pair's control, both at 17.3 (not 20.0).
    assert back == [17.3, 17.3]
    assert [round(t, 1) for t in h.times("structured") if t > 16] == [17.3]
    assert comeback.rounds == 1  # the server back (epoch 1); epoch 0 saw no sample


async def test_no_comeback_without_a_new_server_or_after_startup() -> None:
    async with scheduling(SPECS, server=restarting, suspicion=True) as h:
        assert h.suspicion is not None
        await h.clock.run_until(T0 + 1)
        h.ledger.startup_judged(True)
        await h.clock.run_until(T0 + 7.2)
        h.suspicion.observe(MetricsSample(h.clock(), counters={}, gauges={}))
        await h.clock.run_until(T0 + 9.9)
        rounds = h.suspicion.comeback.rounds
    assert [round(t, 1) for t in h.times("text")] == [0.0, 0.0, 5.0]  # the cadence only
    assert rounds == 0


async def test_a_server_that_answers_but_never_serves_gets_one_round_then_the_cadence() -> None:
    async with scheduling(SPECS, server=restarting, suspicion=True) as h:
        server = h.server
        assert isinstance(server, Restarting)
        assert h.suspicion is not None
        server.unserving = True
        await _away_and_back(h, server, T0 + 17.3)
        for at in (17.8, 18.3, 18.8, 23.0):  # more samples of the same epoch raise nothing
            await h.clock.run_until(T0 + at)
            h.suspicion.observe(MetricsSample(h.clock(), counters={}, gauges={}))
        await h.clock.run_until(T0 + 29.9)
    back = [round(t, 1) for t in h.times("text") if t > 16]
    assert back == [17.3, 17.3, 22.3, 27.3, 27.3]  # one round, then each loop's own cadence
    assert [round(t, 1) for t in h.times("structured") if t > 16] == [17.3, 27.3]


async def test_scrapes_come_sooner_while_the_server_refuses_before_startup() -> None:
    async with scheduling(SPECS, server=restarting, suspicion=True) as h:
        server = h.server
        assert isinstance(server, Restarting)
        assert h.suspicion is not None
        await h.clock.run_until(T0 + 1)
        assert h.suspicion.scrape_interval(2.0) == 2.0  # answering
        h.ledger.startup_judged(True)
        server.down = True
        await h.clock.run_until(T0 + 5.5)
        assert h.ledger.refused_since is not None
        assert h.suspicion.scrape_interval(2.0) == 2.0  # refused, but this server started
        h.ledger.new_epoch("server went away", h.clock())
        assert h.suspicion.scrape_interval(2.0) == COMEBACK_SCRAPE_S


async def test_a_comebacks_results_wake_the_verdict_until_every_kind_passed() -> None:
    async with scheduling(SPECS, server=restarting, suspicion=True) as h:
        server = h.server
        assert isinstance(server, Restarting)
        assert h.suspicion is not None
        comeback = h.suspicion.comeback
        slept: list[float] = []

        async def sleep(seconds: float) -> None:
            slept.append(seconds)
            await h.clock.sleep(seconds)

        judge = asyncio.ensure_future(comeback.judge_sleeper(sleep)(30.0))
        await h.clock.run_until(T0 + 1)
        comeback.judge_soon()  # no comeback raised yet: the verdict's own cadence
        await h.clock.run_until(T0 + 2)
        assert not judge.done()
        await _away_and_back(h, server, T0 + 17.3)
        await h.clock.run_until(T0 + 17.5)  # both kinds passed on the server back
        comeback.judge_soon()  # the result that proved the last kind: one wake
        await h.clock.run_until(T0 + 17.5)  # lets the loop settle; no virtual time passes
        assert judge.done()
        again = asyncio.ensure_future(comeback.judge_sleeper(sleep)(30.0))
        comeback.judge_soon()  # every kind passed in this epoch: no more wakes
        await h.clock.run_until(T0 + 20)
        assert not again.done()
        again.cancel()
