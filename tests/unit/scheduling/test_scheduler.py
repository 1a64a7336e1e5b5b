"""The scheduler on a virtual clock: cadence, jitter, idle gating, pairing, retries.

The scheduler gets a virtual clock and that clock's ``sleep``; the canaries go
through the real runner to an ``httpx.MockTransport`` (the one seam), whose
handler may take virtual time too. Nothing here waits in real time: the clock
jumps to the next sleeper once every task is blocked.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import json
import random
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from sentinel.canary.catalog import load_catalog
from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.runner import CanaryRunner
from sentinel.canary.spec import CanaryKind, CanarySpec
from sentinel.evidence.metrics import MetricsSample
from sentinel.record.ledger import Ledger
from sentinel.record.planner import Planner
from sentinel.record.sink import ResultSink
from sentinel.scheduling.departure import Departure
from sentinel.scheduling.scheduler import Scheduler
from sentinel.scheduling.suspicion import SUSPECT_SCRAPE_S, Suspicion
from sentinel.telemetry.metrics import SentinelMetrics
from sentinel.verdict import Action

T0 = 1000.0
SETTLE_ROUNDS = 200  # event-loop turns that let every runnable task block again


class VirtualClock:
    """Monotonic time that moves only when :meth:`run_until` moves it."""

    def __init__(self, start: float = T0) -> None:
        self.now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        wake = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + max(0.0, seconds), next(self._order), wake))
        await wake

    async def run_until(self, until: float) -> None:
        """Wake sleepers in time order up to ``until``, letting the loop settle between."""
        while True:
            await _settle()
            if not self._sleepers or self._sleepers[0][0] > until:
                self.now = max(self.now, until)
                await _settle()
                return
            when, _, wake = heapq.heappop(self._sleepers)
            self.now = max(self.now, when)
            if not wake.done():
                wake.set_result(None)


async def _settle() -> None:
    for _ in range(SETTLE_ROUNDS):
        await asyncio.sleep(0)


@dataclass
class Sent:
    at: float
    kind: str
    priority: int | None


@dataclass
class FakeVllm:
    """Answers canaries like a healthy server; faults are set per test."""

    clock: VirtualClock
    latency: float = 0.0
    timeouts: int = 0  # the next N canaries miss their deadline
    text_only: bool = False
    sent: list[Sent] = field(default_factory=list)
    on_request: Callable[[], None] | None = None

    async def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        kind = _kind_of(body)
        self.sent.append(Sent(self.clock(), kind, body.get("priority")))
        if self.on_request is not None:
            self.on_request()
        if self.latency:
            await self.clock.sleep(self.latency)
        if self.timeouts:
            self.timeouts -= 1
            raise httpx.ReadTimeout("deadline passed", request=request)
        if kind == "multimodal" and self.text_only:
            error = {"error": {"message": "m is not a multimodal model", "code": 400}}
            return httpx.Response(400, json=error)
        content = "ok"
        if kind == "structured":
            content = json.dumps("ok-n")  # the nonce the runner was given
        usage = {"prompt_tokens": 100 if kind == "multimodal" else 10, "completion_tokens": 2}
        if body.get("stream"):
            return _event_stream(content, usage)
        reply = {"choices": [{"message": {"content": content}, "finish_reason": "stop"}]}
        return httpx.Response(200, json={**reply, "usage": usage})


def _event_stream(content: str, usage: dict[str, int]) -> httpx.Response:
    """A streamed chat reply: one content chunk, a usage chunk, then ``[DONE]``."""
    chunks = [
        {"choices": [{"delta": {"content": content}, "finish_reason": "stop"}]},
        {"choices": [], "usage": usage},
    ]
    events = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return httpx.Response(200, text=events, headers={"Content-Type": "text/event-stream"})


def _kind_of(body: dict[str, Any]) -> str:
    if "response_format" in body:
        return "structured"
    if any(isinstance(m.get("content"), list) for m in body.get("messages", [])):
        return "multimodal"
    return "text"


def _specs(**timing: dict[str, Any]) -> tuple[CanarySpec, ...]:
    """The shipped catalog's canaries named in ``timing``, with that timing."""
    shipped = {s.name: s for s in load_catalog().enabled()}
    return tuple(replace(shipped[name], **changes) for name, changes in timing.items())


def _ledger(specs: Iterable[CanarySpec], clock: VirtualClock) -> Ledger:
    kinds = {s.kind: (s.kind, Action(s.policy), s.latency_slo) for s in specs}
    return Ledger(kinds.values(), clock())


@dataclass
class Harness:
    clock: VirtualClock
    server: FakeVllm
    ledger: Ledger
    metrics: SentinelMetrics
    results: list[CanaryResult]
    beats: dict[str, float]
    suspicion: Suspicion | None = None

    def skipped(self, reason: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "sentinel_canaries_skipped_total", {"reason": reason}
        )
        return value or 0.0

    def times(self, kind: str) -> list[float]:
        return [s.at - T0 for s in self.server.sent if s.kind == kind]


@asynccontextmanager
async def scheduling(
    specs: tuple[CanarySpec, ...],
    *,
    server: Callable[[VirtualClock], FakeVllm] = FakeVllm,
    prepare: Callable[[Ledger], None] = lambda ledger: None,
    rng: random.Random | None = None,
    on_result: Callable[[Ledger, CanaryResult], None] | None = None,
    suspicion: bool = False,
    departure: Departure | None = None,
) -> AsyncIterator[Harness]:
    clock = VirtualClock()
    fake = server(clock)
    ledger = _ledger(specs, clock)
    if departure is not None:
        ledger.on_refused = departure.left  # as the daemon builds it
    prepare(ledger)
    metrics = SentinelMetrics(CollectorRegistry())
    results: list[CanaryResult] = []
    beats: dict[str, float] = {}
    suspect = Suspicion(ledger, clock) if suspicion else None

    def record(result: CanaryResult) -> None:
        if on_result is not None:
            on_result(ledger, result)
        results.append(result)

    async with httpx.AsyncClient(transport=httpx.MockTransport(fake.handle)) as client:
        runner = CanaryRunner(client, "http://vllm", clock=clock, nonce=lambda: "n")
        scheduler = Scheduler(
            specs,
            runner,
            ledger,
            metrics,
            sink=ResultSink(ledger, metrics, clock=clock, listener=record),
            planner=Planner(ledger, specs),
            idle_window=30.0,
            configured_model="m",
            clock=clock,
            sleep=clock.sleep,
            beat=lambda name, gap: beats.__setitem__(name, gap),
            rng=rng or random.Random(7),
            suspicion=suspect,
            departure=departure,
        )
        task = asyncio.create_task(scheduler.run())
        try:
            yield Harness(clock, fake, ledger, metrics, results, beats, suspect)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_text_canary_runs_on_its_interval_without_jitter() -> None:
    async with scheduling(_specs(text={"interval": 5.0, "jitter": 0.0})) as h:
        await h.clock.run_until(T0 + 21)
    assert h.times("text") == [0.0, 5.0, 10.0, 15.0, 20.0]
    assert len(h.ledger.records[CanaryKind("text")].results) == 5
    assert "canary:text" in h.beats


async def test_interval_counts_from_the_start_of_a_slow_canary() -> None:
    slow = _specs(text={"interval": 5.0, "jitter": 0.0, "deadline": 4.0})
    async with scheduling(slow, server=lambda c: FakeVllm(c, latency=3.0)) as h:
        await h.clock.run_until(T0 + 16)
    assert h.times("text") == [0.0, 5.0, 10.0, 15.0]
    assert [r.duration for r in h.results] == [3.0, 3.0, 3.0]


async def test_jitter_spreads_gaps_within_its_bounds() -> None:
    async with scheduling(_specs(text={"interval": 10.0, "jitter": 0.2})) as h:
        await h.clock.run_until(T0 + 400)
    gaps = [b - a for a, b in itertools.pairwise(h.times("text"))]
    assert len(gaps) >= 30
    assert all(8.0 <= g <= 12.0 for g in gaps), gaps
    assert max(gaps) - min(gaps) > 1.0, "jitter did not vary the gaps"


async def test_missed_deadline_is_retried_at_once_then_cadence_resumes() -> None:
    specs = _specs(text={"interval": 5.0, "jitter": 0.0})
    async with scheduling(specs, server=lambda c: FakeVllm(c, timeouts=2)) as h:
        await h.clock.run_until(T0 + 11)
    assert h.times("text") == [0.0, 0.0, 0.0, 5.0, 10.0]
    assert [r.reason for r in h.results] == [Reason.TIMEOUT] * 2 + [Reason.OK] * 3


def _real_traffic_at(at: float) -> Callable[[Ledger], None]:
    """Prepare a ledger whose progress saw one real completion at ``at``."""

    def prepare(ledger: Ledger) -> None:
        ledger.progress.observe(MetricsSample(at - 1, counters={"completions": 10.0}))
        ledger.progress.observe(MetricsSample(at, counters={"completions": 11.0}))
        ledger.startup_judged(True)

    return prepare


async def test_text_canary_is_skipped_while_real_traffic_completes() -> None:
    specs = _specs(text={"interval": 5.0, "jitter": 0.0})
    async with scheduling(specs, prepare=_real_traffic_at(T0)) as h:
        await h.clock.run_until(T0 + 41)
    # idle_window 30: busy through T0+30, the first canary leaves at T0+35.
    assert h.times("text") == [35.0, 40.0]
    assert h.skipped("busy") == 7


async def test_idle_gating_waits_for_startup() -> None:
    def before_startup(ledger: Ledger) -> None:
        _real_traffic_at(T0)(ledger)
        ledger.startup_judged(False)

    specs = _specs(text={"interval": 5.0, "jitter": 0.0})
    async with scheduling(specs, prepare=before_startup) as h:
        await h.clock.run_until(T0 + 6)
    assert h.times("text") == [0.0, 5.0]
    assert h.skipped("busy") == 0


async def test_path_canary_leaves_with_a_text_control_and_is_not_idle_gated() -> None:
    specs = _specs(
        text={"interval": 100.0, "jitter": 0.0, "priority": -100},
        structured={"interval": 7.0, "jitter": 0.0, "priority": -50},
    )
    async with scheduling(specs, prepare=_real_traffic_at(T0)) as h:
        await h.clock.run_until(T0 + 15)
    assert h.times("structured") == [0.0, 7.0, 14.0]
    assert h.times("text") == [0.0, 7.0, 14.0]  # the controls; the text loop itself is gated
    assert {s.priority for s in h.server.sent} == {-50}
    record = h.ledger.records[CanaryKind("structured")]
    assert [r.ok for r in record.results] == [True] * 3
    assert all(c is not None and c.kind == "text" and c.ok for c in record.controls)
    assert len(h.ledger.records[CanaryKind("text")].results) == 3  # each control recorded as text


async def test_unsupported_kind_is_disabled_and_then_skipped() -> None:
    specs = _specs(
        text={"interval": 5.0, "jitter": 0.0},
        multimodal={"interval": 5.0, "jitter": 0.0},
    )
    async with scheduling(specs, server=lambda c: FakeVllm(c, text_only=True)) as h:
        await h.clock.run_until(T0 + 11)
    record = h.ledger.records[CanaryKind("multimodal")]
    assert not record.enabled
    assert "not a multimodal model" in record.disabled_reason
    assert h.times("multimodal") == [0.0]
    assert h.skipped("disabled") == 2


async def test_a_result_reaches_the_hook_after_it_is_recorded() -> None:
    recorded: list[bool] = []

    def check(ledger: Ledger, result: CanaryResult) -> None:
        recorded.append(result in ledger.records[result.kind].results)

    specs = _specs(text={"interval": 5.0, "jitter": 0.0})
    async with scheduling(specs, on_result=check) as h:
        await h.clock.run_until(T0 + 6)
    assert recorded == [True, True]


async def test_a_canary_spanning_a_server_restart_is_not_recorded() -> None:
    holder: list[Ledger] = []

    def restart_while_in_flight() -> None:
        if len(holder[0].records[CanaryKind("text")].results) == 1:
            holder[0].new_epoch("test restart", T0)

    def server(clock: VirtualClock) -> FakeVllm:
        return FakeVllm(clock, latency=1.0, on_request=restart_while_in_flight)

    specs = _specs(text={"interval": 5.0, "jitter": 0.0})
    async with scheduling(specs, server=server, prepare=holder.append) as h:
        await h.clock.run_until(T0 + 12)
    assert h.times("text") == [0.0, 5.0, 10.0]
    assert h.ledger.epoch == 1
    record = h.ledger.records[CanaryKind("text")]
    # The epoch-0 result was cleared, the one spanning the restart dropped.
    assert [r.started - T0 for r in record.results] == [10.0]
    assert record.outstanding == {}
    assert len(h.results) == 3  # every result is still observed (metrics, hook)


@pytest.mark.parametrize("jitter", [0.0, 0.5])
async def test_heartbeat_gap_covers_the_longest_wait(jitter: float) -> None:
    specs = _specs(text={"interval": 5.0, "jitter": jitter, "deadline": 3.0})
    async with scheduling(specs) as h:
        await h.clock.run_until(T0 + 1)
    assert h.beats["canary:text"] >= 5.0 * (1 + jitter) + 3.0


async def test_a_step_that_raises_is_counted_and_every_loop_carries_on() -> None:
    """A bug in one kind's step costs that step, not the scheduler or the other kinds."""

    def broken_for_structured(ledger: Ledger, result: CanaryResult) -> None:
        if result.kind is CanaryKind("structured"):
            raise RuntimeError("a bug in the structured step")

    specs = _specs(
        text={"interval": 5.0, "jitter": 0.0},
        structured={"interval": 10.0, "jitter": 0.0},
    )
    async with scheduling(specs, on_result=broken_for_structured) as h:
        await h.clock.run_until(T0 + 31)
    # The text loop never noticed; the structured loop kept its cadence (no hot retry).
    assert h.times("text") == [0.0, 0.0, 5.0, 10.0, 10.0, 15.0, 20.0, 20.0, 25.0, 30.0, 30.0]
    assert h.times("structured") == [0.0, 10.0, 20.0, 30.0]
    errors = h.metrics.registry.get_sample_value(
        "sentinel_loop_errors_total", {"loop": "canary:structured"}
    )
    assert errors == 4


def _sample(ledger: Ledger, suspicion: Suspicion, at: float, done: float, running: float) -> None:
    """One scrape: ``done`` completions so far, ``running`` requests in the engine."""
    sample = MetricsSample(at, counters={"completions": done}, gauges={"running": running})
    ledger.progress.observe(sample)
    suspicion.observe(sample)


async def test_a_standstill_with_work_inside_sends_the_text_canary_at_once() -> None:
    """Busy through T0+30 by real traffic; flat samples with a request running cut that short."""
    specs = _specs(text={"interval": 5.0, "jitter": 0.0})
    async with scheduling(specs, prepare=_real_traffic_at(T0), suspicion=True) as h:
        suspicion = h.suspicion
        assert suspicion is not None
        await h.clock.run_until(T0 + 7)
        _sample(h.ledger, suspicion, T0 + 7, 11.0, 1.0)  # no counter moved, one running
        await h.clock.run_until(T0 + 9)
        _sample(h.ledger, suspicion, T0 + 9, 11.0, 1.0)  # the same standstill: no second
        await h.clock.run_until(T0 + 12)
        _sample(h.ledger, suspicion, T0 + 12, 12.0, 1.0)  # a completion ends it
        _sample(h.ledger, suspicion, T0 + 14, 12.0, 0.0)  # flat and empty: no suspicion
        await h.clock.run_until(T0 + 16)
        _sample(h.ledger, suspicion, T0 + 16, 12.0, 2.0)  # a new standstill with work
        await h.clock.run_until(T0 + 20)
    assert h.times("text") == [7.0, 16.0]
    assert suspicion.raised == 2


async def test_a_waiting_text_canary_makes_scrapes_come_sooner() -> None:
    specs = _specs(text={"interval": 5.0, "jitter": 0.0, "deadline": 8.0})
    async with scheduling(specs, server=lambda c: FakeVllm(c, latency=3.0), suspicion=True) as h:
        suspicion = h.suspicion
        assert suspicion is not None
        await h.clock.run_until(T0 + 0.5)
        assert suspicion.scrape_interval(2.0) == 2.0  # in flight, not yet waiting
        await h.clock.run_until(T0 + 1.5)
        assert suspicion.scrape_interval(2.0) == SUSPECT_SCRAPE_S
        await h.clock.run_until(T0 + 3.5)
        assert suspicion.scrape_interval(2.0) == 2.0  # answered


PAUSED_BODY = {"error": {"message": "Generation is paused.", "type": "x", "code": 503}}


async def test_a_pause_read_from_refusals_keeps_the_text_canary_going_under_real_traffic() -> None:
    """Paused by the canaries' word, then /resume and real traffic: idle gating does not
    hold the text canary back until it has seen the pause end and passed since."""

    @dataclass
    class Paused(FakeVllm):
        until: float = T0 + 12

        async def handle(self, request: httpx.Request) -> httpx.Response:
            if self.clock() < self.until:
                self.sent.append(Sent(self.clock(), "text", None))
                return httpx.Response(503, json=PAUSED_BODY)
            return await super().handle(request)

    def started(ledger: Ledger) -> None:
        ledger.startup_judged(True)

    specs = _specs(text={"interval": 5.0, "jitter": 0.0})
    async with scheduling(specs, server=lambda c: Paused(c), prepare=started) as h:
        await h.clock.run_until(T0 + 11)
        assert h.ledger.evidence(h.clock(), 5.0).lifecycle.phase.value == "paused"
        for i, t in enumerate(range(12, 60, 2)):  # /resume at 12: real traffic from then on
            await h.clock.run_until(T0 + t)
            sample = MetricsSample(T0 + t, counters={"completions": 100.0 + 3 * i})
            h.ledger.progress.observe(sample)
        life = h.ledger.evidence(h.clock(), 5.0).lifecycle
    assert h.times("text")[:4] == [0.0, 5.0, 10.0, 15.0]  # 15: busy, yet sent
    assert life.phase.value == "awake"
    assert [r.reason for r in h.results][3] is Reason.OK
    assert h.skipped("busy") >= 6  # once it passed after the resume, gated as before
