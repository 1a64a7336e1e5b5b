"""The verdict against docs/design.md's "Verdict semantics", on a virtual clock.

Every time below is a plain number of seconds; nothing sleeps or reads a clock.
Defaults come from the README's defaults table: text deadline 8 s, structured and
multimodal 10 s, hang window H 15 s, 30 s without progress evidence, readiness
out after 2 bad results and back after 3 good ones, brake after 3 restarts an
hour.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import pytest

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.telemetry.metrics import hang_kinds
from sentinel.verdict import (
    Action,
    Evidence,
    Hang,
    HangKind,
    KindEvidence,
    Policy,
    Verdict,
    VerdictState,
    evaluate,
)

TEXT = CanaryKind.TEXT
STRUCTURED = CanaryKind.STRUCTURED
MULTIMODAL = CanaryKind.MULTIMODAL
DEADLINE = {TEXT: 8.0, STRUCTURED: 10.0, MULTIMODAL: 10.0}

# --- building evidence ---------------------------------------------------------


def ok(sent: float, kind: CanaryKind = TEXT, took: float = 0.3) -> CanaryResult:
    return CanaryResult(f"{kind}-canary", kind, Reason.OK, started=sent, duration=took)


def timeout(sent: float, kind: CanaryKind = TEXT) -> CanaryResult:
    """A canary sent at ``sent`` that missed its deadline (so it ends at sent + deadline)."""
    return CanaryResult(f"{kind}-canary", kind, Reason.TIMEOUT, sent, DEADLINE[kind])


def failed(
    sent: float, reason: Reason, kind: CanaryKind = TEXT, status: int | None = None
) -> CanaryResult:
    if status is None and reason is Reason.HTTP_STATUS:
        status = 500
    return CanaryResult(
        f"{kind}-canary", kind, reason, started=sent, duration=0.2, http_status=status
    )


def text(*results: CanaryResult, outstanding: Sequence[float] = ()) -> KindEvidence:
    return KindEvidence(TEXT, results=results, outstanding=tuple(outstanding))


Pair = tuple[CanaryResult, CanaryResult | None]


def pair(sent: float, kind: CanaryKind, path: Reason, control: Reason | None = Reason.OK) -> Pair:
    """A path canary sent at ``sent`` and its text control sent alongside it."""
    duration = DEADLINE[kind] if path is Reason.TIMEOUT else 0.5
    result = CanaryResult(f"{kind}-canary", kind, path, sent, duration)
    if control is None:
        return result, None
    control_duration = DEADLINE[TEXT] if control is Reason.TIMEOUT else 0.3
    return result, CanaryResult("text-control", TEXT, control, sent, control_duration)


def path_kind(
    kind: CanaryKind, pairs: Sequence[Pair], action: Action = Action.RESTART
) -> KindEvidence:
    return KindEvidence(
        kind,
        path=kind != TEXT,
        action=action,
        results=tuple(r for r, _ in pairs),
        controls=tuple(c for _, c in pairs),
    )


def path_evidence(
    kind: CanaryKind, pairs: Sequence[Pair], action: Action = Action.RESTART
) -> Evidence:
    """Startup already passed at t=90; text controls also count as text results."""
    warmup = pair(90.0, kind, Reason.OK)
    all_pairs = [warmup, *pairs]
    controls = tuple(c for _, c in all_pairs if c is not None)
    return evidence(
        KindEvidence(TEXT, results=controls),
        path_kind(kind, all_pairs, action),
        progress_at=None,
    )


def unsupported_multimodal() -> KindEvidence:
    """What the daemon reports after the model answered 400 to an image."""
    result = failed(1.0, Reason.UNSUPPORTED, MULTIMODAL)
    return KindEvidence(MULTIMODAL, path=True, enabled=False, results=(result,))


def evidence(
    *kinds: KindEvidence,
    progress_at: float | None = None,
    metrics: bool = True,
    epoch: int = 0,
    epoch_started: float = 0.0,
    health_failing_since: float | None = None,
    engine_down_since: float | None = None,
    engine_down_detail: str = "",
    engine_down_stopped: bool = False,
    evidence_at: float | None = None,
    real_completion_at: float | None = None,
    refused_since: float | None = None,
    api_alive: bool | None = None,
    unobserved: tuple[tuple[float, float], ...] = (),
) -> Evidence:
    return Evidence(
        epoch=epoch,
        epoch_started=epoch_started,
        kinds={k.kind: k for k in kinds},
        progress_available=metrics,
        last_progress_at=progress_at,
        health_failing_since=health_failing_since,
        engine_down_since=engine_down_since,
        engine_down_detail=engine_down_detail,
        engine_down_stopped=engine_down_stopped,
        last_evidence_at=evidence_at,
        last_real_completion_at=real_completion_at,
        refused_since=refused_since,
        api_alive=api_alive,
        unobserved=unobserved,
    )


@dataclass
class Sidecar:
    """Carries the verdict state from one evaluation to the next, as the daemon does."""

    policy: Policy = field(default_factory=Policy)
    state: VerdictState = field(default_factory=VerdictState)

    def at(self, now: float, ev: Evidence) -> Verdict:
        self.state, verdict = evaluate(self.state, ev, self.policy, now)
        return verdict


def once(ev: Evidence, now: float, policy: Policy | None = None) -> Verdict:
    return Sidecar(policy or Policy()).at(now, ev)


def hang_of(verdict: Verdict, kind: HangKind) -> Hang | None:
    return next((h for h in verdict.hangs if h.kind is kind), None)


# --- 1. liveness from the start, startup ---------------------------------------


def test_liveness_is_green_on_the_first_evaluation_without_any_result() -> None:
    verdict = once(evidence(text()), now=0.0)
    assert verdict.liveness.ok
    assert not verdict.startup.ok
    assert not verdict.readiness.ok
    assert verdict.hangs == ()


STARTUP_CASES = [
    pytest.param(evidence(text()), False, "text", id="no-result-yet"),
    pytest.param(
        evidence(text(failed(1, Reason.HTTP_STATUS, status=401))), False, "text", id="text-failed"
    ),
    pytest.param(evidence(text(timeout(50))), False, "text", id="text-timed-out"),
    pytest.param(evidence(text(ok(1))), True, None, id="text-ok"),
    pytest.param(
        evidence(text(ok(1)), KindEvidence(STRUCTURED, path=True)),
        False,
        "structured",
        id="structured-still-missing",
    ),
    pytest.param(
        evidence(
            text(ok(1)), KindEvidence(STRUCTURED, path=True, results=(failed(1, Reason.SCHEMA),))
        ),
        False,
        "structured",
        id="structured-schema-failure",
    ),
    pytest.param(
        evidence(text(ok(1)), KindEvidence(STRUCTURED, path=True, results=(ok(2, STRUCTURED),))),
        True,
        None,
        id="every-kind-ok",
    ),
    pytest.param(
        evidence(
            text(ok(1)),
            KindEvidence(STRUCTURED, path=True, results=(ok(2, STRUCTURED),)),
            unsupported_multimodal(),
        ),
        True,
        None,
        id="disabled-multimodal-does-not-block",
    ),
    pytest.param(
        evidence(
            text(ok(1)),
            KindEvidence(
                MULTIMODAL, path=True, results=(failed(2, Reason.IMAGE_NOT_CONSUMED, MULTIMODAL),)
            ),
        ),
        False,
        "multimodal",
        id="enabled-multimodal-blocks",
    ),
    pytest.param(
        evidence(text(ok(40)), epoch=1, epoch_started=50.0),
        False,
        "text",
        id="ok-before-epoch-start",
    ),
    pytest.param(
        evidence(text(ok(50)), epoch=1, epoch_started=50.0),
        True,
        None,
        id="ok-at-epoch-start",
    ),
]


@pytest.mark.parametrize(("ev", "passes", "missing"), STARTUP_CASES)
def test_readiness_needs_an_ok_of_every_enabled_kind_in_this_epoch(
    ev: Evidence, passes: bool, missing: str | None
) -> None:
    verdict = once(ev, now=60.0)
    assert verdict.readiness.ok is passes
    assert verdict.liveness.ok
    # Startup needs the text canary alone: the server has shown that it serves.
    assert verdict.startup.ok is (missing != "text")
    if missing is not None:
        assert missing in (verdict.startup if missing == "text" else verdict.readiness).reason
        assert not verdict.readiness.ok


def test_startup_stays_passed_until_a_new_epoch() -> None:
    sidecar = Sidecar()
    assert not sidecar.at(1.0, evidence(text())).startup.ok
    assert sidecar.at(2.0, evidence(text(ok(1)))).startup.ok
    # Later failures, or the old success dropping out of the evidence, change nothing.
    later = sidecar.at(60.0, evidence(text(failed(50, Reason.HTTP_STATUS))))
    assert later.startup.ok
    assert later.startup.since == 2.0
    restarted = sidecar.at(70.0, evidence(text(ok(1)), epoch=1, epoch_started=65.0))
    assert not restarted.startup.ok
    assert restarted.startup.since == 70.0


def test_readiness_is_serving_once_startup_passed_and_nothing_is_wrong() -> None:
    verdict = once(evidence(text(ok(1))), now=2.0)
    assert verdict.readiness.ok
    assert verdict.readiness.reason == "serving"


# --- 2-4. engine hang ------------------------------------------------------------

ENGINE_HANG_CASES = [
    # Idle server with progress evidence: flat since 90, canary sent at 100, H = 15.
    pytest.param(evidence(text(timeout(100)), progress_at=90), 114.9, False, id="flat-at-114.9"),
    pytest.param(evidence(text(timeout(100)), progress_at=90), 115.0, True, id="flat-at-115"),
    pytest.param(evidence(text(timeout(100)), progress_at=None), 115.0, True, id="never-moved"),
    pytest.param(
        evidence(text(ok(90), timeout(100)), progress_at=80),
        115.0,
        True,
        id="success-before-send",
    ),
    pytest.param(
        evidence(text(ok(99, took=2.0), timeout(100)), progress_at=80),
        300.0,
        False,
        id="success-finishing-after-send",
    ),
    pytest.param(
        evidence(text(timeout(100), ok(110)), progress_at=80),
        300.0,
        False,
        id="success-sent-after",
    ),
    pytest.param(
        evidence(text(timeout(100)), progress_at=100.5),
        300.0,
        False,
        id="progress-after-send",
    ),
    pytest.param(
        evidence(text(timeout(100)), progress_at=99.5),
        115.0,
        True,
        id="progress-just-before-send",
    ),
    # A retry sent after the last progress: the window runs from the retry.
    pytest.param(
        evidence(text(timeout(100), timeout(108)), progress_at=104),
        122.9,
        False,
        id="retry-after-progress-at-122.9",
    ),
    pytest.param(
        evidence(text(timeout(100), timeout(108)), progress_at=104),
        123.0,
        True,
        id="retry-after-progress-at-123",
    ),
    # 3. A canary still in flight counts as unanswered.
    pytest.param(
        evidence(text(outstanding=[100]), progress_at=90), 114.9, False, id="outstanding-114.9"
    ),
    pytest.param(evidence(text(outstanding=[100]), progress_at=90), 115.0, True, id="outstanding"),
    pytest.param(
        evidence(text(outstanding=[100]), progress_at=101), 300.0, False, id="outstanding-progress"
    ),
    # 4. No progress evidence: the longer window (30 s), stale progress ignored.
    pytest.param(
        evidence(text(timeout(100)), metrics=False), 129.9, False, id="no-evidence-at-129.9"
    ),
    pytest.param(evidence(text(timeout(100)), metrics=False), 130.0, True, id="no-evidence-at-130"),
    # Evidence lapsed at 125 (progress was last seen then): the no-evidence
    # window counts from there, not from the canary queued since 100.
    pytest.param(
        evidence(text(timeout(100)), metrics=False, progress_at=125, evidence_at=125),
        154.9,
        False,
        id="lapse-counts-from-last-evidence-154.9",
    ),
    pytest.param(
        evidence(text(timeout(100)), metrics=False, progress_at=125, evidence_at=125),
        155.0,
        True,
        id="lapse-counts-from-last-evidence-155",
    ),
    pytest.param(
        evidence(text(outstanding=[100]), metrics=False, progress_at=110, evidence_at=120),
        149.9,
        False,
        id="saturated-fcfs-then-metrics-lapse",
    ),
    pytest.param(
        evidence(text(timeout(100), ok(120)), metrics=False),
        300.0,
        False,
        id="no-evidence-success-after",
    ),
    # 5. A canary answered without work (5xx, reset, empty) is unanswered too;
    # a reply that generated tokens but failed validation is not.
    pytest.param(
        evidence(text(*(failed(t, Reason.HTTP_STATUS) for t in range(100, 200, 5)))),
        114.9,
        False,
        id="http-500-storm-114.9",
    ),
    pytest.param(
        evidence(text(*(failed(t, Reason.HTTP_STATUS) for t in range(100, 200, 5)))),
        115.0,
        True,
        id="http-500-storm-115",
    ),
    pytest.param(
        evidence(text(*(failed(t, Reason.PROTOCOL) for t in range(100, 200, 5)))),
        115.0,
        True,
        id="reset-on-every-request",
    ),
    pytest.param(
        evidence(text(*(failed(t, Reason.EMPTY) for t in range(100, 200, 5)))),
        115.0,
        True,
        id="empty-200",
    ),
    pytest.param(
        evidence(text(*(failed(t, Reason.HTTP_STATUS, status=400) for t in range(100, 200, 5)))),
        1000.0,
        False,
        id="http-400-is-an-answer",
    ),
    pytest.param(
        evidence(text(*(failed(t, Reason.CONNECT) for t in range(100, 200, 5)))),
        1000.0,
        False,
        id="refusals-are-the-listener-rule",
    ),
    pytest.param(
        evidence(
            text(ok(1)),
            KindEvidence(STRUCTURED, path=True, results=(failed(100, Reason.SCHEMA, STRUCTURED),)),
        ),
        1000.0,
        False,
        id="schema-failure",
    ),
    pytest.param(
        evidence(text(failed(100, Reason.BAD_BODY), failed(105, Reason.EMPTY)), metrics=False),
        1000.0,
        True,
        id="garbage-without-evidence-at-1000",
    ),
    # Timeouts of the previous server do not count.
    pytest.param(
        evidence(text(timeout(100)), epoch=1, epoch_started=150.0),
        300.0,
        False,
        id="timeout-before-epoch",
    ),
    pytest.param(
        evidence(text(outstanding=[100]), epoch=1, epoch_started=150.0),
        300.0,
        False,
        id="outstanding-before-epoch",
    ),
    pytest.param(
        evidence(text(timeout(100), timeout(151)), epoch=1, epoch_started=150.0),
        166.0,
        True,
        id="timeout-after-epoch",
    ),
]


@pytest.mark.parametrize(("ev", "now", "hung"), ENGINE_HANG_CASES)
def test_engine_hang_confirmation(ev: Evidence, now: float, hung: bool) -> None:
    verdict = once(ev, now)
    hang = hang_of(verdict, HangKind.ENGINE)
    assert (hang is not None) is hung
    assert verdict.liveness.ok is not hung
    if hung:
        assert "engine hang" in verdict.liveness.reason
        assert not verdict.readiness.ok
        basis = "no engine progress" if ev.progress_available else "no progress evidence"
        assert basis in verdict.liveness.reason


def test_engine_hang_since_is_the_oldest_unanswered_send() -> None:
    verdict = once(evidence(text(timeout(100), outstanding=[108]), progress_at=90), now=120.0)
    hang = hang_of(verdict, HangKind.ENGINE)
    assert hang is not None
    assert hang.since == 100.0
    assert hang.action is Action.RESTART


def busy_server(now: float, progress_until: float) -> Evidence:
    """Text canaries sent at 1, 6, 11, ... all miss the 8 s deadline; the engine works.

    Progress moves every 2 s (t = 0, 2, 4, ...) up to ``progress_until``.
    """
    sends = [float(s) for s in range(1, int(now) + 1, 5) if s <= now]
    done = tuple(timeout(s) for s in sends if s + DEADLINE[TEXT] <= now)
    in_flight = [s for s in sends if s + DEADLINE[TEXT] > now]
    last_progress = min(2.0 * (now // 2), progress_until)
    return evidence(text(*done, outstanding=in_flight), progress_at=last_progress)


def test_busy_server_with_moving_progress_stays_alive_then_confirms_from_first_send_after() -> None:
    sidecar = Sidecar()
    for second in range(181):
        verdict = sidecar.at(float(second), busy_server(second, progress_until=180.0))
        assert verdict.liveness.ok, f"liveness red at t={second}: {verdict.liveness.reason}"
        assert verdict.hangs == ()
    # Progress stops at T=180. The canary sent at 176 saw progress (at 178, 180); the
    # first one sent after T is at 181, so confirmation is at 181 + 15 = 196.
    for now in (181.0, 185.0, 190.0, 195.0, 195.9):
        verdict = sidecar.at(now, busy_server(now, progress_until=180.0))
        assert verdict.liveness.ok, f"liveness red at t={now}"
    verdict = sidecar.at(196.0, busy_server(196.0, progress_until=180.0))
    assert not verdict.liveness.ok
    hang = hang_of(verdict, HangKind.ENGINE)
    assert hang is not None
    assert hang.since == 181.0


# --- 5. readiness hysteresis ---------------------------------------------------

BAD_RESULTS = [
    pytest.param(lambda t: failed(t, Reason.HTTP_STATUS), id="http-500"),
    pytest.param(lambda t: failed(t, Reason.SCHEMA), id="schema"),
    pytest.param(lambda t: failed(t, Reason.CONNECT), id="unreachable"),
    pytest.param(lambda t: ok(t, took=3.0), id="over-latency-slo"),
]

# (result is good, readiness after it is judged)
HYSTERESIS_STEPS: list[tuple[bool, bool]] = [
    (True, True),
    (False, True),  # 1 bad: still ready
    (False, False),  # 2 bad: unready
    (True, False),  # 1 good
    (True, False),  # 2 good: still unready
    (True, True),  # 3 good: ready
    (False, True),
    (True, True),  # a good one breaks the bad streak
    (False, True),
    (False, False),
    (True, False),
    (True, False),
    (False, False),  # a bad one restarts the count of good ones
    (True, False),
    (True, False),
    (True, True),
]


@pytest.mark.parametrize("make_bad", BAD_RESULTS)
def test_readiness_hysteresis_out_after_two_bad_back_after_three_good(
    make_bad: Callable[[float], CanaryResult],
) -> None:
    sidecar = Sidecar()
    results: list[CanaryResult] = []
    for step, (good, ready) in enumerate(HYSTERESIS_STEPS):
        sent = 10.0 * (step + 1)
        results.append(ok(sent) if good else make_bad(sent))
        kind = KindEvidence(TEXT, results=tuple(results), latency_slo=2.0)
        # The engine works meanwhile: readiness alone reacts to the failures.
        verdict = sidecar.at(sent + 5.0, evidence(kind, progress_at=sent + 4.0))
        assert verdict.readiness.ok is ready, f"step {step}: {verdict.readiness.reason}"
        assert verdict.liveness.ok
        assert verdict.hangs == ()


def test_latency_at_the_slo_is_not_bad() -> None:
    sidecar = Sidecar()
    results = [ok(10.0 * n, took=2.0) for n in range(1, 4)]
    for n in range(1, 4):
        kind = KindEvidence(TEXT, results=tuple(results[:n]), latency_slo=2.0)
        assert sidecar.at(10.0 * n + 5, evidence(kind)).readiness.ok


def test_two_bad_results_in_one_evaluation_are_judged_in_order() -> None:
    """Results are judged one by one, also when several arrive between evaluations."""
    sidecar = Sidecar()
    assert sidecar.at(5.0, evidence(text(ok(1)))).readiness.ok
    bad = evidence(text(ok(1), failed(10, Reason.HTTP_STATUS), failed(11, Reason.HTTP_STATUS)))
    assert not sidecar.at(20.0, bad).readiness.ok
    # Re-evaluating the same results does not count them again.
    back = evidence(
        text(ok(1), failed(10, Reason.HTTP_STATUS), failed(11, Reason.HTTP_STATUS), ok(21), ok(22))
    )
    assert not sidecar.at(30.0, back).readiness.ok
    assert not sidecar.at(31.0, back).readiness.ok
    assert sidecar.at(40.0, evidence(text(*back.kinds[TEXT].results, ok(35)))).readiness.ok


# --- 6. path hangs ---------------------------------------------------------------

PATH_HANG_CASES = [
    pytest.param(
        [pair(100, STRUCTURED, Reason.TIMEOUT), pair(110, STRUCTURED, Reason.TIMEOUT)],
        True,
        id="structured-two-misses",
    ),
    pytest.param(
        [
            pair(100, STRUCTURED, Reason.TIMEOUT),
            pair(110, STRUCTURED, Reason.TIMEOUT),
            pair(120, STRUCTURED, Reason.TIMEOUT),
        ],
        True,
        id="structured-three-misses",
    ),
    pytest.param([pair(100, STRUCTURED, Reason.TIMEOUT)], False, id="structured-one-miss"),
    pytest.param(
        [
            pair(100, STRUCTURED, Reason.TIMEOUT),
            pair(110, STRUCTURED, Reason.OK),
            pair(120, STRUCTURED, Reason.TIMEOUT),
        ],
        False,
        id="structured-misses-not-consecutive",
    ),
    pytest.param(
        [pair(100, STRUCTURED, Reason.TIMEOUT), pair(110, STRUCTURED, Reason.OK)],
        False,
        id="structured-recovered",
    ),
    pytest.param(
        [
            pair(100, STRUCTURED, Reason.TIMEOUT),
            pair(110, STRUCTURED, Reason.TIMEOUT, control=Reason.TIMEOUT),
        ],
        False,
        id="structured-control-timed-out",
    ),
    pytest.param(
        [
            pair(100, STRUCTURED, Reason.TIMEOUT, control=Reason.HTTP_STATUS),
            pair(110, STRUCTURED, Reason.TIMEOUT),
        ],
        False,
        id="structured-control-failed",
    ),
    pytest.param(
        [
            pair(100, STRUCTURED, Reason.TIMEOUT),
            pair(110, STRUCTURED, Reason.TIMEOUT, control=None),
        ],
        False,
        id="structured-no-control",
    ),
    pytest.param(
        [pair(100, STRUCTURED, Reason.SCHEMA), pair(110, STRUCTURED, Reason.SCHEMA)],
        False,
        id="structured-schema-failures-are-not-misses",
    ),
    pytest.param(
        [pair(100, MULTIMODAL, Reason.TIMEOUT), pair(110, MULTIMODAL, Reason.TIMEOUT)],
        True,
        id="multimodal-two-misses",
    ),
    pytest.param([pair(100, MULTIMODAL, Reason.TIMEOUT)], False, id="multimodal-one-miss"),
    pytest.param(
        [pair(100, MULTIMODAL, Reason.ADMISSION), pair(110, MULTIMODAL, Reason.ADMISSION)],
        False,
        id="multimodal-refused-at-the-admission-cap-beside-admitted-controls",
    ),
    pytest.param(
        [
            pair(100, STRUCTURED, Reason.TIMEOUT),
            pair(110, STRUCTURED, Reason.ADMISSION),
            pair(120, STRUCTURED, Reason.TIMEOUT),
        ],
        True,
        id="structured-misses-either-side-of-an-admission-refusal",
    ),
    pytest.param(
        [
            pair(100, MULTIMODAL, Reason.TIMEOUT),
            pair(110, MULTIMODAL, Reason.TIMEOUT, control=Reason.TIMEOUT),
        ],
        False,
        id="multimodal-control-timed-out",
    ),
]


@pytest.mark.parametrize(("pairs", "hung"), PATH_HANG_CASES)
def test_path_hang_needs_two_consecutive_misses_with_passing_text_controls(
    pairs: list[Pair], hung: bool
) -> None:
    kind = pairs[0][0].kind
    verdict = once(path_evidence(kind, pairs), now=pairs[-1][0].finished + 0.5)
    hang = hang_of(verdict, HangKind(kind.value))
    assert (hang is not None) is hung
    assert hang_of(verdict, HangKind.ENGINE) is None
    assert verdict.liveness.ok is not hung
    if hang is not None:
        assert kind.value in hang.reason
        assert hang.reason in verdict.liveness.reason
        assert hang.action is Action.RESTART
        judged = [p for p in pairs if p[0].reason is not Reason.ADMISSION]
        assert hang.since == judged[-2][0].started


@pytest.mark.parametrize(
    ("misses_needed", "hung"),
    [pytest.param(2, False, id="default-needs-two"), pytest.param(1, True, id="policy-one")],
)
def test_the_first_path_miss_of_an_epoch(misses_needed: int, hung: bool) -> None:
    worked = pair(80, STRUCTURED, Reason.OK)
    miss, control = pair(100, STRUCTURED, Reason.TIMEOUT)
    assert control is not None
    ev = evidence(text(ok(90), control), path_kind(STRUCTURED, [worked, (miss, control)]))
    verdict = once(ev, now=111.0, policy=Policy(path_misses=misses_needed))
    assert (hang_of(verdict, HangKind(STRUCTURED)) is not None) is hung


@pytest.mark.parametrize("misses", [1, 2, 5])
def test_a_path_that_never_worked_is_a_readiness_failure_not_a_hang(misses: int) -> None:
    """Never working is not a hang: readiness names the kind, liveness stays green.

    The text controls passed, so the server serves: startup passes on them."""
    pairs = [pair(100 + 10 * i, STRUCTURED, Reason.BAD_BODY) for i in range(misses)]
    controls = tuple(c for _, c in pairs if c is not None)
    ev = evidence(KindEvidence(TEXT, results=controls), path_kind(STRUCTURED, pairs))
    verdict = once(ev, now=200.0, policy=Policy(path_misses=1))
    assert hang_of(verdict, HangKind(STRUCTURED)) is None
    assert verdict.liveness.ok
    assert verdict.startup.ok
    assert not verdict.readiness.ok
    assert "readiness waits on structured (last: bad_body" in verdict.readiness.reason


def test_hang_kinds_are_engine_partial_each_path_kind_dead_broken_and_listener() -> None:
    assert hang_kinds()[:5] == (
        HangKind.ENGINE,
        HangKind.PARTIAL,
        HangKind.STARVED,
        HangKind(STRUCTURED),
        HangKind(MULTIMODAL),
    )
    assert hang_kinds()[-14:] == (
        HangKind.CORRUPT,
        HangKind.DEGENERATE,
        HangKind.DEAD,
        HangKind.BROKEN,
        HangKind.LISTENER_DOWN,
        HangKind.API_SERVER,
        HangKind.PAUSED,
        HangKind.ASLEEP,
        HangKind.WEIGHT_UPDATE,
        HangKind.SCALING,
        HangKind.KV_TRANSFER,
        HangKind.WAKE,
        HangKind.FAULT_TOLERANCE,
        HangKind.REFUSED,
    )
    assert HangKind(TEXT) not in hang_kinds()


def test_a_text_canary_timing_out_beside_itself_is_no_path_hang() -> None:
    # The text kind is the control, never a path kind, whatever its results say.
    pairs = [pair(100, TEXT, Reason.TIMEOUT), pair(110, TEXT, Reason.TIMEOUT)]
    verdict = once(evidence(path_kind(TEXT, pairs), progress_at=120.0), now=121.0)
    assert verdict.hangs == ()


# (policy of the kind, liveness ok, readiness ok)
PATH_POLICY_CASES = [
    pytest.param(kind, action, live, ready, id=f"{kind}-{action}")
    for kind in (STRUCTURED, MULTIMODAL)
    for action, live, ready in (
        (Action.RESTART, False, False),
        (Action.UNREADY, True, False),
        (Action.ALERT, True, True),
    )
]


@pytest.mark.parametrize(("kind", "action", "live", "ready"), PATH_POLICY_CASES)
def test_path_hang_action_follows_the_kind_policy(
    kind: CanaryKind, action: Action, live: bool, ready: bool
) -> None:
    pairs = [pair(100, kind, Reason.TIMEOUT), pair(110, kind, Reason.TIMEOUT)]
    ev = path_evidence(kind, pairs, action)
    verdict = once(ev, now=121.0)
    assert verdict.liveness.ok is live
    assert verdict.readiness.ok is ready
    # While liveness asks for a restart, /startupz answers for the restarted server.
    assert verdict.startup.ok is live
    hang = hang_of(verdict, HangKind(kind.value))
    assert hang is not None
    assert hang.action is action
    assert not verdict.brake_engaged
    assert not verdict.would_restart
    if not ready:
        assert kind.value in verdict.readiness.reason
    # The text path is healthy at the same time.
    assert all(r.ok for r in ev.kinds[TEXT].results)


# --- 7. engine dead or stopped ---------------------------------------------------

DEAD_CASES = [
    pytest.param(evidence(text(ok(1)), health_failing_since=100), 104.9, False, id="health-4.9s"),
    pytest.param(evidence(text(ok(1)), health_failing_since=100), 105.0, True, id="health-5s"),
    pytest.param(evidence(text(ok(1)), health_failing_since=100), 500.0, True, id="health-400s"),
    pytest.param(
        evidence(text(ok(1)), engine_down_since=100, engine_down_detail="EngineCore stopped"),
        104.9,
        False,
        id="engine-down-4.9s",
    ),
    pytest.param(
        evidence(text(ok(1)), engine_down_since=100, engine_down_detail="EngineCore stopped"),
        105.0,
        True,
        id="engine-down-5s",
    ),
    pytest.param(
        evidence(text(ok(1)), health_failing_since=103, engine_down_since=100),
        105.0,
        True,
        id="engine-down-long-health-short",
    ),
    # Every engine process down is stopped (SIGSTOP): the stopped grace, 3 s.
    pytest.param(
        evidence(
            text(ok(1)),
            engine_down_since=100,
            engine_down_detail="EngineCore stopped",
            engine_down_stopped=True,
        ),
        102.9,
        False,
        id="engine-stopped-2.9s",
    ),
    pytest.param(
        evidence(
            text(ok(1)),
            engine_down_since=100,
            engine_down_detail="EngineCore stopped",
            engine_down_stopped=True,
        ),
        103.0,
        True,
        id="engine-stopped-3s",
    ),
]


@pytest.mark.parametrize(("ev", "now", "dead"), DEAD_CASES)
def test_engine_dead_after_the_grace(ev: Evidence, now: float, dead: bool) -> None:
    verdict = once(ev, now)
    hang = hang_of(verdict, HangKind.DEAD)
    assert (hang is not None) is dead
    assert verdict.liveness.ok is not dead
    if hang is not None:
        assert "engine dead" in verdict.liveness.reason
        assert ev.engine_down_detail in hang.reason
        assert hang.action is Action.RESTART


def test_dead_action_follows_the_policy() -> None:
    ev = evidence(text(ok(1)), health_failing_since=100)
    verdict = once(ev, 110.0, Policy(dead_policy=Action.UNREADY))
    assert verdict.liveness.ok
    assert not verdict.readiness.ok
    assert hang_of(verdict, HangKind.DEAD) is not None


# --- 8. observe-only -------------------------------------------------------------


def test_observe_only_reports_would_restart_and_keeps_liveness_green() -> None:
    sidecar = Sidecar(Policy(enforce=False))
    ev = evidence(text(ok(1), timeout(100)), progress_at=90)
    before = sidecar.at(114.9, ev)
    assert before.liveness.ok
    assert not before.would_restart
    verdict = sidecar.at(115.0, ev)
    assert verdict.liveness.ok
    assert "would restart" in verdict.liveness.reason
    assert "engine hang" in verdict.liveness.reason
    assert verdict.would_restart
    assert [h.kind for h in verdict.hangs] == [HangKind.ENGINE]
    assert [h.kind for h in verdict.new_hangs] == [HangKind.ENGINE]
    assert not verdict.brake_engaged


def test_observe_only_hangs_never_engage_the_brake() -> None:
    sidecar = Sidecar(Policy(enforce=False))
    for base in (100.0, 300.0, 500.0, 700.0, 900.0):
        hung = sidecar.at(base + 15, evidence(text(ok(1), timeout(base))))
        assert hung.would_restart
        assert not hung.brake_engaged
        assert "would restart" in hung.liveness.reason
        sidecar.at(base + 21, evidence(text(ok(1), timeout(base), ok(base + 20))))
    # Enforcing afterwards: no episode was counted, so the first real one restarts.
    sidecar.policy = Policy()
    assert not sidecar.at(1115.0, evidence(text(ok(1), timeout(1100)))).liveness.ok


# --- 9. restart-loop brake -------------------------------------------------------


def hang_episode(
    sidecar: Sidecar, sent: float, epoch: int = 0, epoch_started: float = 0.0
) -> Verdict:
    """A text canary sent at ``sent`` times out with progress flat; evaluated at sent + 15."""
    ev = evidence(
        text(ok(epoch_started + 1), timeout(sent)), epoch=epoch, epoch_started=epoch_started
    )
    return sidecar.at(sent + 15.0, ev)


def clear_episode(sidecar: Sidecar, sent: float) -> Verdict:
    ev = evidence(text(ok(1), timeout(sent), ok(sent + 20)))
    return sidecar.at(sent + 21.0, ev)


def test_red_blips_without_a_restart_never_engage_the_brake() -> None:
    sidecar = Sidecar()
    for sent in (100.0, 300.0, 500.0, 700.0, 900.0):
        verdict = hang_episode(sidecar, sent)
        assert not verdict.liveness.ok, f"episode at {sent}"
        assert not verdict.brake_engaged
        cleared = clear_episode(sidecar, sent)
        assert cleared.liveness.ok
        assert cleared.readiness.ok  # a single timeout is not 2 bad results
    assert sidecar.state.restarts == ()


def restarted(sidecar: Sidecar, epoch: int, started: float) -> Verdict:
    """A new server identity at ``started``; its first canary succeeds."""
    return sidecar.at(
        started + 2, evidence(text(ok(started + 1)), epoch=epoch, epoch_started=started)
    )


def test_restart_loop_brake_after_three_real_restarts_within_an_hour() -> None:
    sidecar = Sidecar()
    for epoch, sent in enumerate((100.0, 300.0, 500.0)):
        started = sent - 50.0
        restarted(sidecar, epoch, started)
        assert not hang_episode(sidecar, sent, epoch, started).liveness.ok
    restarted(sidecar, 3, 650.0)
    assert sidecar.state.restarts == (252.0, 452.0, 652.0)
    fourth = hang_episode(sidecar, 700.0, 3, 650.0)
    assert fourth.liveness.ok
    assert "brake" in fourth.liveness.reason
    assert "brake" in fourth.readiness.reason
    assert fourth.brake_engaged
    assert [h.kind for h in fourth.hangs] == [HangKind.ENGINE]
    # Clearing releases the brake; a braked episode is no restart to count.
    cleared = sidecar.at(
        721.0, evidence(text(ok(651), timeout(700), ok(720)), epoch=3, epoch_started=650.0)
    )
    assert not cleared.brake_engaged
    restarted(sidecar, 4, 800.0)
    assert sidecar.state.restarts == (252.0, 452.0, 652.0)
    # An hour after the first restarts only two remain: the next hang fails liveness.
    later = hang_episode(sidecar, 3900.0, 4, 800.0)
    assert not later.liveness.ok
    assert not later.brake_engaged


def test_a_restart_without_a_red_episode_is_not_counted() -> None:
    sidecar = Sidecar()
    for epoch in range(6):
        restarted(sidecar, epoch, 100.0 * epoch)
    assert sidecar.state.restarts == ()


def test_restart_loop_brake_counts_episodes_across_server_restarts() -> None:
    sidecar = Sidecar()
    for epoch, sent in enumerate((100.0, 300.0, 500.0)):
        started = sent - 50.0
        fresh = sidecar.at(
            started + 2, evidence(text(ok(started + 1)), epoch=epoch, epoch_started=started)
        )
        assert fresh.liveness.ok
        assert fresh.startup.ok
        verdict = hang_episode(sidecar, sent, epoch, started)
        assert not verdict.liveness.ok, f"episode in epoch {epoch}"
        assert not verdict.brake_engaged
    # The kubelet restarted vLLM after each; the fourth server hangs as well.
    sidecar.at(652.0, evidence(text(ok(651)), epoch=3, epoch_started=650.0))
    fourth = hang_episode(sidecar, 700.0, epoch=3, epoch_started=650.0)
    assert fourth.liveness.ok
    assert fourth.brake_engaged
    assert "brake" in fourth.liveness.reason
    assert not fourth.readiness.ok


# --- 10. new epoch ---------------------------------------------------------------


def test_new_epoch_resets_liveness_startup_and_readiness() -> None:
    sidecar = Sidecar()
    assert sidecar.at(2.0, evidence(text(ok(1)))).readiness.ok
    red = sidecar.at(115.0, evidence(text(ok(1), timeout(100))))
    assert not red.liveness.ok
    # vLLM restarted at 120; the old results are still in the evidence.
    old = (ok(1), timeout(100))
    verdict = sidecar.at(125.0, evidence(text(*old), epoch=1, epoch_started=120.0))
    assert verdict.new_epoch
    assert verdict.liveness.ok
    assert verdict.liveness.since == 125.0
    assert not verdict.startup.ok
    assert not verdict.readiness.ok
    assert verdict.hangs == ()
    # Long after, the old timeout still does not count as a hang of the new server.
    verdict = sidecar.at(400.0, evidence(text(*old), epoch=1, epoch_started=120.0))
    assert verdict.liveness.ok
    assert not verdict.new_epoch
    assert not verdict.startup.ok
    # A success of the new server passes startup.
    verdict = sidecar.at(401.0, evidence(text(*old, ok(400)), epoch=1, epoch_started=120.0))
    assert verdict.startup.ok


def test_new_epoch_ignores_path_misses_of_the_previous_server() -> None:
    old = [pair(100, STRUCTURED, Reason.TIMEOUT), pair(110, STRUCTURED, Reason.TIMEOUT)]
    ev = path_evidence(STRUCTURED, old)
    sidecar = Sidecar()
    assert hang_of(sidecar.at(121.0, ev), HangKind(STRUCTURED)) is not None
    restarted = Evidence(
        epoch=1, epoch_started=130.0, kinds=ev.kinds, progress_available=ev.progress_available
    )
    verdict = sidecar.at(131.0, restarted)
    assert verdict.hangs == ()
    assert verdict.liveness.ok


def test_new_epoch_readiness_does_not_inherit_failures_of_the_previous_server() -> None:
    """docs/design.md: on a server restart "all verdict state resets".

    Failures of the previous server must not keep the new one unready once it
    passed startup, just as they no longer count for startup or hangs.
    """
    sidecar = Sidecar()
    old = (ok(1), failed(50, Reason.HTTP_STATUS), failed(55, Reason.HTTP_STATUS))
    assert not sidecar.at(60.0, evidence(text(*old))).readiness.ok
    verdict = sidecar.at(102.0, evidence(text(*old, ok(100)), epoch=1, epoch_started=90.0))
    assert verdict.startup.ok
    assert verdict.readiness.ok, verdict.readiness.reason


# --- 11. new_hangs and since -----------------------------------------------------


def test_new_hangs_only_on_the_first_confirming_evaluation_and_since_keeps_flip_time() -> None:
    sidecar = Sidecar()
    start = sidecar.at(2.0, evidence(text(ok(1))))
    assert start.readiness.ok
    assert start.readiness.since == 2.0
    hung_ev = evidence(text(ok(1), timeout(100)))
    first = sidecar.at(115.0, hung_ev)
    assert [h.kind for h in first.new_hangs] == [HangKind.ENGINE]
    assert not first.liveness.ok
    assert first.liveness.since == 115.0
    assert first.readiness.since == 115.0
    for now in (116.0, 130.0, 200.0):
        again = sidecar.at(now, hung_ev)
        assert [h.kind for h in again.hangs] == [HangKind.ENGINE]
        assert again.new_hangs == ()
        assert again.liveness.since == 115.0
        assert again.readiness.since == 115.0
    cleared = sidecar.at(205.0, evidence(text(ok(1), timeout(100), ok(201))))
    assert cleared.liveness.ok
    assert cleared.liveness.since == 205.0
    assert cleared.hangs == ()
    # A second confirmation is new again.
    second = sidecar.at(225.0, evidence(text(ok(1), timeout(100), ok(201), timeout(210))))
    assert [h.kind for h in second.new_hangs] == [HangKind.ENGINE]
    assert second.liveness.since == 225.0


def test_a_second_kind_confirmed_later_is_the_only_new_hang() -> None:
    sidecar = Sidecar()
    ev = evidence(text(ok(1)), health_failing_since=100.0, engine_down_since=None)
    assert [h.kind for h in sidecar.at(105.0, ev).new_hangs] == [HangKind.DEAD]
    both = evidence(text(ok(1), timeout(110)), health_failing_since=100.0)
    verdict = sidecar.at(125.0, both)
    assert {h.kind for h in verdict.hangs} == {HangKind.DEAD, HangKind.ENGINE}
    assert [h.kind for h in verdict.new_hangs] == [HangKind.ENGINE]


def test_observe_only_leaves_readiness_to_startup_and_degradation() -> None:
    """Observe-only changes no kubelet answer because of a hang; it only reports."""
    policy = Policy(enforce=False)
    ev = evidence(text(ok(1.0), timeout(100.0)), progress_at=50.0)
    _, verdict = evaluate(VerdictState(), ev, policy, 116.0)
    assert verdict.would_restart
    assert verdict.liveness.ok
    assert verdict.readiness.ok, verdict.readiness.reason


PAUSES = tuple((float(t), t + 2.6) for t in range(0, 400, 12))  # 2.6 s every 12 s


@pytest.mark.parametrize(
    ("unobserved", "now", "hung"),
    [
        ((), 115.0, True),  # sentinel ran throughout: confirmed at send + 15
        (((105.0, 110.0),), 115.0, False),  # 5 s unobserved: only 10 s watched
        (((105.0, 110.0),), 119.9, False),
        (((105.0, 110.0),), 120.0, True),  # the window paused and resumed
        (((90.0, 95.0),), 115.0, True),  # a pause before the canary does not matter
        # Periodic pauses cannot restart the window: it only runs slower.
        (PAUSES, 117.5, False),  # 100..117.5 holds 2.6 s of pause (108..110.6)
        (PAUSES, 117.7, True),
    ],
    ids=[
        "smooth",
        "paused",
        "paused-not-over",
        "paused-over",
        "pause-before",
        "periodic-not-yet",
        "periodic-confirms",
    ],
)
def test_windows_pause_over_time_sentinel_did_not_observe(
    unobserved: tuple[tuple[float, float], ...], now: float, hung: bool
) -> None:
    ev = replace(evidence(text(ok(1.0), timeout(100.0)), progress_at=50.0), unobserved=unobserved)
    _, verdict = evaluate(VerdictState(), ev, Policy(), now)
    assert (not verdict.liveness.ok) is hung
