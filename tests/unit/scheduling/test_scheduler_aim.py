"""Canaries aimed at each data-parallel engine, on a virtual clock.

The scheduler aims a canary (``X-data-parallel-rank``) only when the progress
evidence shows more than one ``engine`` label. Each text cadence step sends a
canary to every engine whose own work has not vouched for it within the idle
window, all at once; path canaries and their controls go together to each
engine in turn. The canaries go through the real runner to an ``httpx.MockTransport``
that records the header; per-engine progress is fed to the ledger as metric
samples, as the scrape loop would.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx
from prometheus_client import CollectorRegistry

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.runner import DP_RANK_HEADER, CanaryRunner
from sentinel.canary.spec import CanaryKind, CanarySpec
from sentinel.evidence.metrics import MetricsSample
from sentinel.record.ledger import Ledger
from sentinel.record.planner import Planner
from sentinel.record.sink import ResultSink
from sentinel.scheduling.scheduler import Scheduler
from sentinel.telemetry.metrics import SentinelMetrics
from tests.unit.scheduling.test_scheduler import T0, VirtualClock, _kind_of, _ledger, _specs

TEXT = CanaryKind("text")
IDLE_WINDOW = 5.0
TEXT_ONLY = _specs(text={"interval": 5.0, "jitter": 0.0, "deadline": 4.0})


@dataclass
class Sent:
    at: float
    kind: str
    engine: str | None


@dataclass
class FakeDpVllm:
    """Answers canaries at once; ``hung`` engines never answer, ``refused`` ones are a 400."""

    clock: VirtualClock
    hung: set[str] = field(default_factory=set)
    refused: set[str] = field(default_factory=set)
    sent: list[Sent] = field(default_factory=list)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        engine = request.headers.get(DP_RANK_HEADER)
        self.sent.append(Sent(self.clock() - T0, _kind_of(body), engine))
        if engine in self.refused:
            message = f"data_parallel_rank {engine} is out of range [0, 2)."
            return httpx.Response(400, json={"error": {"message": message, "code": 400}})
        if engine in self.hung:
            # The runner's deadline runs on the loop's clock; on the virtual one
            # a hung engine is its whole deadline long and then a timeout.
            await self.clock.sleep(TEXT_ONLY[0].deadline)
            raise httpx.ReadTimeout("deadline passed", request=request)
        content = json.dumps("ok-n") if "response_format" in body else "ok"
        usage = {"prompt_tokens": 10, "completion_tokens": 2}
        reply = {"choices": [{"message": {"content": content}, "finish_reason": "stop"}]}
        return httpx.Response(200, json={**reply, "usage": usage})

    def aims(self, kind: str = "text") -> list[tuple[float, str | None]]:
        return [(s.at, s.engine) for s in self.sent if s.kind == kind]


def _engines(ledger: Ledger, at: float, **counts: float) -> None:
    """One scrape at ``T0 + at``: each engine's generated tokens, as its ``engine`` label."""
    engines = {label: {"generation_tokens": value} for label, value in counts.items()}
    total = {"generation_tokens": sum(counts.values())}
    ledger.progress.observe(MetricsSample(T0 + at, counters=total, engines=engines))


@asynccontextmanager
async def aiming(
    specs: tuple[CanarySpec, ...],
    prepare: Callable[[Ledger], None],
    server: Callable[[VirtualClock], FakeDpVllm] = FakeDpVllm,
) -> AsyncIterator[tuple[VirtualClock, FakeDpVllm, Ledger, list[CanaryResult]]]:
    clock = VirtualClock()
    fake = server(clock)
    ledger = _ledger(specs, clock)
    prepare(ledger)
    results: list[CanaryResult] = []
    async with httpx.AsyncClient(transport=httpx.MockTransport(fake.handle)) as client:
        metrics = SentinelMetrics(CollectorRegistry())
        scheduler = Scheduler(
            specs,
            CanaryRunner(client, "http://vllm", clock=clock, nonce=lambda: "n"),
            ledger,
            metrics,
            sink=ResultSink(ledger, metrics, clock=clock, listener=results.append),
            planner=Planner(ledger, specs),
            idle_window=IDLE_WINDOW,
            configured_model="m",
            clock=clock,
            sleep=clock.sleep,
            beat=lambda name, gap: None,
            rng=random.Random(7),
        )
        task = asyncio.create_task(scheduler.run())
        try:
            yield clock, fake, ledger, results
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def _two_idle_engines(*, started: bool = True) -> Callable[[Ledger], None]:
    def prepare(ledger: Ledger) -> None:
        _engines(ledger, -20.0, **{"0": 5.0, "1": 5.0})
        ledger.startup_judged(started)

    return prepare


async def test_one_engine_never_gets_the_header() -> None:
    def one_engine(ledger: Ledger) -> None:
        _engines(ledger, -20.0, **{"0": 5.0})

    async with aiming(TEXT_ONLY, one_engine) as (clock, fake, _, _):
        await clock.run_until(T0 + 21)
    assert fake.aims() == [(0.0, None), (5.0, None), (10.0, None), (15.0, None), (20.0, None)]


async def test_every_idle_engine_gets_the_single_engine_rate() -> None:
    async with aiming(TEXT_ONLY, _two_idle_engines()) as (clock, fake, _, results):
        await clock.run_until(T0 + 16)
    assert sorted(fake.aims()) == [(at, e) for at in (0.0, 5.0, 10.0, 15.0) for e in ("0", "1")]
    assert sorted(r.engine or 0 for r in results) == [0] * 4 + [1] * 4
    assert all(r.ok for r in results)


async def test_before_startup_every_engine_gets_canaries_even_when_busy() -> None:
    def busy(ledger: Ledger) -> None:
        _engines(ledger, -1.0, **{"0": 5.0, "1": 5.0})
        _engines(ledger, 0.0, **{"0": 9.0, "1": 9.0})

    async with aiming(TEXT_ONLY, busy) as (clock, fake, _, _):
        await clock.run_until(T0 + 6)
    assert sorted(fake.aims()) == [(0.0, "0"), (0.0, "1"), (5.0, "0"), (5.0, "1")]


async def test_an_engine_proven_by_its_own_counters_gets_none() -> None:
    """Engine 0's counters keep moving (real traffic): only engine 1 is visited."""
    async with aiming(TEXT_ONLY, _two_idle_engines()) as (clock, fake, ledger, _):
        for second in range(0, 31):
            _engines(ledger, float(second), **{"0": 100.0 + second, "1": 5.0})
            await clock.run_until(T0 + second)
    assert [engine for _, engine in fake.aims()] == ["1"] * 7


async def test_no_canary_while_every_engine_is_proven() -> None:
    async with aiming(TEXT_ONLY, _two_idle_engines()) as (clock, fake, ledger, _):
        for second in range(0, 21):
            _engines(ledger, float(second), **{"0": 100.0 + second, "1": 50.0 + second})
            await clock.run_until(T0 + second)
    assert fake.aims() == []


async def test_a_missed_deadline_retries_the_step_at_once() -> None:
    """Engine 1 hangs: the step ends at its deadline (4 s) and is retried at once, both engines.

    So the hung engine gets a canary every deadline, as a single hung engine
    does, and the working one keeps answering, at least as often as its own
    interval would ask.
    """
    hung = lambda clock: FakeDpVllm(clock, hung={"1"})  # noqa: E731
    async with aiming(TEXT_ONLY, _two_idle_engines(), hung) as (clock, fake, _, results):
        await clock.run_until(T0 + 13)
    assert sorted(fake.aims()) == [(at, e) for at in (0.0, 4.0, 8.0, 12.0) for e in ("0", "1")]
    assert {(r.engine, r.reason) for r in results} == {(0, Reason.OK), (1, Reason.TIMEOUT)}
    assert [r.engine for r in results if r.reason is Reason.TIMEOUT] == [1, 1, 1]


async def test_path_canary_and_its_control_go_to_the_same_engine_in_turn() -> None:
    specs = _specs(
        text={"interval": 100.0, "jitter": 0.0},
        structured={"interval": 5.0, "jitter": 0.0},
    )
    async with aiming(specs, _two_idle_engines()) as (clock, fake, _, _):
        await clock.run_until(T0 + 11)
    assert fake.aims("structured") == [(0.0, "0"), (5.0, "1"), (10.0, "0")]
    controls = [aim for aim in fake.aims() if aim[0] > 0]
    assert controls == [(5.0, "1"), (10.0, "0")]


async def test_a_refused_rank_is_resent_unaimed_and_no_longer_aimed_at() -> None:
    refused = lambda clock: FakeDpVllm(clock, refused={"1"})  # noqa: E731
    async with aiming(TEXT_ONLY, _two_idle_engines(), refused) as (clock, fake, ledger, results):
        await clock.run_until(T0 + 16)
    later = [(at, e) for at in (5.0, 10.0, 15.0) for e in ("0", None)]
    expected = [(0.0, "0"), (0.0, "1"), (0.0, None), *later]
    assert sorted(fake.aims(), key=str) == sorted(expected, key=str)
    assert sorted(map(str, (r.engine for r in results))) == ["0"] * 4 + ["None"] * 4
    assert all(r.ok for r in ledger.records[TEXT].results)


async def test_labels_that_are_not_ranks_are_never_aimed_at() -> None:
    def odd_labels(ledger: Ledger) -> None:
        engines: Mapping[str, Mapping[str, float]] = {
            "0": {"generation_tokens": 1.0},
            "a": {"generation_tokens": 1.0},
        }
        ledger.progress.observe(
            MetricsSample(T0 - 20, counters={"generation_tokens": 2.0}, engines=engines)
        )

    async with aiming(TEXT_ONLY, odd_labels) as (clock, fake, _, _):
        await clock.run_until(T0 + 6)
    assert fake.aims() == [(0.0, None), (5.0, None)]


EIGHT = tuple(str(e) for e in range(8))


def _eight_idle_engines(ledger: Ledger) -> None:
    _engines(ledger, -20.0, **dict.fromkeys(EIGHT, 5.0))
    ledger.startup_judged(True)


async def test_eight_idle_engines_each_get_a_canary_within_one_interval() -> None:
    """No rotation: detection does not wait eight intervals for the engine that hangs."""
    async with aiming(TEXT_ONLY, _eight_idle_engines) as (clock, fake, _, results):
        await clock.run_until(T0 + 4.9)
        first = sorted(engine or "" for _, engine in fake.aims())
        await clock.run_until(T0 + 9.9)
    assert first == list(EIGHT)
    assert sorted(fake.aims()) == [(at, e) for at in (0.0, 5.0) for e in EIGHT]
    assert len(results) == 16
    assert all(r.ok for r in results)


async def test_seven_engines_proven_by_traffic_one_canary_per_step() -> None:
    """Engines 0-6 decode real traffic: only engine 7 gets a canary, one per step."""
    async with aiming(TEXT_ONLY, _eight_idle_engines) as (clock, fake, ledger, _):
        for second in range(0, 21):
            busy = {e: 100.0 + second for e in EIGHT[:7]}
            _engines(ledger, float(second), **busy, **{"7": 5.0})
            await clock.run_until(T0 + second)
    assert fake.aims() == [(0.0, "7"), (5.0, "7"), (10.0, "7"), (15.0, "7"), (20.0, "7")]


def _engine_counters(ledger: Ledger, at: float, **engines: dict[str, float]) -> None:
    total: dict[str, float] = {}
    for counters in engines.values():
        for key, value in counters.items():
            total[key] = total.get(key, 0.0) + value
    ledger.progress.observe(MetricsSample(T0 + at, counters=total, engines=engines))


async def test_prefills_without_decode_prove_no_engine() -> None:
    """Engine 1 prefills arrivals and hands each a first token but decodes nothing: not proven.

    Both engines count first tokens; engine 0 decodes real traffic and is
    proven, engine 1's new arrivals move its prompt and first-token counts
    only, so it keeps getting a canary every step.
    """

    def prepare(ledger: Ledger) -> None:
        _engine_counters(ledger, -20.0, **{e: _decoding(0.0, 0.0) for e in ("0", "1")})
        ledger.startup_judged(True)

    async with aiming(TEXT_ONLY, prepare) as (clock, fake, ledger, _):
        for second in range(0, 16):
            arrivals = float(second + 1)
            engine0 = _decoding(first=arrivals, decoded=10.0 * arrivals)
            engine1 = _decoding(first=arrivals, decoded=0.0)
            _engine_counters(ledger, float(second), **{"0": engine0, "1": engine1})
            await clock.run_until(T0 + second)
    assert fake.aims() == [(0.0, "1"), (5.0, "1"), (10.0, "1"), (15.0, "1")]


def _decoding(first: float, decoded: float) -> dict[str, float]:
    """An engine's counters after ``first`` requests were prefilled and ``decoded`` tokens more."""
    return {
        "prompt_tokens": 8.0 * first,
        "first_tokens": first,
        "generation_tokens": first + decoded,
    }
