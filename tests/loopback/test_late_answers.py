"""A late answer is an answer, on real sockets: which connections stay open, which close.

An aiohttp server on 127.0.0.1:0 holds each canary until the test releases
it and records whether the client went away while it was held (vLLM aborts a
request on exactly that). The runner is driven directly, with the test as
the late canary's adopter (a task group of its own), and through the
scheduler, whose task group owns the late waits. Every wait is for an event,
bounded by a deadline.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from sentinel.canary.catalog import load_catalog
from sentinel.canary.late import LateCanary
from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.runner import CanaryRunner
from sentinel.canary.spec import CanaryKind
from sentinel.record.ledger import Ledger
from sentinel.record.planner import Planner
from sentinel.record.sink import ResultSink
from sentinel.scheduling.scheduler import Scheduler
from sentinel.telemetry.metrics import SentinelMetrics
from sentinel.verdict import Action

TEXT = replace(load_catalog().get("text"), deadline=0.2, stream=False)
TEXT_KIND = CanaryKind("text")
LATE_WAIT = 30.0
WITHIN = 5.0


@dataclass
class Held:
    """One canary the server received and holds until ``release``."""

    stream: bool
    release: asyncio.Event = field(default_factory=asyncio.Event)
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class HoldingServer:
    url: str
    requests: list[Held]
    arrived: asyncio.Event
    hold: list[bool]  # per request in arrival order; past its end: answer at once

    async def wait_requests(self, count: int) -> None:
        async with asyncio.timeout(WITHIN):
            while len(self.requests) < count:
                self.arrived.clear()
                await self.arrived.wait()


def _chunk(data: Any) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


@pytest.fixture
async def server() -> AsyncIterator[HoldingServer]:
    requests: list[Held] = []
    arrived = asyncio.Event()
    state = HoldingServer("", requests, arrived, [])

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        held = Held(bool(body.get("stream")))
        index = len(requests)
        requests.append(held)
        arrived.set()
        usage = {"prompt_tokens": 10, "completion_tokens": 2}
        holding = index < len(state.hold) and state.hold[index]
        try:
            if held.stream:
                response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await response.prepare(request)  # headers now, the first token when released
                if holding:
                    await held.release.wait()
                await response.write(_chunk({"choices": [{"delta": {"content": "ok"}}]}))
                await response.write(_chunk({"choices": [], "usage": usage}))
                await response.write(b"data: [DONE]\n\n")
                return response
            if holding:
                await held.release.wait()
        except asyncio.CancelledError:
            held.disconnected.set()
            raise
        message = {"role": "assistant", "content": "ok"}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        return web.json_response({"choices": [choice], "usage": usage})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    state.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield state
    finally:
        for held in requests:
            held.release.set()
        await runner.cleanup()


async def signalled(event: asyncio.Event) -> bool:
    """Whether ``event`` is set within WITHIN seconds (False: it never was)."""
    try:
        async with asyncio.timeout(WITHIN):
            await event.wait()
    except TimeoutError:
        return False
    return True


class Adopter:
    """The test as a late canary's owner: awaits its answer in a task of its own group."""

    def __init__(self, group: asyncio.TaskGroup, *, accept: bool = True) -> None:
        self.group = group
        self.accept = accept
        self.adopted: list[LateCanary] = []
        self.tasks: list[asyncio.Task[CanaryResult]] = []
        self.awaiting = asyncio.Event()  # a task is in answer() (it began)

    def __call__(self, late: LateCanary) -> bool:
        if self.accept:
            self.adopted.append(late)
            self.tasks.append(self.group.create_task(self._answer(late)))
        return self.accept

    async def _answer(self, late: LateCanary) -> CanaryResult:
        self.awaiting.set()
        return await late.answer()


# -- the runner, adopted by the test --------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_an_adopted_canary_stays_connected_and_its_late_answer_counts(
    server: HoldingServer, stream: bool
) -> None:
    server.hold = [True]
    async with httpx.AsyncClient() as client, asyncio.TaskGroup() as group:
        runner = CanaryRunner(client, server.url)
        adopter = Adopter(group)
        started = time.monotonic()
        spec = replace(TEXT, stream=stream)
        timed_out = await runner.run(
            spec, model="m", deadline=0.2, late_wait=LATE_WAIT, adopt_late=adopter
        )
        assert time.monotonic() - started < LATE_WAIT / 2, "the deadline result comes at once"
        assert (timed_out.reason, timed_out.awaiting_late) == (Reason.TIMEOUT, True)
        assert timed_out.ttft is None
        held = server.requests[0]
        assert not held.disconnected.is_set()

        held.release.set()
        late = await adopter.tasks[0]
        assert (late.reason, late.late, late.awaiting_late) == (Reason.OK, True, False)
        assert (late.started, late.name) == (timed_out.started, timed_out.name)
        assert late.duration >= 0.2
        if stream:  # the first token came late: it still sets ttft
            assert late.ttft is not None
            assert late.ttft >= 0.2
            assert late.tokens_received == 1
        assert not held.disconnected.is_set()


async def test_a_declined_canary_is_closed_at_its_deadline(server: HoldingServer) -> None:
    server.hold = [True]
    async with httpx.AsyncClient() as client, asyncio.TaskGroup() as group:
        runner = CanaryRunner(client, server.url)
        declined = Adopter(group, accept=False)
        result = await runner.run(
            TEXT, model="m", deadline=0.2, late_wait=LATE_WAIT, adopt_late=declined
        )
        assert (result.reason, result.awaiting_late, result.late) == (Reason.TIMEOUT, False, False)
        assert await signalled(server.requests[0].disconnected)


async def test_the_late_wait_bound_ends_the_wait_and_closes_the_connection(
    server: HoldingServer,
) -> None:
    server.hold = [True]
    async with httpx.AsyncClient() as client, asyncio.TaskGroup() as group:
        runner = CanaryRunner(client, server.url)
        adopter = Adopter(group)
        await runner.run(TEXT, model="m", deadline=0.2, late_wait=0.5, adopt_late=adopter)
        final = await adopter.tasks[0]
        assert (final.reason, final.late, final.awaiting_late) == (Reason.TIMEOUT, True, False)
        assert final.duration >= 0.5
        assert "late_wait" in final.detail
        assert await signalled(server.requests[0].disconnected)


async def test_cancelling_the_late_wait_closes_the_connection(server: HoldingServer) -> None:
    server.hold = [True]
    async with httpx.AsyncClient() as client, asyncio.TaskGroup() as group:
        runner = CanaryRunner(client, server.url)
        adopter = Adopter(group)
        await runner.run(TEXT, model="m", deadline=0.2, late_wait=LATE_WAIT, adopt_late=adopter)
        assert await signalled(adopter.awaiting)
        adopter.tasks[0].cancel()
        with pytest.raises(asyncio.CancelledError):
            await adopter.tasks[0]
        assert await signalled(server.requests[0].disconnected)
        assert adopter.adopted[0].done()


async def test_closing_a_late_canary_nobody_awaited_closes_the_connection(
    server: HoldingServer,
) -> None:
    server.hold = [True]
    async with httpx.AsyncClient() as client, asyncio.TaskGroup() as group:
        runner = CanaryRunner(client, server.url)
        adopter = Adopter(group)
        await runner.run(TEXT, model="m", deadline=0.2, late_wait=LATE_WAIT, adopt_late=adopter)
        adopter.tasks[0].cancel()  # before it ever ran: answer() never began
        await adopter.adopted[0].close()
        assert await signalled(server.requests[0].disconnected)


async def test_cancelling_the_caller_before_the_deadline_closes_the_connection(
    server: HoldingServer,
) -> None:
    server.hold = [True]
    async with httpx.AsyncClient() as client, asyncio.TaskGroup() as group:
        runner = CanaryRunner(client, server.url)
        adopter = Adopter(group)
        call = asyncio.create_task(
            runner.run(TEXT, model="m", deadline=10, late_wait=LATE_WAIT, adopt_late=adopter)
        )
        await server.wait_requests(1)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert await signalled(server.requests[0].disconnected)
        assert adopter.tasks == []


# -- through the scheduler ----------------------------------------------------------------


async def never_elapses(delay: float) -> None:
    await asyncio.Event().wait()


async def test_the_scheduler_keeps_one_late_canary_per_kind_and_closes_it_at_shutdown(
    server: HoldingServer,
) -> None:
    # The first two canaries hang; the third (the second retry) answers.
    server.hold = [True, True]
    ledger = Ledger([(TEXT_KIND, Action.RESTART, None)], time.monotonic())
    results: list[CanaryResult] = []
    third_recorded = asyncio.Event()

    def record(result: CanaryResult) -> None:
        results.append(result)
        if len(results) >= 3:
            third_recorded.set()

    async with httpx.AsyncClient() as client:
        metrics = SentinelMetrics(CollectorRegistry())
        scheduler = Scheduler(
            (TEXT,),
            CanaryRunner(client, server.url),
            ledger,
            metrics,
            sink=ResultSink(ledger, metrics, clock=time.monotonic, listener=record),
            planner=Planner(ledger, (TEXT,)),
            idle_window=5.0,
            configured_model="m",
            clock=time.monotonic,
            sleep=never_elapses,
            beat=lambda name, gap: None,
            late_wait=LATE_WAIT,
        )
        task = asyncio.create_task(scheduler.run())
        try:
            await server.wait_requests(3)
            assert await signalled(third_recorded)  # the third, answered, is recorded too
            first, second = server.requests[:2]
            # The second timed out while the first was awaited: closed as today.
            assert await signalled(second.disconnected)
            assert not first.disconnected.is_set()
            assert scheduler.late.awaited(TEXT_KIND)
            assert ledger.in_flight() == 1
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        # Shutdown ended the late wait: its connection is closed too, nothing delivered.
        assert await signalled(first.disconnected)
        assert [r.late for r in results] == [False] * len(results)
        assert [r.awaiting_late for r in results[:2]] == [True, False]
        assert ledger.in_flight() == 0
