"""One-token traffic at saturation (issue 30), on the virtual clock.

A prefill worker behind a disaggregation proxy (and a judge or scorer pool)
is fed only ``max_tokens: 1`` requests: saturated, its queue never empties,
no request decodes past its first token, and the priority canary passes.
Its completions are its queue being served, so the starvation rule must
stay quiet; the same server admitting nothing is still starved, and a
decode stall behind one-token completions is still the engine rule's.
"""

from __future__ import annotations

from dataclasses import replace

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.evidence.metrics import MetricsSample
from sentinel.progress.tracker import ProgressTracker
from sentinel.verdict import Evidence, HangKind, KindEvidence, Policy, VerdictState, evaluate

TEXT = CanaryKind.TEXT
RUN = 60.0  # seconds of virtual time, the loopback test's hold


def _ok(sent: float) -> CanaryResult:
    return CanaryResult("text-canary", TEXT, Reason.OK, sent, 0.3)


def _timeout(sent: float) -> CanaryResult:
    return CanaryResult("text-canary", TEXT, Reason.TIMEOUT, sent, 8.0)


def _sample(at: float, finished: float) -> MetricsSample:
    """``finished`` one-token requests so far: a first token and a completion each."""
    counters = {
        "generation_tokens": 500.0 + finished,
        "first_tokens": 200.0 + finished,
        "completions": 150.0 + finished,
        "finished": 150.0 + finished,
        "finished_one_token": 100.0 + finished,
        "prompt_tokens": 4000.0 + 20 * finished,
    }
    return MetricsSample(at, counters=counters)


def _hangs_over_run(rate: float, canary_ok: bool) -> list[tuple[float, HangKind]]:
    """Each second: a scrape (``rate`` one-token completions a second), an evaluation."""
    tracker = ProgressTracker()
    state = replace(VerdictState(), epoch=0, startup_passed=True)
    found: list[tuple[float, HangKind]] = []
    tracker.observe(_sample(0.0, 0.0))
    for second in range(1, int(RUN) + 1):
        now = float(second)
        tracker.observe(_sample(now, rate * now))
        sent = [float(t) for t in range(1, second - 8, 5)]
        results = tuple(_ok(t) if canary_ok else _timeout(t) for t in sent)
        evidence = Evidence(
            kinds={TEXT: KindEvidence(TEXT, results=results)},
            progress_available=True,
            decode_available=tracker.decode_available,
            last_progress_at=tracker.last_progress_at,
            last_decode_at=tracker.last_decode_at,
            last_real_completion_at=tracker.last_real_completion_at,
            last_evidence_at=now,
            waiting_since=0.5,  # the queue never empties
            waiting_real=40.0,
        )
        state, verdict = evaluate(state, evidence, Policy(), now)
        found.extend((now, h.kind) for h in verdict.hangs)
    return found


def test_a_saturated_one_token_server_is_never_starved() -> None:
    tracker = ProgressTracker()
    tracker.observe(_sample(0.0, 0.0))
    tracker.observe(_sample(1.0, 30.0))
    assert tracker.last_decode_at is None, "one-token work is no decode"
    assert _hangs_over_run(rate=30.0, canary_ok=True) == []


def test_a_queue_nothing_leaves_is_still_starved() -> None:
    found = _hangs_over_run(rate=0.0, canary_ok=True)
    assert found, "no completion at all behind a passing canary"
    first_at, kind = found[0]
    assert kind is HangKind.STARVED
    assert first_at >= Policy().hang_window


def test_one_token_completions_never_mask_a_decode_stall() -> None:
    found = _hangs_over_run(rate=30.0, canary_ok=False)
    kinds = {kind for _, kind in found}
    assert HangKind.ENGINE in kinds, found
    assert HangKind.STARVED not in kinds  # the canary failing is the engine rule's
