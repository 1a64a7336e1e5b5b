"""vLLM fault tolerance, both ways, on a virtual clock: a recovery held, a dead or late one red.

A rank waiting ``unhealthy`` for its orchestrator's retry (0.33: canaries
queue and time out, ``/metrics`` frozen; 0.34: canaries refused with the
faulted 503) is a recovery: readiness red naming the status, liveness held
for ``engine_recovery_timeout_sec`` plus the grace, windows starting again at
``healthy``. The same canaries with no status saying so are an engine hang;
``dead`` is a restart at once; ``unhealthy`` past its window is red. The
poller reads both routes, with the API key, capped; the command line's flags
say whether to ask at all and give the timeout.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import httpx
import pytest

from sentinel.canary.refusal import Refusal
from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.evidence.endpoint_poll import ABSENT_RETRY
from sentinel.evidence.fault_tolerance import FaultTolerancePoller, FtPoll
from sentinel.evidence.ft_status import FtEngine, fault_tolerance_flags, parse_status
from sentinel.record.fault_tolerance import FaultToleranceWatch
from sentinel.record.ledger import Ledger
from sentinel.verdict import (
    Action,
    Evidence,
    HangKind,
    KindEvidence,
    Phase,
    Policy,
    VerdictState,
    evaluate,
)
from sentinel.verdict.hangs.fault_tolerance import SECTION

TEXT = CanaryKind.TEXT
FAULTED = "The engine has faulted and cannot accept new requests. Please try again later."

Status = Callable[[float], str | None]  # the engine's status at a time (None: no status read)


def _engines(status: str) -> tuple[FtEngine, ...]:
    info = "RuntimeError" if status in ("unhealthy", "diagnosing") else ""
    return (FtEngine(0, "healthy"), FtEngine(2, status, info))


def _run(
    status: Status,
    *,
    until: float,
    fault: tuple[float, float],
    refused: bool = False,
    problem: str = "",
    timeout_flag: float | None = None,
    skip_after: float | None = None,
    **policy: object,
) -> list[tuple[float, bool, bool, str, tuple[HangKind, ...]]]:
    """Every second a status poll, a canary and an evaluation: (t, live, ready, reason, hangs).

    Canaries sent every 5 s succeed outside ``fault`` and, inside it, time out
    (0.33: queued; 8 s deadline) or are refused at once (0.34's faulted 503);
    none is sent from ``skip_after`` on (clients keep the server busy).
    """
    ledger = Ledger([(TEXT, Action.RESTART, None)], 0.0)
    watch = FaultToleranceWatch(ledger, lambda: 0.0, timeout=120.0, grace=10.0)
    if timeout_flag is not None:
        watch._flags = lambda: (True, timeout_flag)  # type: ignore[method-assign]
    state = VerdictState(epoch=0, startup_passed=True)
    results: list[CanaryResult] = []
    out = []
    start, end = fault
    for second in range(int(until) + 1):
        now = float(second)
        if second % 5 == 0 and second >= 5 and (skip_after is None or now - 5 < skip_after):
            sent = now - 5
            in_fault = start <= sent < end
            if not in_fault:
                result = CanaryResult("text-canary", TEXT, Reason.OK, sent, 0.2)
            elif refused:
                result = CanaryResult(
                    "text-canary",
                    TEXT,
                    Reason.REFUSED,
                    sent,
                    0.01,
                    detail=f"HTTP 503: {FAULTED}",
                    http_status=503,
                    refusal=Refusal.FAULTED,
                )
            else:
                result = CanaryResult("text-canary", TEXT, Reason.TIMEOUT, sent, 8.0)
            results.append(result)
            ledger.refusals.saw(result)
        said = status(now)
        poll = FtPoll(problem=problem) if said is None else FtPoll(_engines(said), "/x")
        watch.observe(poll, now)
        outstanding = (now - now % 5,) if start <= now < end and not refused else ()
        evidence = Evidence(
            kinds={TEXT: KindEvidence(TEXT, results=tuple(results[-50:]), outstanding=outstanding)},
            progress_available=True,
            last_progress_at=min(now, start) if now < end else now,
            lifecycle=ledger.lifecycle.current,
            sections={SECTION.name: watch.section(now)},
            refusals=ledger.refusals.frozen(),
        )
        state, verdict = evaluate(state, evidence, Policy(**policy), now)  # type: ignore[arg-type]
        kinds = tuple(h.kind for h in verdict.hangs)
        out.append(
            (now, verdict.liveness.ok, verdict.readiness.ok, verdict.readiness.reason, kinds)
        )
    return out


def _between(start: float, end: float, inside: str) -> Status:
    return lambda now: inside if start <= now < end else "healthy"


def test_a_recovery_held_60s_fails_no_liveness_and_names_the_status() -> None:
    seen = _run(_between(20, 80, "unhealthy"), until=140, fault=(20, 80))
    assert all(live for _, live, _, _, _ in seen)
    assert all(not hangs for *_, hangs in seen)
    held = [reason for t, _, ready, reason, _ in seen if 22 <= t < 80]
    assert held
    assert all("recovering: fault tolerance: engine 2 unhealthy (RuntimeError)" in r for r in held)
    assert all(not ready for t, _, ready, _, _ in seen if 20 <= t < 80)
    assert any(ready for t, _, ready, _, _ in seen if t > 100)  # canaries pass again: ready


def test_the_same_canaries_without_a_status_saying_so_are_an_engine_hang() -> None:
    seen = _run(lambda now: "healthy", until=80, fault=(20, 80))
    red = [t for t, live, *_ in seen if not live]
    assert red
    assert red[0] <= 20 + 15 + 5
    assert HangKind.ENGINE in seen[70][4]


def test_diagnosing_is_held_like_unhealthy() -> None:
    seen = _run(_between(20, 60, "diagnosing"), until=100, fault=(20, 60))
    assert all(live for _, live, *_ in seen)


def test_dead_is_a_restart_at_once() -> None:
    seen = _run(_between(20, 10**6, "dead"), until=40, fault=(20, 10**6))
    red = [t for t, live, *_ in seen if not live]
    assert red[0] == 20.0
    assert HangKind.FAULT_TOLERANCE in seen[-1][4]


def test_unhealthy_past_its_timeout_and_grace_is_red() -> None:
    seen = _run(_between(20, 10**6, "unhealthy"), until=160, fault=(20, 10**6))
    red = [t for t, live, *_ in seen if not live]
    assert red[0] == 20 + 120 + 10
    assert seen[-1][4] == (HangKind.FAULT_TOLERANCE,)


def test_the_command_line_timeout_wins_over_the_setting() -> None:
    seen = _run(_between(20, 10**6, "unhealthy"), until=70, fault=(20, 10**6), timeout_flag=30.0)
    assert next(t for t, live, *_ in seen if not live) == 20 + 30 + 10


def test_faulted_refusals_with_no_status_readable_are_held_for_the_window() -> None:
    problem = "GET /v1/fault_tolerance/status: HTTP 401 (no API key configured)"
    held = _run(lambda now: None, until=120, fault=(20, 80), refused=True, problem=problem)
    assert all(live for _, live, *_ in held)
    reasons = [r for t, _, _, r, _ in held if 30 <= t < 80]
    assert reasons
    assert all("HTTP 401" in r and "faulted" in r for r in reasons)
    late = _run(lambda now: None, until=170, fault=(20, 10**6), refused=True, problem=problem)
    red = [t for t, live, *_ in late if not live]
    assert red
    assert 20 + 130 <= red[0] <= 20 + 130 + 5


def _phase(ledger: Ledger) -> Phase:
    return ledger.lifecycle.current.phase


def test_a_silent_status_keeps_its_last_word_briefly_then_is_no_evidence() -> None:
    ledger = Ledger([(TEXT, Action.RESTART, None)], 0.0)
    watch = FaultToleranceWatch(ledger, lambda: 0.0, timeout=120.0, grace=10.0)
    watch.observe(FtPoll(_engines("unhealthy"), "/fault_tolerance/status"), 0.0)
    watch.observe(FtPoll(problem="GET /fault_tolerance/status: no answer within 2 s"), 5.0)
    assert _phase(ledger) is Phase.RECOVERING
    watch.observe(FtPoll(problem="GET /fault_tolerance/status: no answer within 2 s"), 11.0)
    assert _phase(ledger) is Phase.AWAKE  # a wedged API server is not hidden
    fragment = watch.status(watch.section(11.0), 11.0)
    assert fragment is not None
    assert "no answer" in fragment["cannot_tell"]


def test_status_shows_the_engines_and_the_window() -> None:
    ledger = Ledger([(TEXT, Action.RESTART, None)], 0.0)
    watch = FaultToleranceWatch(ledger, lambda: 0.0, timeout=120.0, grace=10.0)
    assert watch.status(watch.section(0.0), 0.0) is None  # no fault tolerance: nothing shown
    watch.observe(FtPoll(_engines("unhealthy"), "/fault_tolerance/status"), 3.0)
    fragment = watch.status(watch.section(9.0), 9.0)
    assert fragment is not None
    assert fragment["engines"][1] == {"id": 2, "status": "unhealthy", "fault_info": "RuntimeError"}
    assert fragment["recovering_for"] == 6.0
    assert fragment["window"] == 130.0
    assert fragment["path"] == "/fault_tolerance/status"


@pytest.mark.parametrize(
    ("cmdline", "expected"),
    [
        (["vllm", "serve", "m"], (False, None)),
        (["vllm", "serve", "m", "--enable-fault-tolerance"], (True, None)),
        (["vllm", "serve", "--enable_fault_tolerance"], (True, None)),
        (
            ["vllm", "serve", "--fault-tolerance-config", '{"engine_recovery_timeout_sec": 60}'],
            (False, 60.0),  # the config alone registers no status route
        ),
        (
            [
                "python -m vllm.entrypoints.openai.api_server --enable-fault-tolerance "
                '--fault-tolerance-config {"engine_recovery_timeout_sec":3}'
            ],
            (True, 3.0),
        ),
        (["vllm", "--fault-tolerance-config.engine_recovery_timeout_sec", "45"], (False, 45.0)),
        (
            ["vllm", "--fault-tolerance-config", '{"engine_recovery_timeout_sec": -1}'],
            (False, None),
        ),
        (["vllm", "--fault-tolerance-config", "{not json"], (False, None)),
    ],
)
def test_flags_on_the_command_line(cmdline: list[str], expected: tuple[bool, float | None]) -> None:
    assert fault_tolerance_flags(cmdline) == expected


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"[]",
        b'{"engines": 3}',
        b'{"engines": [{"id": "0", "status": "dead"}]}',
        b'{"engines": [{"id": true, "status": "dead"}]}',
        b'{"engines": [7]}',
    ],
)
def test_a_body_that_is_not_the_status_is_none(body: bytes) -> None:
    assert parse_status(body) is None


def test_long_and_many_entries_are_cut() -> None:
    entries = [{"id": i, "status": "UNHEALTHY", "fault_info": "x" * 5000} for i in range(2000)]
    engines = parse_status(json.dumps({"engines": entries}).encode())
    assert engines is not None
    assert len(engines) == 512
    assert engines[0].status == "unhealthy"
    assert len(engines[0].fault_info) == 120


def _poller(
    handler: Callable[[httpx.Request], httpx.Response], **kw: object
) -> tuple[FaultTolerancePoller, list[float]]:
    now = [0.0]
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return FaultTolerancePoller(client, "http://vllm:8000", lambda: now[0], **kw), now  # type: ignore[arg-type]


STATUS = {"schema_version": 1, "total_engines": 1, "engines": [{"id": 0, "status": "healthy"}]}


def test_the_poller_finds_the_034_route_with_the_key_and_remembers_it() -> None:
    asked: list[tuple[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append((request.url.path, request.headers.get("Authorization", "")))
        if request.url.path != "/v1/fault_tolerance/status":
            return httpx.Response(404)
        if request.headers.get("Authorization") != "Bearer sk":
            return httpx.Response(401, json={"error": "Unauthorized"})
        return httpx.Response(200, json=STATUS)

    poller, _ = _poller(handler, api_key="sk")
    first = asyncio.run(poller.poll())
    assert first.engines == (FtEngine(0, "healthy"),)
    assert first.path == "/v1/fault_tolerance/status"
    asked.clear()
    asyncio.run(poller.poll())
    assert asked == [("/v1/fault_tolerance/status", "Bearer sk")]


def test_the_poller_falls_back_to_the_033_route() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/fault_tolerance/status":
            return httpx.Response(200, json=STATUS)
        return httpx.Response(404)

    poller, _ = _poller(handler)
    assert asyncio.run(poller.poll()).path == "/fault_tolerance/status"


def test_404_on_both_is_absent_and_asked_again_only_after_the_retry() -> None:
    poller, now = _poller(lambda request: httpx.Response(404))
    assert asyncio.run(poller.poll()) == FtPoll(absent=True)
    assert poller.absent
    now[0] = ABSENT_RETRY + 1
    assert not poller.absent


def test_a_401_without_a_key_is_cannot_tell_with_the_reason() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/v1"):
            return httpx.Response(401, json={"error": "Unauthorized"})
        return httpx.Response(404)

    poller, _ = _poller(handler)
    poll = asyncio.run(poller.poll())
    assert poll.engines is None
    assert not poll.absent
    assert "HTTP 401 (no API key configured)" in poll.problem


def test_a_body_past_the_cap_or_a_timeout_is_a_problem_never_an_exception() -> None:
    def huge(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"{" + b" " * (1 << 20))

    poll = asyncio.run(_poller(huge)[0].poll())
    assert "BodyTooLarge" in poll.problem

    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    poll = asyncio.run(_poller(slow)[0].poll())
    assert "no answer within" in poll.problem


def test_faulted_refusals_while_the_status_says_all_healthy_are_stale_never_held() -> None:
    seen = _run(lambda now: "healthy", until=170, fault=(20, 10**6), refused=True)
    assert all(live for _, live, *_ in seen)
    assert all(HangKind.FAULT_TOLERANCE not in hangs for *_, hangs in seen)
    assert all("recovering" not in reason for _, _, _, reason, _ in seen)


def test_a_recovered_rank_whose_canaries_are_skipped_is_not_held_nor_restarted() -> None:
    # 0.34 with the status unreadable (401): refused 20-80, then recovered; clients keep the
    # server busy, so no canary succeeds to end the refusal run.
    problem = "GET /v1/fault_tolerance/status: HTTP 401 (no API key configured)"
    seen = _run(
        lambda now: None, until=200, fault=(20, 80), refused=True, problem=problem, skip_after=80
    )
    assert all(live for _, live, *_ in seen)
    assert all(HangKind.FAULT_TOLERANCE not in hangs for *_, hangs in seen)
    assert "recovering" in seen[70][3]
    assert all("recovering" not in reason for t, _, _, reason, _ in seen if t >= 90)
    # The status readable and healthy again: the refusal is stale at once.
    seen = _run(
        _between(20, 80, "unhealthy"), until=200, fault=(20, 80), refused=True, skip_after=80
    )
    assert all(live for _, live, *_ in seen)
    assert all("recovering" not in reason for t, _, _, reason, _ in seen if t >= 80)


def _refused_at(ledger: Ledger, sent: float) -> None:
    result = CanaryResult(
        "text-canary",
        TEXT,
        Reason.REFUSED,
        sent,
        0.01,
        detail=f"HTTP 503: {FAULTED}",
        http_status=503,
        refusal=Refusal.FAULTED,
    )
    ledger.canary_done(TEXT, ledger.canary_sent(TEXT, sent), result, sent + 0.01, epoch=0)


def test_a_faulted_run_ends_at_real_progress_or_a_newer_answer() -> None:
    ledger = Ledger([(TEXT, Action.RESTART, None)], 0.0)
    watch = FaultToleranceWatch(ledger, lambda: 0.0, timeout=120.0, grace=10.0)
    unreadable = FtPoll(problem="GET /v1/fault_tolerance/status: HTTP 401 (no API key configured)")
    _refused_at(ledger, 20.0)
    watch.observe(unreadable, 21.0)
    assert _phase(ledger) is Phase.RECOVERING
    ledger.progress.last_progress_at = 23.0  # real work moved after the last refusal
    watch.observe(unreadable, 24.0)
    assert _phase(ledger) is Phase.AWAKE
    ledger.progress.last_progress_at = None
    _refused_at(ledger, 25.0)
    late = CanaryResult("text-canary", TEXT, Reason.TIMEOUT, 26.0, 8.0)  # newer, not a refusal
    watch.observe(unreadable, 26.0)
    assert _phase(ledger) is Phase.RECOVERING
    ledger.canary_done(TEXT, ledger.canary_sent(TEXT, 26.0), late, 34.0, epoch=0)
    watch.observe(unreadable, 34.0)
    assert _phase(ledger) is Phase.AWAKE  # the run is no longer current: the engine rule's


def _flapping(now: float) -> str:
    """Unhealthy 20 s, healthy 10 s, again: an orchestrator's retry that never holds."""
    return "unhealthy" if now >= 20 and (now - 20) % 30 < 20 else "healthy"


def test_recovery_flapping_keeps_the_clock_until_something_is_served() -> None:
    seen = _run(_flapping, until=170, fault=(20, 10**6), refused=True)
    red = [t for t, live, *_ in seen if not live]
    assert red
    assert red[0] == 20 + 120 + 10
    assert HangKind.FAULT_TOLERANCE in seen[-1][4]
    assert all(ready is False for t, _, ready, *_ in seen if t >= 20)


def test_a_recovery_that_served_after_healthy_starts_a_new_clock() -> None:
    ledger = Ledger([(TEXT, Action.RESTART, None)], 0.0)
    watch = FaultToleranceWatch(ledger, lambda: 0.0, timeout=120.0, grace=10.0)
    watch.observe(FtPoll(_engines("unhealthy"), "/x"), 0.0)
    watch.observe(FtPoll(_engines("healthy"), "/x"), 10.0)
    assert _phase(ledger) is Phase.AWAKE  # windows start again at healthy
    watch.observe(FtPoll(_engines("unhealthy"), "/x"), 20.0)
    assert watch.section(20.0).held_since == 0.0
    watch.observe(FtPoll(_engines("healthy"), "/x"), 30.0)
    ledger.progress.last_progress_at = 32.0
    watch.observe(FtPoll(_engines("healthy"), "/x"), 33.0)
    watch.observe(FtPoll(_engines("unhealthy"), "/x"), 40.0)
    assert watch.section(40.0).held_since == 40.0
    ok = CanaryResult("text-canary", TEXT, Reason.OK, 44.0, 0.2)
    watch.observe(FtPoll(_engines("healthy"), "/x"), 43.0)
    ledger.canary_done(TEXT, ledger.canary_sent(TEXT, 44.0), ok, 44.2, epoch=0)
    watch.observe(FtPoll(_engines("unhealthy"), "/x"), 50.0)
    assert watch.section(50.0).held_since == 50.0


def test_the_config_flag_alone_does_not_turn_the_status_route_on() -> None:
    # vLLM registers the route only for the parsed --enable-fault-tolerance.
    config = ["vllm", "serve", "--fault-tolerance-config", '{"engine_recovery_timeout_sec": 60}']
    assert fault_tolerance_flags(config) == (False, 60.0)


def test_both_routes_404_are_not_asked_every_step_even_with_the_flag_on() -> None:
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        return httpx.Response(404)

    poller, now = _poller(handler)
    ledger = Ledger([(TEXT, Action.RESTART, None)], 0.0)
    watch = FaultToleranceWatch(ledger, lambda: now[0], timeout=120.0, grace=10.0)
    watch._flags = lambda: (True, None)  # type: ignore[method-assign]
    step = watch.step(poller)

    async def once() -> None:
        await step()

    asyncio.run(once())
    assert len(asked) == 2
    for second in range(2, 60, 2):
        now[0] = float(second)
        asyncio.run(once())
    assert len(asked) == 2
    assert "both status routes answer 404" in watch.section(now[0]).cannot_tell
    now[0] = ABSENT_RETRY + 1
    asyncio.run(once())
    assert len(asked) == 4


def test_deeply_nested_json_is_not_the_status() -> None:
    assert parse_status(b"[" * 2000) is None
    assert parse_status(b'{"engines": [], "x": ' + b"[" * 2000 + b"]" * 2000 + b"}") is None
    nested = '{"engine_recovery_timeout_sec": 5, "x": ' + "[" * 2000 + "]" * 2000 + "}"
    cmdline = ["vllm", "--enable-fault-tolerance", "--fault-tolerance-config", nested]
    assert fault_tolerance_flags(cmdline) == (True, None)
