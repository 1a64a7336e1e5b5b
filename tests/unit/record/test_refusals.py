"""A deliberate refusal is a state, not a hang (docs/design.md, "A deliberate refusal is a state").

Both directions on the pure verdict with a virtual clock: a server refusing in
words sentinel knows is judged by that state's rule (paused: the lifecycle),
one refusing in unknown words is unready at once with the body quoted and
restarted only past ``refusal_bound``; a hung engine in the same clothes (its
canaries unanswered, not refused) is still an engine hang.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from sentinel.canary.catalog import load_catalog
from sentinel.canary.refusal import Refusal
from sentinel.canary.replies import status_failure, stream_failure
from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.runner import CanaryRunner
from sentinel.canary.spec import CanaryKind
from sentinel.evaluation.refusal_events import RefusalNotices
from sentinel.evidence.metrics import MetricsSample
from sentinel.record.ledger import Ledger
from sentinel.record.lifecycle import LifecycleTracker, Readings
from sentinel.record.refusals import Refusals
from sentinel.telemetry.events import EventReason
from sentinel.telemetry.metrics import SentinelMetrics
from sentinel.verdict import (
    Action,
    Evidence,
    KindEvidence,
    Lifecycle,
    Phase,
    Policy,
    VerdictState,
    evaluate,
)
from sentinel.verdict.answers import fast_failure, unanswered
from sentinel.verdict.hangs.weight_update import WEIGHT_UPDATE_WHY
from sentinel.verdict.model import HangKind

TEXT = CanaryKind.TEXT
PAUSED = "Generation is paused. Please retry after it resumes."
UNKNOWN = "Model swap in progress; come back in a bit."
CATALOG = load_catalog()


def error_body(message: str, code: int = 503, kind: str = "ServiceUnavailableError") -> bytes:
    return json.dumps(
        {"error": {"message": message, "type": kind, "param": None, "code": code}}
    ).encode()


def sse(*chunks: Any) -> bytes:
    return ("".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n").encode()


# -- reading the answer ------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "reason", "refusal"),
    [
        (PAUSED, Reason.REFUSED, Refusal.PAUSED),
        (UNKNOWN, Reason.REFUSED, Refusal.UNKNOWN),
        (
            "The model is currently scaling. Please try again later.",
            Reason.REFUSED,
            Refusal.SCALING,
        ),
        (
            "The engine is currently busy and cannot accept new requests.",
            Reason.ADMISSION,
            Refusal.ADMISSION,
        ),
    ],
)
def test_a_503_body_is_read_as_its_refusal(message: str, reason: Reason, refusal: Refusal) -> None:
    failure = status_failure(503, error_body(message), None)
    assert (failure.reason, failure.refusal, failure.http_status) == (reason, refusal, 503)


def test_a_streamed_error_is_classified_on_its_code_not_its_type() -> None:
    """vLLM's chat stream calls the paused 503 an InternalServerError: the code decides."""
    chunk = json.loads(error_body(PAUSED, kind="InternalServerError"))
    failure = stream_failure(chunk)
    assert (failure.reason, failure.refusal, failure.http_status) == (
        Reason.REFUSED,
        Refusal.PAUSED,
        503,
    )
    unknown = stream_failure(json.loads(error_body(UNKNOWN, kind="InternalServerError")))
    assert unknown.refusal is Refusal.UNKNOWN
    # An unknown error with code 500 is no refusal: an HTTP failure, unanswered.
    broken = stream_failure(json.loads(error_body("boom", code=500)))
    assert (broken.reason, broken.refusal) == (Reason.HTTP_STATUS, None)


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(
            503, content=error_body(PAUSED), headers={"content-type": "application/json"}
        ),
        httpx.Response(
            200,
            content=sse(json.loads(error_body(PAUSED, kind="InternalServerError"))),
            headers={"content-type": "text/event-stream"},
        ),
    ],
    ids=["body", "stream"],
)
async def test_the_runner_carries_the_refusal_of_a_body_and_of_a_stream(
    answer: httpx.Response,
) -> None:
    spec = CATALOG.get("text")
    assert spec.stream
    async with httpx.AsyncClient(transport=httpx.MockTransport(lambda _: answer)) as client:
        result = await CanaryRunner(client, "http://t.invalid").run(spec, model="m", deadline=5)
    assert (result.reason, result.refusal, result.http_status) == (
        Reason.REFUSED,
        Refusal.PAUSED,
        503,
    )
    assert PAUSED in result.detail


def test_a_refusal_is_neither_unanswered_nor_a_fast_failure() -> None:
    refused = CanaryResult(
        "t", TEXT, Reason.REFUSED, 1.0, 0.01, http_status=503, refusal=Refusal.UNKNOWN
    )
    assert not unanswered(refused)
    assert not fast_failure(refused)


# -- the evidence ------------------------------------------------------------


def refused(at: float, message: str = UNKNOWN, refusal: Refusal = Refusal.UNKNOWN) -> CanaryResult:
    return CanaryResult(
        "text-canary",
        TEXT,
        Reason.REFUSED,
        at,
        0.01,
        f"HTTP 503: {message}",
        http_status=503,
        refusal=refusal,
    )


def ok(at: float) -> CanaryResult:
    return CanaryResult("text-canary", TEXT, Reason.OK, at, 0.2, ttft=0.05)


def test_a_run_keeps_its_start_past_any_history_and_a_success_ends_it() -> None:
    runs = Refusals()
    for t in range(0, 300, 5):
        runs.saw(refused(float(t)))
    seen = runs.frozen()[Refusal.UNKNOWN]
    assert (seen.since, seen.count, seen.message, seen.source) == (0.0, 60, UNKNOWN, "text")
    runs.saw(CanaryResult("text-canary", TEXT, Reason.TIMEOUT, 301.0, 5.0))
    assert Refusal.UNKNOWN in runs.frozen()  # a failure does not end it
    runs.saw(ok(310.0))
    assert dict(runs.frozen()) == {}


def test_the_paused_refusal_is_a_lifecycle_source() -> None:
    runs = Refusals()
    runs.saw(refused(1.0, PAUSED, Refusal.PAUSED))
    assert runs.paused == PAUSED
    tracker = LifecycleTracker()
    life = tracker.update(Readings(paused_refusal=runs.paused), 1.0)
    assert life.phase is Phase.PAUSED
    assert "Generation is paused" in life.why
    runs.saw(ok(2.0))
    assert runs.paused is None
    assert tracker.update(Readings(paused_refusal=runs.paused), 2.0).phase is Phase.AWAKE


# -- the verdict -------------------------------------------------------------


def evidence(results: tuple[CanaryResult, ...], now: float, **changes: Any) -> Evidence:
    runs = Refusals()
    for r in results:
        runs.saw(r)
    fields: dict[str, Any] = {
        "kinds": {TEXT: KindEvidence(TEXT, results=results[-50:])},
        "progress_available": True,
        "last_progress_at": 0.5,
        "last_evidence_at": now,
        "sampled_at": now,
        "refusals": runs.frozen(),
    }
    fields.update(changes)
    return Evidence(**fields)


def run(
    results_at: Any, until: float, policy: Policy, step: float = 5.0
) -> list[tuple[float, Any]]:
    state, seen, now = VerdictState(), [], 1.0
    while now <= until:
        state, verdict = evaluate(state, evidence(results_at(now), now), policy, now)
        seen.append((now, verdict))
        now += step
    return seen


def unknown_from(start: float) -> Any:
    """Serving until ``start``, then every canary refused in unknown words (one every 5 s)."""

    def at(now: float) -> tuple[CanaryResult, ...]:
        return tuple(ok(t) if t < start else refused(t) for t in range(0, int(now), 5))

    return at


def test_an_unknown_refusal_is_unready_at_once_and_live_for_five_minutes() -> None:
    seen = run(unknown_from(20.0), 20.0 + 300.0, Policy())
    assert all(v.liveness.ok for _, v in seen)
    red = [(t, v.readiness.reason) for t, v in seen if t > 22.0]
    assert red
    assert all(not v.readiness.ok for t, v in seen if t > 22.0)
    assert "cannot tell" in red[-1][1]
    assert UNKNOWN in red[-1][1]
    assert "HTTP 503" in red[-1][1]


def test_an_unknown_refusal_past_its_bound_is_a_restart() -> None:
    seen = run(unknown_from(20.0), 120.0, Policy(refusal_bound=60.0))
    first = next(t for t, v in seen if not v.liveness.ok)
    assert 80.0 <= first <= 86.0  # the bound counted from the first refusal's send
    hang = next(v for t, v in seen if t == first).hangs[0]
    assert hang.kind is HangKind.REFUSED
    assert UNKNOWN in hang.reason


def test_a_hung_engine_in_the_same_clothes_is_still_an_engine_hang() -> None:
    """Unanswered canaries (timeouts) are no refusal: the engine rule confirms as before."""

    def at(now: float) -> tuple[CanaryResult, ...]:
        return tuple(
            ok(t) if t < 20 else CanaryResult("text-canary", TEXT, Reason.TIMEOUT, t, 5.0)
            for t in range(0, int(now) - 5, 5)
        )

    seen = run(at, 120.0, Policy())
    first = next(v for t, v in seen if not v.liveness.ok)
    assert first.hangs[0].kind is HangKind.ENGINE


def test_a_canary_refused_after_one_unanswered_ends_the_engine_rules_run() -> None:
    results = (
        ok(0.0),
        CanaryResult("text-canary", TEXT, Reason.TIMEOUT, 5.0, 5.0),
        *tuple(refused(float(t), PAUSED, Refusal.PAUSED) for t in range(11, 100, 5)),
    )
    _, verdict = evaluate(
        VerdictState(epoch=0, startup_passed=True), evidence(results, 100.0), Policy(), 100.0
    )
    assert verdict.liveness.ok, verdict.liveness.reason
    assert not any(h.kind is HangKind.ENGINE for h in verdict.hangs)


def test_known_refusals_are_not_cannot_tell() -> None:
    results = (ok(0.0), *(refused(float(t), PAUSED, Refusal.PAUSED) for t in range(5, 60, 5)))
    life = Lifecycle(Phase.PAUSED, 5.0, f"canaries refused: {PAUSED}")
    _, verdict = evaluate(
        VerdictState(epoch=0, startup_passed=True),
        evidence(results, 60.0, lifecycle=life),
        Policy(),
        60.0,
    )
    assert verdict.liveness.ok
    assert verdict.readiness.reason.startswith("paused: canaries refused: Generation is paused")


# -- a start paused (vLLM 0.34 --checkpoint-prepare-on-startup) --------------


def test_a_server_started_paused_passes_startup_and_stays_unready() -> None:
    results = tuple(refused(float(t), PAUSED, Refusal.PAUSED) for t in range(0, 60, 5))
    life = Lifecycle(Phase.PAUSED, 1.0, "/is_paused is true")
    state, verdict = evaluate(
        VerdictState(), evidence(results, 60.0, lifecycle=life), Policy(), 60.0
    )
    assert verdict.startup.ok
    assert "started paused" in verdict.startup.reason
    assert not state.startup_passed
    assert not verdict.readiness.ok
    assert "started paused" in verdict.readiness.reason
    assert verdict.liveness.ok
    # Without the pause the same refusals earn no startup.
    _, plain = evaluate(VerdictState(), evidence(results[:1], 60.0), Policy(), 60.0)
    assert not plain.startup.ok


def test_a_server_that_never_resumes_is_reported_past_the_pause_bound_not_restarted() -> None:
    results = tuple(refused(float(t), PAUSED, Refusal.PAUSED) for t in range(0, 1000, 5))
    life = Lifecycle(Phase.PAUSED, 1.0, "/is_paused is true")
    _, verdict = evaluate(
        VerdictState(), evidence(results, 1000.0, lifecycle=life), Policy(), 1000.0
    )
    assert verdict.liveness.ok
    assert [h.kind for h in verdict.hangs] == [HangKind.PAUSED]


# -- the Event and the metric ------------------------------------------------


def test_an_unknown_refusal_is_announced_once_per_run() -> None:
    notices = RefusalNotices()
    first = evidence((ok(0.0), refused(5.0), refused(10.0)), 11.0)
    said = notices.new(first)
    assert [n.reason for n in said] == [EventReason.UNKNOWN_REFUSAL]
    assert UNKNOWN in said[0].message
    assert "cannot tell" in said[0].message
    assert notices.new(evidence((ok(0.0), refused(5.0), refused(10.0), refused(15.0)), 16.0)) == []
    assert notices.new(evidence((ok(20.0),), 21.0)) == []  # a success ends the run
    assert len(notices.new(evidence((ok(20.0), refused(25.0)), 26.0))) == 1  # a new one is news
    paused = evidence((refused(5.0, PAUSED, Refusal.PAUSED),), 6.0)
    assert notices.new(paused) == []  # a known refusal is its state's business


def test_refusals_are_counted_by_kind_and_state() -> None:
    metrics = SentinelMetrics(CollectorRegistry())
    metrics.observe_canary(refused(1.0))
    metrics.observe_canary(refused(2.0, PAUSED, Refusal.PAUSED))
    metrics.observe_canary(ok(3.0))
    labels = {"kind": "text", "refusal": "unknown"}
    assert metrics.registry.get_sample_value("sentinel_canary_refusals_total", labels) == 1.0
    labels["refusal"] = "faulted"  # every state's series exists from the start
    assert metrics.registry.get_sample_value("sentinel_canary_refusals_total", labels) == 0.0


def test_an_empty_503_is_no_refusal() -> None:
    failure = status_failure(503, b"", None)
    assert (failure.reason, failure.refusal) == (Reason.HTTP_STATUS, None)
    assert unanswered(CanaryResult("t", TEXT, failure.reason, 1.0, 0.01, http_status=503))


def test_asleep_or_paused_an_unknown_refusal_is_the_states_answer() -> None:
    """A sleep answering 503 in its own words: held by the sleep, never the refusal bound."""
    results = (ok(0.0), *(refused(float(t)) for t in range(5, 1000, 5)))
    life = Lifecycle(Phase.ASLEEP, 3.0, "/is_sleeping is true")
    ev = evidence(results, 1000.0, lifecycle=life)
    _, verdict = evaluate(VerdictState(epoch=0, startup_passed=True), ev, Policy(), 1000.0)
    assert verdict.liveness.ok
    assert verdict.readiness.reason.startswith("asleep")
    assert RefusalNotices().new(ev) == []


# -- a pause read from refusals ends (defect: it never lifted) ----------------


def _paused_then_resumed_under_traffic() -> tuple[Ledger, list[tuple[float, Any]]]:
    """Paused by refusals (canaries at 0, 5, 10), /resume at 12, real traffic after it and
    no canary at all (the text canary is idle-gated by it): what the evidence says every 2 s."""
    ledger = Ledger([(TEXT, Action.RESTART, None)], 0.0)
    ledger.startup_judged(True)
    for t in (0.0, 5.0, 10.0):
        token = ledger.canary_sent(TEXT, t)
        ledger.canary_done(TEXT, token, refused(t, PAUSED, Refusal.PAUSED), t + 0.01, epoch=0)
    seen: list[tuple[float, Any]] = [(11.0, ledger.evidence(11.0, 5.0))]
    for i, t in enumerate(range(12, 40, 2)):
        sample = MetricsSample(float(t), counters={"completions": 100.0 + 3 * i})
        ledger.progress.observe(sample)
        seen.append((float(t), ledger.evidence(float(t), 5.0)))
    return ledger, seen


def test_a_pause_read_from_refusals_lifts_under_real_traffic_without_a_canary() -> None:
    _, seen = _paused_then_resumed_under_traffic()
    phase = {t: ev.lifecycle.phase for t, ev in seen}
    assert phase[11.0] is Phase.PAUSED
    assert phase[18.0] is Phase.PAUSED  # its word kept KEEP_WORD (10 s) past the last refusal
    assert all(p is Phase.AWAKE for t, p in phase.items() if t >= 22.0), phase
    assert seen[0][1].refusals  # the paused run, while refusing
    # Real progress after the last refusal ends the run: the server serves again.
    assert all(not ev.refusals for t, ev in seen if t >= 14.0)


def test_after_a_pause_read_from_refusals_readiness_comes_back() -> None:
    ledger, seen = _paused_then_resumed_under_traffic()
    state = VerdictState(epoch=0, startup_passed=True)
    for t, ev in seen:
        state, verdict = evaluate(state, ev, Policy(), t)
    assert verdict.readiness.reason.startswith("resumed; waiting for canary kinds: text")
    # The text canary the scheduler no longer holds back (test_scheduler) passes once:
    # ready again, the paused refusals no degradation of their own.
    token = ledger.canary_sent(TEXT, 40.0)
    ledger.canary_done(TEXT, token, ok(40.0), 40.2, epoch=0)
    state, verdict = evaluate(state, ledger.evidence(41.0, 5.0), Policy(), 41.0)
    assert (verdict.readiness.ok, verdict.readiness.reason) == (True, "serving")


@pytest.mark.parametrize(
    ("why", "refusing", "passes"),
    [
        (f"canaries refused: {PAUSED}", True, True),
        ("/is_paused is true", False, True),
        ("maintenance window: rl step 7", False, False),
        (WEIGHT_UPDATE_WHY, False, False),
        ("maintenance window: rl step 7", True, True),  # the server says so too
    ],
    ids=["refused-paused", "is-paused", "maintenance", "weight-update", "maintenance-and-refused"],
)
def test_only_the_servers_own_pause_passes_startup(why: str, refusing: bool, passes: bool) -> None:
    """A pause sentinel was told of, not one the loaded server answers with, is no startup:
    a model load that hangs under a maintenance window must still fail startup."""
    results = (
        tuple(refused(float(t), PAUSED, Refusal.PAUSED) for t in range(0, 60, 5))
        if refusing
        else (CanaryResult("text-canary", TEXT, Reason.CONNECT, 55.0, 0.01, "refused"),)
    )
    life = Lifecycle(Phase.PAUSED, 1.0, why)
    _, verdict = evaluate(VerdictState(), evidence(results, 60.0, lifecycle=life), Policy(), 60.0)
    assert verdict.startup.ok is passes, verdict.startup.reason
    assert not verdict.readiness.ok


async def test_a_refused_multimodal_baseline_keeps_its_refusal_state() -> None:
    """The baseline (the prompt without its image) refused as paused is a paused refusal
    (a run and the lifecycle's word), not a REFUSED result with no state."""

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        imaged = any(isinstance(m.get("content"), list) for m in body.get("messages", []))
        if not imaged:
            return httpx.Response(
                503, content=error_body(PAUSED), headers={"content-type": "application/json"}
            )
        usage = {"prompt_tokens": 900, "completion_tokens": 2}
        choice = {"message": {"content": "red"}, "finish_reason": "stop"}
        if body.get("stream"):
            chunks = [
                {"choices": [{"delta": {"content": "red"}, "finish_reason": "stop"}]},
                {"choices": [], "usage": usage},
            ]
            return httpx.Response(
                200, content=sse(*chunks), headers={"content-type": "text/event-stream"}
            )
        return httpx.Response(200, json={"choices": [choice], "usage": usage})

    spec = CATALOG.get("multimodal")
    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        result = await CanaryRunner(client, "http://t.invalid").run(spec, model="m", deadline=5)
    assert (result.reason, result.refusal) == (Reason.REFUSED, Refusal.PAUSED), result.detail
    assert result.detail.startswith("baseline (no image)")
