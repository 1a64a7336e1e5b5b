"""A late answer is an answer: timed-out canaries awaited in the background (unit tier).

The real scheduler and runner against an ``httpx.MockTransport`` whose
handler holds chosen canaries until the test releases them; a handler that is
cancelled while it holds one is how this tier sees the connection closed (the
loopback tier checks the socket). Deadlines are real but short (0.2 s), and
every wait is for an event, bounded by a deadline: nothing sleeps to wait.
The ledger's bookkeeping (history replacement, credits) is also checked on its
own, on explicit times.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from sentinel.canary.catalog import load_catalog
from sentinel.canary.late import LateCanary
from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.runner import CanaryRunner
from sentinel.canary.spec import CanaryKind, CanarySpec
from sentinel.config.loader import ConfigError, load_settings
from sentinel.config.settings import Settings
from sentinel.evidence.metrics import MetricsSample
from sentinel.record.ledger import HISTORY, Ledger
from sentinel.record.planner import Planner
from sentinel.record.sink import ResultSink
from sentinel.scheduling.departure import Departure
from sentinel.scheduling.late import LateAnswers
from sentinel.scheduling.scheduler import Scheduler
from sentinel.telemetry.metrics import SentinelMetrics
from sentinel.verdict import Action

CATALOG = load_catalog()
TEXT_KIND = CanaryKind("text")
STRUCTURED_KIND = CanaryKind("structured")
DEADLINE = 0.2
# Never reached unless a test waits for it: a late answer comes when released.
LATE_WAIT = 30.0
WITHIN = 5.0  # the most any awaited event may take


def text_spec(**changes: Any) -> CanarySpec:
    return replace(CATALOG.get("text"), **{"deadline": DEADLINE, "stream": False, **changes})


async def never_elapses(delay: float) -> None:
    """The scheduler's sleep between steps: each loop steps once (a timeout retries at once)."""
    await asyncio.Event().wait()


@dataclass
class Call:
    """One canary the fake server received."""

    body: dict[str, Any]
    release: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False  # the client went away while it was held (vLLM would abort it)


@dataclass
class HeldServer:
    """Answers canaries like a healthy server, holding the ones ``hold`` names until released."""

    hold: Callable[[int, dict[str, Any]], bool]
    calls: list[Call] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        call = Call(json.loads(request.content))
        self.calls.append(call)
        self.arrived.set()
        held = self.hold(len(self.calls) - 1, call.body)
        content = json.dumps("ok-n") if "response_format" in call.body else "ok"
        usage = {"prompt_tokens": 10, "completion_tokens": 2}
        if call.body.get("stream"):
            return httpx.Response(
                200,
                headers={"Content-Type": "text/event-stream"},
                content=_stream(call, held, content, usage),
            )
        if held:
            await _held(call)
        reply = {"choices": [{"message": {"content": content}, "finish_reason": "stop"}]}
        return httpx.Response(200, json={**reply, "usage": usage})

    def of(self, kind: str) -> list[Call]:
        structured = kind == "structured"
        return [c for c in self.calls if ("response_format" in c.body) == structured]

    async def wait_calls(self, count: int) -> None:
        async with asyncio.timeout(WITHIN):
            while len(self.calls) < count:
                self.arrived.clear()
                await self.arrived.wait()


async def _held(call: Call) -> None:
    try:
        await call.release.wait()
    except asyncio.CancelledError:
        call.closed = True
        raise


async def _stream(
    call: Call, held: bool, content: str, usage: dict[str, int]
) -> AsyncIterator[bytes]:
    """Headers at once; the reply's events only once released (a stalled first token)."""
    if held:
        await _held(call)
    chunks = [
        {"choices": [{"delta": {"content": content}, "finish_reason": "stop"}]},
        {"choices": [], "usage": usage},
    ]
    for chunk in chunks:
        yield f"data: {json.dumps(chunk)}\n\n".encode()
    yield b"data: [DONE]\n\n"


class Results:
    """The results the scheduler delivered (``on_result``), awaitable by count."""

    def __init__(self) -> None:
        self.items: list[CanaryResult] = []
        self._changed = asyncio.Event()

    def add(self, result: CanaryResult) -> None:
        self.items.append(result)
        self._changed.set()

    async def wait(self, count: int, within: float = WITHIN) -> list[CanaryResult]:
        async with asyncio.timeout(within):
            while len(self.items) < count:
                self._changed.clear()
                await self._changed.wait()
        return list(self.items)

    def of(self, kind: CanaryKind) -> list[CanaryResult]:
        return [r for r in self.items if r.kind is kind]


@dataclass
class Harness:
    scheduler: Scheduler
    server: HeldServer
    ledger: Ledger
    metrics: SentinelMetrics
    results: Results
    task: asyncio.Task[None]

    def late_answers(self, kind: str, outcome: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "sentinel_canary_late_answers_total", {"kind": kind, "outcome": outcome}
        )
        return value or 0.0

    def canaries(self, kind: str, outcome: str, reason: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "sentinel_canary_total", {"kind": kind, "outcome": outcome, "reason": reason}
        )
        return value or 0.0

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


@asynccontextmanager
async def scheduling(
    specs: tuple[CanarySpec, ...],
    hold: Callable[[int, dict[str, Any]], bool],
    *,
    late_wait: float = LATE_WAIT,
    departure: Departure | None = None,
) -> AsyncIterator[Harness]:
    server = HeldServer(hold)
    kinds = {s.kind: (s.kind, Action(s.policy), s.latency_slo) for s in specs}
    left = departure.left if departure is not None else (lambda: None)
    ledger = Ledger(kinds.values(), time.monotonic(), on_refused=left)
    metrics = SentinelMetrics(CollectorRegistry())
    results = Results()
    async with httpx.AsyncClient(transport=httpx.MockTransport(server.handle)) as client:
        scheduler = Scheduler(
            specs,
            CanaryRunner(client, "http://vllm", nonce=lambda: "n"),
            ledger,
            metrics,
            sink=ResultSink(ledger, metrics, clock=time.monotonic, listener=results.add),
            planner=Planner(ledger, specs),
            idle_window=5.0,
            configured_model="m",
            clock=time.monotonic,
            sleep=never_elapses,
            beat=lambda name, gap: None,
            late_wait=late_wait,
            departure=departure,
        )
        task = asyncio.create_task(scheduler.run())
        harness = Harness(scheduler, server, ledger, metrics, results, task)
        try:
            yield harness
        finally:
            await harness.stop()
            for call in server.calls:
                call.release.set()


async def poll(predicate: Callable[[], bool], what: str, within: float = WITHIN) -> None:
    """Wait until ``predicate`` holds, checking every few milliseconds; fail past ``within``."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while True:
        if predicate():
            return
        if loop.time() > end:
            pytest.fail(f"not within {within:g} s: {what}")
        await asyncio.sleep(0.005)


def attempts(name: str) -> list[asyncio.Task[Any]]:
    """The runner's exchanges of canary ``name`` still running as tasks of their own."""
    return [t for t in asyncio.all_tasks() if t.get_name() == f"canary-attempt:{name}"]


def first(count: int) -> Callable[[int, dict[str, Any]], bool]:
    """Hold the first ``count`` canaries."""
    return lambda index, body: index < count


# -- through the scheduler ---------------------------------------------------------


async def test_a_timeout_is_recorded_at_once_then_its_late_answer_replaces_it() -> None:
    with capture_logs() as logs:
        async with scheduling((text_spec(),), first(1)) as h:
            timed_out, retried = await h.results.wait(2)
            # Recorded at the deadline as today, retried at once; the first one still awaited.
            assert (timed_out.reason, timed_out.awaiting_late, timed_out.late) == (
                Reason.TIMEOUT,
                True,
                False,
            )
            assert DEADLINE <= timed_out.duration < LATE_WAIT
            assert (retried.ok, retried.late) == (True, False)
            assert not h.server.calls[0].closed, "an awaited canary's connection stays open"
            record = h.ledger.records[TEXT_KIND]
            assert list(record.results) == [timed_out, retried]
            assert h.scheduler.late.awaited(TEXT_KIND)

            h.server.calls[0].release.set()
            late = (await h.results.wait(3))[2]

            assert (late.late, late.awaiting_late, late.reason) == (True, False, Reason.OK)
            assert (late.name, late.kind, late.engine, late.started) == (
                timed_out.name,
                timed_out.kind,
                timed_out.engine,
                timed_out.started,
            )
            assert late.duration > timed_out.duration
            assert late.completion_tokens == 2
            # It replaces the timed-out entry in place; the history keeps its order.
            assert list(record.results) == [late, retried]
            assert not h.scheduler.late.awaited(TEXT_KIND)
            assert (h.late_answers("text", "ok"), h.late_answers("text", "timeout")) == (1, 0)
            # The canary itself was counted once, when it missed its deadline.
            assert h.canaries("text", "failure", "timeout") == 1
            assert h.canaries("text", "success", "ok") == 1
    [line] = [e for e in logs if e["event"] == "canary_late_answer"]
    assert (line["canary"], line["kind"], line["reason"]) == ("text", "text", "ok")
    assert 0 < line["seconds_past_deadline"] < LATE_WAIT


async def test_only_one_late_canary_per_kind_the_next_timeout_is_closed() -> None:
    async with scheduling((text_spec(),), first(2)) as h:
        awaited, closed, answered = await h.results.wait(3)
        assert (awaited.reason, awaited.awaiting_late) == (Reason.TIMEOUT, True)
        assert (closed.reason, closed.awaiting_late) == (Reason.TIMEOUT, False)
        assert answered.ok
        first_call, second_call = h.server.calls[:2]
        assert second_call.closed, "the second timeout is cancelled as without late waits"
        assert not first_call.closed

        first_call.release.set()
        late = (await h.results.wait(4))[3]
        assert (late.late, late.ok, late.started) == (True, True, awaited.started)
        assert list(h.ledger.records[TEXT_KIND].results) == [late, closed, answered]


async def test_the_late_wait_runs_out_with_a_final_timeout() -> None:
    async with scheduling((text_spec(),), first(1), late_wait=0.6) as h:
        awaited, _ = await h.results.wait(2)
        assert awaited.awaiting_late
        final = (await h.results.wait(3))[2]
        assert (final.late, final.awaiting_late, final.reason) == (True, False, Reason.TIMEOUT)
        assert "late_wait" in final.detail
        assert final.duration >= 0.6
        assert h.server.calls[0].closed, "the late wait closes the connection when it ends"
        assert h.ledger.records[TEXT_KIND].results[0] == final
        assert h.late_answers("text", "timeout") == 1
        assert h.ledger.in_flight() == 0


async def test_shutdown_cancels_the_late_wait_and_closes_its_connection() -> None:
    async with scheduling((text_spec(),), first(1)) as h:
        awaited, _ = await h.results.wait(2)
        assert awaited.awaiting_late
        assert h.ledger.in_flight() == 1
        await h.stop()
        assert h.task.cancelled()
        assert h.server.calls[0].closed
        assert not h.scheduler.late.awaited(TEXT_KIND)
        assert h.ledger.in_flight() == 0
        assert len(h.results.items) == 2, "nothing is delivered for a cancelled wait"
        leftovers = [t for t in asyncio.all_tasks() if t.get_name().startswith("canary")]
        assert leftovers == [], "no exchange or late wait outlives the run"


async def test_a_server_that_stops_listening_ends_the_late_wait_and_its_connection() -> None:
    # uvicorn waits for every open request before it exits: the late wait must let go.
    async with scheduling((text_spec(),), first(1), departure=Departure()) as h:
        awaited, _ = await h.results.wait(2)
        assert awaited.awaiting_late
        h.ledger.saw_refusal(time.monotonic())  # a scrape met the closed listener
        await poll(lambda: h.server.calls[0].closed, "the late canary's connection closed")
        await poll(lambda: not h.scheduler.late.awaited(TEXT_KIND), "the late wait ended")
        assert h.ledger.in_flight() == 0  # its credit closed
        assert not any(r.late for r in h.results.items), "nothing delivered for it"


async def test_the_credit_stays_open_while_the_canary_is_awaited() -> None:
    async with scheduling((text_spec(),), first(1)) as h:
        await h.results.wait(2)
        record = h.ledger.records[TEXT_KIND]
        assert record.outstanding == {}, "recorded: no longer outstanding for the verdict"
        [token] = record.awaited
        assert h.ledger.in_flight() == 1
        credit = h.ledger.progress._credits[token]
        assert credit.finished is None

        h.server.calls[0].release.set()
        await h.results.wait(3)
        assert record.awaited == set()
        assert credit.finished is not None
        assert credit.allowed["generation_tokens"] == 2  # closed with the late reply's usage


async def test_a_streamed_canary_keeps_reading_and_a_late_first_token_sets_ttft() -> None:
    async with scheduling((text_spec(stream=True),), first(1)) as h:
        awaited, _ = await h.results.wait(2)
        assert (awaited.ttft, awaited.tokens_received, awaited.http_status) == (None, 0, 200)
        h.server.calls[0].release.set()
        late = (await h.results.wait(3))[2]
        assert (late.ok, late.late) == (True, True)
        assert late.ttft is not None
        assert late.ttft >= DEADLINE
        assert late.tokens_received == 1


async def test_a_path_canarys_late_answer_waits_for_its_pair_and_keeps_the_control() -> None:
    structured = replace(CATALOG.get("structured"), deadline=DEADLINE, stream=False)
    control = text_spec(deadline=1.0, interval=3600.0)
    # Held: the first structured canary, and the first two text ones (the text
    # loop's own and the structured canary's control, in either order).
    held = {"structured": 1, "text": 2}

    def hold(index: int, body: dict[str, Any]) -> bool:
        kind = "structured" if "response_format" in body else "text"
        held[kind] -= 1
        return held[kind] >= 0

    async with scheduling((control, structured), hold) as h:
        await poll(lambda: h.scheduler.late.awaited(STRUCTURED_KIND), "awaited late")
        # Its late answer comes while the pair's control is still held: it
        # waits until the pair is recorded, so it has an entry to replace.
        [structured_call] = h.server.of("structured")
        structured_call.release.set()
        await poll(lambda: not attempts("structured"), "its reply is in and judged")
        assert h.results.of(STRUCTURED_KIND) == []
        for call in h.server.of("text"):
            call.release.set()

        def late_in() -> bool:
            return any(r.late for r in h.results.of(STRUCTURED_KIND))

        await poll(late_in, "the late answer recorded")
        mine = h.results.of(STRUCTURED_KIND)
        [awaited] = [r for r in mine if r.awaiting_late]
        [late] = [r for r in mine if r.late]
        # No other structured canary while it was awaited: it was the path's probe.
        assert [r for r in mine if not r.late and not r.awaiting_late] == []
        assert (late.ok, late.started) == (True, awaited.started)
        assert not structured_call.closed
        record = h.ledger.records[STRUCTURED_KIND]
        assert list(record.results) == [late]
        assert [c is not None and c.ok for c in record.controls] == [True]


async def test_without_a_late_wait_a_timeout_is_closed_as_before() -> None:
    async with scheduling((text_spec(),), first(1), late_wait=0.0) as h:
        timed_out, answered = await h.results.wait(2)
        assert (timed_out.reason, timed_out.awaiting_late) == (Reason.TIMEOUT, False)
        assert answered.ok
        assert h.server.calls[0].closed
        assert h.ledger.in_flight() == 0


async def test_a_late_wait_stopped_before_it_ever_ran_leaves_nothing_behind() -> None:
    ledger = _ledger()
    token = ledger.canary_sent(TEXT_KIND, T0, BUDGET)
    timed_out = _result(TEXT_KIND, T0, Reason.TIMEOUT, awaiting_late=True)
    delivered: list[CanaryResult] = []
    metrics = SentinelMetrics(CollectorRegistry())
    sink = ResultSink(ledger, metrics, clock=lambda: T0 + 2, listener=delivered.append)
    late_answers = LateAnswers(
        sink,
        late_wait=LATE_WAIT,
        outstanding=lambda kind: ledger.records[kind].outstanding,
        failed=print,
    )

    async def hangs() -> CanaryResult:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    exchange = asyncio.create_task(hangs())
    async with asyncio.TaskGroup() as group:
        late_answers.group = group
        adopt = late_answers.adopter(text_spec(), token, epoch=0)
        assert adopt is not None
        assert adopt(LateCanary(timed_out, exchange, LATE_WAIT))
        ledger.canary_done(TEXT_KIND, token, timed_out, T0 + 1, epoch=0)
        assert late_answers.awaited(TEXT_KIND)
        # Its step gives it up at once: the follower is cancelled before its first step.
        late_answers.abandon(TEXT_KIND, token)
    await late_answers.close()
    assert exchange.cancelled()
    assert not late_answers.awaited(TEXT_KIND)
    assert ledger.in_flight() == 0
    assert delivered == []


# -- the ledger on its own ----------------------------------------------------------

T0 = 1000.0
BUDGET = {"prompt_tokens": 10.0, "generation_tokens": 2.0, "engine_tokens": 12.0}


def _ledger() -> Ledger:
    return Ledger([(TEXT_KIND, Action.RESTART, None), (STRUCTURED_KIND, Action.ALERT, None)], T0)


def _result(kind: CanaryKind, started: float, reason: Reason, **changes: Any) -> CanaryResult:
    return CanaryResult(str(kind), kind, reason, started, 1.0, **changes)


def _prefill_seen(ledger: Ledger, at: float) -> bool:
    """Whether a prefill of the canary's size at ``at`` counts as the server's own progress."""
    ledger.progress.observe(MetricsSample(at - 1, counters={"prompt_tokens": 100.0}))
    ledger.progress.observe(MetricsSample(at, counters={"prompt_tokens": 110.0}))
    return ledger.progress.last_progress_at == at


def test_an_awaited_canary_keeps_explaining_its_work_until_the_late_answer() -> None:
    ledger = _ledger()
    token = ledger.canary_sent(TEXT_KIND, T0, BUDGET)
    timed_out = _result(TEXT_KIND, T0, Reason.TIMEOUT, awaiting_late=True)
    ledger.canary_done(TEXT_KIND, token, timed_out, T0 + 1, epoch=0)
    assert ledger.records[TEXT_KIND].outstanding == {}
    assert ledger.in_flight() == 1
    # Long past its deadline, its prefill is still its own, not the server's progress.
    assert not _prefill_seen(ledger, T0 + 100)

    ledger.canary_late(TEXT_KIND, token, replace(timed_out, late=True), T0 + 200, epoch=0)
    assert ledger.in_flight() == 0
    assert _prefill_seen(ledger, T0 + 300), "closed like any finished canary, then expired"


def test_a_canary_closed_at_its_deadline_stops_explaining_work() -> None:
    ledger = _ledger()
    token = ledger.canary_sent(TEXT_KIND, T0, BUDGET)
    ledger.canary_done(TEXT_KIND, token, _result(TEXT_KIND, T0, Reason.TIMEOUT), T0 + 1, epoch=0)
    assert _prefill_seen(ledger, T0 + 100)


def test_the_late_result_replaces_its_entry_and_keeps_the_control_aligned() -> None:
    ledger = _ledger()
    control = _result(TEXT_KIND, T0, Reason.OK)
    tokens = [ledger.canary_sent(STRUCTURED_KIND, T0 + i, BUDGET, engine=i) for i in range(3)]
    timed_out = [
        _result(STRUCTURED_KIND, T0 + i, Reason.TIMEOUT, engine=i, awaiting_late=i == 1)
        for i in range(3)
    ]
    for token, result in zip(tokens, timed_out, strict=True):
        ledger.canary_done(STRUCTURED_KIND, token, result, T0 + 5, control=control, epoch=0)
    late = replace(timed_out[1], reason=Reason.OK, late=True, awaiting_late=False, duration=9.0)
    ledger.canary_late(STRUCTURED_KIND, tokens[1], late, T0 + 10, epoch=0)

    record = ledger.records[STRUCTURED_KIND]
    assert list(record.results) == [timed_out[0], late, timed_out[2]]
    assert list(record.controls) == [control] * 3


def test_a_late_result_matches_its_own_engine_and_start() -> None:
    ledger = _ledger()
    token = ledger.canary_sent(TEXT_KIND, T0, BUDGET, engine=0)
    mine = _result(TEXT_KIND, T0, Reason.TIMEOUT, engine=0, awaiting_late=True)
    ledger.canary_done(TEXT_KIND, token, mine, T0 + 1, epoch=0)
    other = ledger.canary_sent(TEXT_KIND, T0, BUDGET, engine=1)
    ledger.canary_done(TEXT_KIND, other, replace(mine, engine=1), T0 + 1, epoch=0)
    late = replace(mine, late=True, awaiting_late=False, reason=Reason.OK)
    ledger.canary_late(TEXT_KIND, token, late, T0 + 2, epoch=0)
    assert [(r.engine, r.late) for r in ledger.records[TEXT_KIND].results] == [
        (0, True),
        (1, False),
    ]


def test_a_late_result_past_the_history_cap_or_epoch_is_not_brought_back() -> None:
    ledger = _ledger()
    token = ledger.canary_sent(TEXT_KIND, T0, BUDGET)
    timed_out = _result(TEXT_KIND, T0, Reason.TIMEOUT, awaiting_late=True)
    ledger.canary_done(TEXT_KIND, token, timed_out, T0 + 1, epoch=0)
    for i in range(HISTORY):
        ok = ledger.canary_sent(TEXT_KIND, T0 + 2 + i, BUDGET)
        result = _result(TEXT_KIND, T0 + 2 + i, Reason.OK)
        ledger.canary_done(TEXT_KIND, ok, result, T0 + 3 + i, epoch=0)
    before = list(ledger.records[TEXT_KIND].results)
    ledger.canary_late(TEXT_KIND, token, replace(timed_out, late=True), T0 + 100, epoch=0)
    assert list(ledger.records[TEXT_KIND].results) == before
    assert len(before) == HISTORY
    assert ledger.in_flight() == 0

    # A new epoch forgot the history: the late result only closes the credit.
    token = ledger.canary_sent(TEXT_KIND, T0 + 200, BUDGET)
    timed_out = _result(TEXT_KIND, T0 + 200, Reason.TIMEOUT, awaiting_late=True)
    ledger.canary_done(TEXT_KIND, token, timed_out, T0 + 201, epoch=0)
    ledger.new_epoch("restarted", T0 + 202)
    ledger.canary_late(TEXT_KIND, token, replace(timed_out, late=True), T0 + 203, epoch=0)
    assert list(ledger.records[TEXT_KIND].results) == []
    assert ledger.in_flight() == 0


def test_abandoning_an_awaited_canary_closes_its_credit() -> None:
    ledger = _ledger()
    token = ledger.canary_sent(TEXT_KIND, T0, BUDGET)
    timed_out = _result(TEXT_KIND, T0, Reason.TIMEOUT, awaiting_late=True)
    ledger.canary_done(TEXT_KIND, token, timed_out, T0 + 1, epoch=0)
    ledger.canary_abandoned(TEXT_KIND, token, T0 + 2)
    assert ledger.in_flight() == 0
    assert _prefill_seen(ledger, T0 + 100)


# -- the setting ----------------------------------------------------------------------


def test_late_wait_defaults_to_two_minutes_and_comes_from_env_or_yaml(tmp_path: Path) -> None:
    assert Settings().late_wait == 120.0
    assert Settings(late_wait=0).late_wait == 0.0  # 0: never awaited late
    assert load_settings(env={"SENTINEL_LATE_WAIT": "45"}).late_wait == 45.0
    config = tmp_path / "sentinel.yaml"
    config.write_text("late_wait: 0\n")
    assert load_settings(config, env={}).late_wait == 0.0


@pytest.mark.parametrize("value", ["-1", "nan", "1e9"])
def test_late_wait_is_ranged(value: str) -> None:
    with pytest.raises(ConfigError, match="late_wait"):
        load_settings(env={"SENTINEL_LATE_WAIT": value})


def test_late_wait_must_cover_every_deadline_unless_zero() -> None:
    # The catalog's own deadlines (8-10 s) count; the error names where the value came from.
    with pytest.raises(ConfigError) as caught:
        load_settings(env={"SENTINEL_LATE_WAIT": "5"})
    assert str(caught.value).startswith("environment variable SENTINEL_LATE_WAIT: late_wait must")

    def settings(late_wait: float) -> Settings:
        return Settings.model_validate(
            {
                "late_wait": late_wait,
                "canaries": {"text": {"deadline": 30}},
                "hang_window": 60,
                "no_evidence_window": 60,
            }
        )

    with pytest.raises(ValueError, match="late_wait"):
        settings(20)
    assert settings(0).late_wait == 0
    assert settings(30).late_wait == 30
