"""Elastic EP scaling and compiler storms against hangs in the same clothes, on a virtual clock.

A scale answers every path 503 for 40-55 s (vLLM's scaling middleware); a
Triton autotuning storm runs sub-second ``ptxas`` children that most process
samples miss. Both are work; a scale that never ends and a hang after the
storm are not. Times are plain seconds; nothing sleeps or reads a clock.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace

import httpx
import pytest

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.evidence.compilers import CompilerProcess, CompileWatch
from sentinel.evidence.vllm_health import VllmHealthPoller
from sentinel.record.lifecycle import LifecycleTracker, Readings, phase_of
from sentinel.verdict import (
    Action,
    Evidence,
    HangKind,
    KindEvidence,
    Lifecycle,
    Phase,
    Policy,
    VerdictState,
    evaluate,
)
from sentinel.verdict.stall import COMPILE, CompileSection

TEXT = CanaryKind.TEXT
SCALING_BODY = {"error": "The model is currently scaling. Please try again later."}


def ok(sent: float) -> CanaryResult:
    return CanaryResult("text-canary", TEXT, Reason.OK, sent, 0.3)


def refused(sent: float) -> CanaryResult:
    """A canary the scaling middleware answered 503 at once."""
    return CanaryResult("text-canary", TEXT, Reason.HTTP_STATUS, sent, 0.01, http_status=503)


def timeout(sent: float) -> CanaryResult:
    return CanaryResult("text-canary", TEXT, Reason.TIMEOUT, sent, 8.0)


Seen = list[tuple[float, bool, bool, str, str]]


def run(end: float, evidence_at: Callable[[float], Evidence], policy: Policy) -> Seen:
    """Evaluate every second: (now, live, ready, liveness reason, readiness reason)."""
    state, seen = VerdictState(), []
    for now in range(2, int(end) + 1):
        state, verdict = evaluate(state, evidence_at(float(now)), policy, float(now))
        live, ready = verdict.liveness, verdict.readiness
        seen.append((float(now), live.ok, ready.ok, live.reason, ready.reason))
    return seen


def first_red(seen: Seen) -> float | None:
    return next((t for t, live, *_ in seen if not live), None)


# --- elastic EP scaling ---------------------------------------------------------


async def _poll(status: int, body: bytes) -> tuple[bool, bool]:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        poll = await VllmHealthPoller(client, "http://vllm", lambda: 0.0).poll()
    return poll.scaling, poll.failing


async def test_the_scaling_503_is_a_scale_and_any_other_503_is_death() -> None:
    assert await _poll(503, json.dumps(SCALING_BODY).encode()) == (True, False)
    assert await _poll(503, b"") == (False, True)
    assert await _poll(503, b'{"error": "engine dead"}') == (False, True)
    assert await _poll(200, b"The model is currently scaling") == (False, False)


def test_the_scaling_reading_is_a_phase_of_its_own_and_its_end_a_resume() -> None:
    assert phase_of(Readings(scaling=True))[0] is Phase.SCALING
    assert phase_of(Readings(scaling=False))[0] is Phase.AWAKE
    tracker = LifecycleTracker()
    assert tracker.update(Readings(scaling=True), 10.0).phase is Phase.SCALING
    back = tracker.update(Readings(scaling=False), 55.0)
    assert (back.phase, back.resumed_at) == (Phase.AWAKE, 55.0)


def scale(start: float, end: float | None) -> Callable[[float], Evidence]:
    """A working server: canaries pass, then 503 at once while it scales, then pass again."""

    def at(now: float) -> Evidence:
        scaling = now >= start and (end is None or now < end)
        results = tuple(
            (refused(t) if start <= t and (end is None or t < end) else ok(t))
            for t in range(1, int(now))
        )
        if scaling:
            life = Lifecycle(Phase.SCALING, start, "/health answers 503: scaling")
        elif end is not None and now >= end:
            life = Lifecycle(Phase.AWAKE, end, "", resumed_at=end)
        else:
            life = Lifecycle()
        # Every scrape answers 503 while it scales: no fresh progress evidence.
        fresh = not scaling
        return Evidence(
            kinds={TEXT: KindEvidence(TEXT, results=results)},
            progress_available=fresh,
            last_progress_at=now - 0.5 if fresh else start,
            last_evidence_at=now if fresh else start,
            sampled_at=now if fresh else start,
            lifecycle=life,
        )

    return at


def test_a_45s_scale_keeps_liveness_and_names_itself_on_readiness() -> None:
    seen = run(120.0, scale(20.0, 65.0), Policy())
    assert first_red(seen) is None
    during = [(ready, why) for t, _, ready, _, why in seen if 21.0 <= t < 65.0]
    assert not any(ready for ready, _ in during)
    assert during[-1][1].startswith("scaling (elastic EP) for 44s")
    assert any(ready for t, _, ready, _, _ in seen if t > 70.0)  # ready again after it


def test_a_scale_that_never_ends_is_a_restart_at_its_bound() -> None:
    seen = run(400.0, scale(20.0, None), Policy())
    assert first_red(seen) == 260.0  # the 240 s bound, counted from the scale's start
    reason = next(why for t, live, _, why, _ in seen if not live)
    assert "scaling (elastic EP) for 240s: the scale did not end" in reason
    _, verdict = evaluate(VerdictState(), scale(20.0, None)(270.0), Policy(), 270.0)
    assert [h.kind for h in verdict.hangs] == [HangKind.SCALING]
    bounded = run(120.0, scale(20.0, None), Policy(scale_bound=60.0, scaling_policy=Action.ALERT))
    assert first_red(bounded) is None  # an alert only, where chosen


def test_a_dead_engine_while_scaling_is_still_dead() -> None:
    def at(now: float) -> Evidence:
        return replace(scale(20.0, None)(now), engine_down_since=30.0)

    red = first_red(run(60.0, at, Policy()))
    assert red is not None
    assert red <= 36.0


# --- compiler storms ---------------------------------------------------------------


def ptxas(pid: int, cpu: float = 0.2) -> CompilerProcess:
    return CompilerProcess(pid, "ptxas", cpu, 100)


def test_a_compiler_seen_once_counts_and_an_idle_one_stops_counting() -> None:
    watch = CompileWatch()
    watch.observe([ptxas(501)], 1.0)  # new since the last sample: it ran
    assert (watch.since, watch.seen_at) == (1.0, 1.0)
    watch.observe([], 2.0)
    watch.observe([ptxas(502)], 3.0)
    assert (watch.since, watch.seen_at, watch.seen) == (1.0, 3.0, 2)
    watch.observe([ptxas(502)], 4.0)  # the same pid, no CPU since: idle, not busy
    assert watch.seen_at == 3.0
    watch.observe([ptxas(503)], 40.0)  # after a gap longer than a storm's: another compile
    assert (watch.since, watch.seen_at, watch.seen) == (40.0, 40.0, 1)


def storm_then(hang_after: float | None, seconds: float = 120.0) -> Callable[[float], Evidence]:
    """A 120 s step of sub-second compilers seen in one sample of three; then the engine hangs.

    The canaries time out through the step (the engine takes no step while it
    compiles); with ``hang_after`` they keep timing out after it, else they pass.
    """
    watch = CompileWatch()
    samples: dict[float, tuple[float | None, float | None]] = {}
    pid = 1000
    for t in range(1, 600):
        in_storm = 10.0 <= t < 10.0 + seconds
        pid += 1
        watch.observe([ptxas(pid)] if in_storm and t % 3 == 0 else [], float(t))
        samples[float(t)] = (watch.since, watch.seen_at)

    def at(now: float) -> Evidence:
        end = 10.0 + seconds
        results: list[CanaryResult] = [ok(1.0)]
        t = 10.0
        while t + 8.0 <= now:
            results.append(timeout(t) if t < end or hang_after is not None else ok(t))
            t += 9.0
        since, seen = samples[now]
        return Evidence(
            kinds={TEXT: KindEvidence(TEXT, results=tuple(results))},
            progress_available=True,
            last_progress_at=0.5 if hang_after is not None or now < end else now,
            last_evidence_at=now,
            sampled_at=now,
            sections={COMPILE.name: CompileSection(since, seen, "ptxas")},
        )

    return at


def test_a_storm_of_subsecond_compilers_holds_the_engine_rules() -> None:
    assert first_red(run(300.0, storm_then(None), Policy())) is None


@pytest.mark.parametrize("linger", [5.0, 10.0])
def test_a_hang_after_the_storm_is_red_soon_after_the_last_compiler(linger: float) -> None:
    red = first_red(run(300.0, storm_then(hang_after=130.0), Policy(compile_linger=linger)))
    assert red is not None
    last_seen = 129.0  # the storm's last sample that saw a compiler (t % 3 == 0)
    assert last_seen + linger < red <= last_seen + linger + 2.0


def test_a_storm_is_bounded_by_the_compile_grace() -> None:
    red = first_red(run(300.0, storm_then(None, seconds=250.0), Policy(compile_grace=60.0)))
    assert red is not None
    assert 12.0 + 60.0 <= red <= 12.0 + 62.0  # the storm's first compiler seen at 12 s
