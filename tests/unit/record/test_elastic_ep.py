"""Elastic EP in 0.33's form: the gate, the status route, failed commits and retired ranks.

The ledger is fed what a server in each state answers (canaries, ``/metrics``,
``POST /is_scaling_elastic_ep``) on a virtual clock and judged every second,
so "a failed commit is red within 10 s of phase failed" is asserted exactly.
Both directions: a working scale stays live, a server stuck in the same
clothes (a failed commit, a scale that never ends) turns red; a retired rank
is unready and never restarted, even with its engine gone.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import httpx
import pytest

from sentinel.canary.refusal import Refusal
from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.evidence.elastic_ep import (
    MAX_TEXT,
    ElasticEpPoller,
    ScalePoll,
    ScaleStatus,
    read_status,
)
from sentinel.evidence.metrics import ERROR_HEAD_BYTES, MetricsScraper, ScrapeError
from sentinel.record.elastic_ep import (
    gate_of_canary,
    gate_of_scrape,
    observe_gate,
    wants_status,
)
from sentinel.record.ledger import Ledger
from sentinel.record.lifecycle import (
    SCALE_RESET_WINDOW,
    LifecycleTracker,
    Readings,
    phase_of,
)
from sentinel.record.observers import Observers
from sentinel.verdict import Action, HangKind, Phase, Policy, VerdictState, evaluate
from sentinel.verdict.hangs.scaling import SCALE_FAILED_WHY

TEXT = CanaryKind.TEXT
SCALING = json.dumps({"error": "The model is currently scaling. Please try again later."})
RETIRED = json.dumps(
    {"error": "This data-parallel rank has been retired and is awaiting shutdown."}
)
ERROR = "RuntimeError: NCCL commit timed out on rank 3"


# --- the status route --------------------------------------------------------------


async def _ask(
    answer: Callable[[httpx.Request], httpx.Response], times: int = 1
) -> tuple[list[ScalePoll], int]:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.method)
        return answer(request)

    now = [0.0]
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        poller = ElasticEpPoller(client, "http://vllm", lambda: now[0])
        polls: list[ScalePoll] = []
        for _ in range(times):
            polls.append(await poller.poll())
            now[0] += 5.0
    assert set(calls) <= {"POST"}
    return polls, len(calls)


async def test_the_route_names_the_phase_epoch_error_and_size() -> None:
    body = {
        "is_scaling_elastic_ep": False,
        "phase": "failed",
        "epoch": "3f2a",
        "error": "x" * 1000,
        "requested_data_parallel_size": 4,
    }
    (poll,), _ = await _ask(lambda _: httpx.Response(200, json=body))
    status = poll.status
    assert isinstance(status, ScaleStatus)
    assert status.failed
    assert (status.epoch, status.requested_size) == ("3f2a", 4)
    assert status.error is not None
    assert len(status.error) == MAX_TEXT
    assert status.describe() == "phase failed, epoch 3f2a, to 4 engines"


@pytest.mark.parametrize(
    ("status", "body", "problem"),
    [
        (
            503,
            b'{"error":{"message":"External Elastic EP status is temporarily unavailable"}}',
            "HTTP 503: External Elastic EP status is temporarily unavailable",
        ),
        (200, b"not json", "not JSON"),
        (200, b'{"is_scaling_elastic_ep": true, "phase": "exploding"}', "unknown phase"),
        (200, b'{"phase": "idle"}', "no 'is_scaling_elastic_ep'"),
        (200, b"[" * 10_000, "BodyTooLarge"),
    ],
)
async def test_a_route_there_but_without_a_word_says_what_went_wrong(
    status: int, body: bytes, problem: str
) -> None:
    (poll,), _ = await _ask(lambda _: httpx.Response(status, content=body))
    assert poll.status is None
    assert problem in poll.problem


async def test_0_32_gates_the_route_itself_and_a_missing_route_is_asked_rarely() -> None:
    (poll,), _ = await _ask(lambda _: httpx.Response(503, content=SCALING.encode()))
    assert poll.status == ScaleStatus(scaling=True)
    polls, calls = await _ask(lambda _: httpx.Response(404), times=5)
    assert calls == 1
    assert all(p.status is None and not p.problem for p in polls)


async def test_a_gated_metrics_scrape_keeps_the_head_of_its_503_body() -> None:
    async def scrape(body: bytes | AsyncIterator[bytes]) -> ScrapeError:
        answer = httpx.MockTransport(lambda _: httpx.Response(503, content=body))
        async with httpx.AsyncClient(transport=answer) as client:
            with pytest.raises(ScrapeError) as caught:
                await MetricsScraper(client, "http://vllm", lambda: 0.0).scrape()
        return caught.value

    gated = await scrape(SCALING.encode())
    assert gated.status == 503
    assert gate_of_scrape(gated.status, gated.body) == (True, Refusal.SCALING)

    async def forever() -> AsyncIterator[bytes]:  # hostile: an endless body
        while True:
            yield b"x" * 100

    endless = await scrape(forever())  # only its head is read
    assert len(endless.body) == ERROR_HEAD_BYTES


# --- the gate ---------------------------------------------------------------------


def canary(t: float, refusal: Refusal | None = None, reason: Reason = Reason.OK) -> CanaryResult:
    if refusal is not None:
        return CanaryResult("text", TEXT, Reason.REFUSED, t, 0.01, http_status=503, refusal=refusal)
    return CanaryResult("text", TEXT, reason, t, 0.3, completion_tokens=2)


def test_every_gated_path_tells_the_gate_and_silence_tells_nothing() -> None:
    assert gate_of_canary(canary(1.0, Refusal.SCALING)) == (True, Refusal.SCALING)
    assert gate_of_canary(canary(1.0, Refusal.RETIRED)) == (True, Refusal.RETIRED)
    assert gate_of_canary(canary(1.0)) == (True, None)  # past the middleware: open
    assert gate_of_canary(canary(1.0, reason=Reason.TIMEOUT)) == (False, None)
    assert gate_of_scrape(503, SCALING) == (True, Refusal.SCALING)
    assert gate_of_scrape(503, RETIRED) == (True, Refusal.RETIRED)
    assert gate_of_scrape(200, "") == (True, None)
    assert gate_of_scrape(503, "") == (False, None)  # some other 503: not the gate's word
    assert gate_of_scrape(None, "") == (False, None)


def test_the_phase_comes_from_the_gate_and_the_route_only_names_it() -> None:
    committing = ScaleStatus(True, "committing", "3f2a", None, 4)
    phase, why = phase_of(Readings(gate=Refusal.SCALING, scale=committing))
    assert phase is Phase.SCALING
    assert "phase committing, epoch 3f2a, to 4 engines" in why
    # External EP prepares new ranks while this one still serves: not a stall.
    assert phase_of(Readings(scale=committing))[0] is Phase.AWAKE
    failed = ScaleStatus(False, "failed", "3f2a", ERROR, 4)
    phase, why = phase_of(Readings(gate=Refusal.SCALING, scale=failed))
    assert phase is Phase.SCALING
    assert why.startswith(SCALE_FAILED_WHY)
    assert ERROR in why
    assert phase_of(Readings(scale=failed))[0] is Phase.AWAKE  # failed, but the gate lifted
    # vLLM marks a rank retired before its commit returns: mid-commit it is still a scale.
    phase, why = phase_of(Readings(gate=Refusal.RETIRED, scale=committing))
    assert phase is Phase.SCALING
    assert "retired" in why
    assert "phase committing" in why
    completed = ScaleStatus(False, "completed", "3f2a", None, 4)
    assert phase_of(Readings(gate=Refusal.RETIRED, scale=completed))[0] is Phase.RETIRED
    assert phase_of(Readings(gate=Refusal.RETIRED))[0] is Phase.RETIRED
    assert phase_of(Readings(scaling=True))[0] is Phase.SCALING  # 0.32's /health 503


def test_a_drained_request_answering_during_the_scale_does_not_lift_the_gate() -> None:
    ledger = Ledger([(TEXT, Action.RESTART, None)], 0.0)
    observe_gate(ledger, (True, Refusal.SCALING), 10.0, 10.0)
    assert ledger.lifecycle.current.phase is Phase.SCALING
    assert wants_status(ledger)
    observe_gate(ledger, (True, None), 5.0, 12.0)  # sent before the gate: drained, stale
    assert ledger.lifecycle.current.phase is Phase.SCALING
    observe_gate(ledger, (True, None), 13.0, 13.0)  # a fresh answer: the gate is open
    assert ledger.lifecycle.current.phase.value == "awake"  # (mypy narrowed it above)
    assert not wants_status(ledger)


def test_counters_going_down_just_after_a_scale_are_its_stat_loggers() -> None:
    tracker = LifecycleTracker()
    assert not tracker.counters_reset_by_scale(5.0)  # no scale seen: a new server
    tracker.update(Readings(gate=Refusal.SCALING), 10.0)
    tracker.update(Readings(), 50.0)
    assert tracker.counters_reset_by_scale(52.0)
    assert not tracker.counters_reset_by_scale(50.0 + SCALE_RESET_WINDOW + 1.0)
    tracker.update(Readings(gate=Refusal.SCALING), 60.0)
    tracker.reset()  # a new epoch forgets the scale
    assert not tracker.counters_reset_by_scale(61.0)


# --- the verdict over a scale, on a virtual clock ------------------------------------


@dataclass
class Server:
    """What a 0.33 server answers at each second: gated from ``start`` for ``length``."""

    start: float = 20.0
    length: float | None = 175.0  # None: the commit never returns
    failed_at: float | None = None  # the route says failed from then; the gate stays up
    # A rank a scale-down removes: its gate says retired from ``start + drain`` (vLLM marks
    # it retired before its commit returns); the route says committing until ``length``.
    retired: bool = False
    drain: float = 0.0
    hung_after: float | None = None  # canaries time out (a hang, no gate) from then

    def refusal(self, t: float) -> Refusal:
        retired = self.retired and t >= self.start + self.drain
        return Refusal.RETIRED if retired else Refusal.SCALING

    def gated(self, t: float) -> bool:
        if t < self.start:
            return False
        return (
            self.retired
            or self.length is None
            or self.failed_at is not None
            or (t < self.start + self.length)
        )

    def status(self, t: float) -> ScaleStatus:
        if self.failed_at is not None and t >= self.failed_at:
            return ScaleStatus(False, "failed", "e1", ERROR, 4)
        if self.retired and self.length is not None and t >= self.start + self.length:
            return ScaleStatus(False, "completed", "e1", None, 4)
        return ScaleStatus(
            True, "preparing" if t < self.start + 60 else "committing", "e1", None, 4
        )


Seen = list[tuple[float, bool, bool, str, str]]


def judge(server: Server, end: float, policy: Policy | None = None) -> tuple[Seen, Ledger]:
    policy = policy or Policy()
    ledger = Ledger([(TEXT, Action.RESTART, None)], 0.0)
    state, seen = VerdictState(), []
    for step in range(1, int(end) + 1):
        t = float(step)
        if step % 5 == 0:  # a canary every 5 s
            token = ledger.canary_sent(TEXT, t)
            if server.hung_after is not None and t >= server.hung_after:
                result = canary(t, reason=Reason.TIMEOUT)
            elif server.gated(t):
                result = canary(t, server.refusal(t))
            else:
                result = canary(t)
            ledger.canary_done(TEXT, token, result, t + result.duration, epoch=ledger.epoch)
        if step % 2 == 0:  # /metrics every 2 s: the scaling 503, or an answer
            body = RETIRED if server.refusal(t) is Refusal.RETIRED else SCALING
            word = gate_of_scrape(503, body) if server.gated(t) else gate_of_scrape(200, "")
            observe_gate(ledger, word, t, t)
        if step % 5 == 0 and wants_status(ledger):
            ledger.observe_lifecycle(t, scale=server.status(t))
        if server.retired and t >= 100.0:
            ledger.engine_down_since = ledger.engine_down_since or 100.0  # its engine gone
        evidence = ledger.evidence(t, 30.0)
        state, verdict = evaluate(state, evidence, policy, t)
        live, ready = verdict.liveness, verdict.readiness
        seen.append((t, live.ok, ready.ok, live.reason, ready.reason))
    return seen, ledger


def first_red(seen: Seen) -> tuple[float, str] | None:
    return next(((t, why) for t, live, _, why, _ in seen if not live), None)


def test_a_175s_scale_of_0_33s_form_is_held_and_ready_again_after() -> None:
    seen, ledger = judge(Server(start=20.0, length=175.0), 260.0)
    assert first_red(seen) is None
    during = [why for t, _, ready, _, why in seen if 25.0 <= t < 195.0 and not ready]
    assert len(during) == 170
    assert "phase committing" in during[-1]
    assert any(ready for t, _, ready, _, _ in seen if t > 205.0)
    assert ledger.epoch == 0


def test_a_failed_commit_with_the_gate_up_is_red_within_its_grace() -> None:
    seen, _ = judge(Server(start=20.0, length=None, failed_at=80.0), 200.0)
    red = first_red(seen)
    assert red is not None
    assert 80.0 < red[0] <= 80.0 + 10.0 + 5.0
    assert ERROR in red[1]
    assert SCALE_FAILED_WHY in red[1]


def test_a_scale_that_never_ends_is_red_at_its_bound() -> None:
    seen, _ = judge(Server(start=20.0, length=None), 320.0)
    red = first_red(seen)
    assert red is not None
    assert 260.0 <= red[0] <= 262.0
    assert "did not end within 240s" in red[1]
    assert "phase committing" in red[1]


def test_a_hang_without_the_gate_is_still_caught() -> None:
    seen, _ = judge(Server(start=1000.0, hung_after=60.0), 160.0)
    red = first_red(seen)
    assert red is not None
    assert red[0] < 120.0
    assert "engine" in red[1]


def test_a_retired_rank_is_unready_with_its_reason_and_never_restarted() -> None:
    seen, ledger = judge(Server(start=20.0, retired=True), 400.0)
    assert first_red(seen) is None  # not even with its engine gone from t=100
    unready = [why for t, _, ready, _, why in seen if t >= 22.0]
    assert all("retired" in why for why in unready)
    assert ledger.lifecycle.current.phase is Phase.RETIRED
    _, verdict = evaluate(VerdictState(), ledger.evidence(400.0, 30.0), Policy(), 400.0)
    assert HangKind.DEAD not in [h.kind for h in verdict.hangs]
    assert HangKind.SCALING not in [h.kind for h in verdict.hangs]


def test_a_rank_retired_mid_commit_is_a_scale_until_the_route_says_it_ended() -> None:
    tracker = LifecycleTracker()
    tracker.update(Readings(gate=Refusal.RETIRED), 10.0)  # the gate first: the route unasked
    assert tracker.current.phase is Phase.RETIRED
    committing = ScaleStatus(True, "committing", "e1", None, 3)
    now = tracker.update(Readings(gate=Refusal.RETIRED, scale=committing), 15.0)
    assert now.phase is Phase.SCALING
    assert now.since == 10.0  # timed from the gate's first sighting
    done = ScaleStatus(False, "completed", "e1", None, 3)
    tracker.update(Readings(gate=Refusal.RETIRED, scale=done), 70.0)
    assert tracker.current.phase is Phase.RETIRED
    # The route unreadable: retired, and sentinel says it cannot tell.
    problem = "POST /is_scaling_elastic_ep: HTTP 503: unavailable"
    tracker.reset()
    tracker.update(Readings(gate=Refusal.RETIRED, scale_problem=problem), 80.0)
    assert tracker.current.phase is Phase.RETIRED
    assert problem in tracker.current.cannot_tell


def test_the_route_is_asked_on_a_retired_rank_until_it_says_the_scale_ended() -> None:
    ledger = Ledger([(TEXT, Action.RESTART, None)], 0.0)
    observe_gate(ledger, (True, Refusal.RETIRED), 10.0, 10.0)
    assert wants_status(ledger)  # nothing heard yet
    ledger.observe_lifecycle(11.0, scale=ScaleStatus(True, "committing", "e1", None, 3))
    assert wants_status(ledger)
    ledger.observe_lifecycle(12.0, scale_problem="POST /is_scaling_elastic_ep: HTTP 503")
    assert wants_status(ledger)
    ledger.observe_lifecycle(13.0, scale=ScaleStatus(False, "completed", "e1", None, 3))
    assert not wants_status(ledger)  # retired for good: nothing more to learn


def test_a_rank_retired_mid_commit_whose_commit_never_returns_is_red_at_its_bound() -> None:
    # Drained behind the scaling gate for 60 s, then marked retired; the commit hangs.
    seen, _ = judge(Server(start=20.0, length=None, retired=True, drain=60.0), 320.0)
    red = first_red(seen)
    assert red is not None
    assert 260.0 <= red[0] <= 262.0  # timed from the first sighting of the gate
    assert "did not end within 240s" in red[1]
    assert "retired" in red[1]
    assert "engine dead" not in red[1]  # its engine shuts down in its commit: not death


def test_a_rank_retired_straight_away_whose_commit_never_returns_is_red_too() -> None:
    seen, _ = judge(Server(start=20.0, length=None, retired=True), 320.0)
    red = first_red(seen)
    assert red is not None
    assert 260.0 <= red[0] <= 262.0


# --- hostile bodies: nested past the recursion limit ---------------------------------


async def test_a_deeply_nested_route_answer_is_a_problem_not_a_crash() -> None:
    for status in (200, 503):

        def nested(_: httpx.Request, code: int = status) -> httpx.Response:
            return httpx.Response(code, content=b"[" * 4000)

        (poll,), _ = await _ask(nested)
        assert poll.status is None
        assert poll.problem.startswith("POST /is_scaling_elastic_ep:")
    deep: object = []
    for _ in range(5000):
        deep = [deep]
    read = read_status({"is_scaling_elastic_ep": True, "phase": "committing", "epoch": deep})
    assert isinstance(read, ScaleStatus)
    assert read.epoch is not None
    assert len(read.epoch) <= MAX_TEXT
    assert "unknown phase" in str(read_status({"is_scaling_elastic_ep": True, "phase": deep}))


def test_a_deeply_nested_metrics_503_is_no_word_on_the_gate() -> None:
    assert gate_of_scrape(503, "[" * 1024) == (False, None)
    assert gate_of_scrape(503, '{"error": ' + "[" * 1024) == (False, None)


async def test_a_scrape_in_flight_when_the_gate_went_up_does_not_reopen_it() -> None:
    ledger = Ledger([(TEXT, Action.RESTART, None)], 0.0)
    now = [10.0]

    def answer(_: httpx.Request) -> httpx.Response:
        # The gate goes up (a canary refused at 11 s) while this scrape is in flight;
        # the scrape, let past the middleware before, answers 200 at 12 s.
        observe_gate(ledger, (True, Refusal.SCALING), 11.0, 11.0)
        now[0] = 12.0
        return httpx.Response(200, text="vllm:num_requests_running 0\n")

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        scraper = MetricsScraper(client, "http://vllm", lambda: now[0])
        await Observers(ledger, lambda: now[0]).scrape_step(scraper)()
    assert ledger.lifecycle.current.phase is Phase.SCALING
    assert ledger.lifecycle.current.since == 11.0
