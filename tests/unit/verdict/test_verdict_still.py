"""The still-engine rule on a virtual clock: no engine step at all confirms sooner.

A text canary waited the step window (8 s) while no work counter moved at all,
sentinel's own included, where tokens processed by engine steps are exposed and
were seen moving in this epoch, and the engine's running and waiting gauges
were both 0 (it does not even show the canary). Every case that must wait for the whole hang
window (15 s), or never fire, is here beside the ones that fire at 8 s.
"""

from __future__ import annotations

import pytest

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.evidence.metrics import MetricsSample
from sentinel.progress.tracker import STEP_COUNTER, ProgressTracker, canary_budget
from sentinel.record.ledger import Ledger
from sentinel.verdict import (
    Action,
    Evidence,
    HangKind,
    KindEvidence,
    Policy,
    VerdictState,
    evaluate,
)

TEXT, STRUCTURED = CanaryKind.TEXT, CanaryKind.STRUCTURED
SENT = 100.0  # the canary's send time in every case


def canary(sent: float, reason: Reason = Reason.OK, kind: CanaryKind = TEXT) -> CanaryResult:
    return CanaryResult(f"{kind}-canary", kind, reason, sent, 8.0 if reason else 0.1)


def evidence(
    *,
    outstanding: tuple[float, ...] = (SENT,),
    results: tuple[CanaryResult, ...] = (),
    kind: CanaryKind = TEXT,
    steps: bool = True,
    last_step_at: float | None = 90.0,
    seen: bool = True,
    sampled_at: float | None = None,
    now: float,
    unobserved: tuple[tuple[float, float], ...] = (),
    empty_queue: bool = True,
) -> Evidence:
    kinds = {kind: KindEvidence(kind, results=results, outstanding=outstanding, path=kind != TEXT)}
    if kind is not TEXT:  # a path canary comes with its text kind (nothing outstanding)
        kinds[TEXT] = KindEvidence(TEXT)
    return Evidence(
        kinds=kinds,
        progress_available=True,
        last_progress_at=last_step_at,
        steps_available=steps,
        steps_seen=seen,
        last_step_at=last_step_at,
        sampled_at=now if sampled_at is None else sampled_at,
        queue_empty=empty_queue,
        last_evidence_at=now,
        unobserved=unobserved,
    )


def engine_hang(ev: Evidence, now: float) -> str | None:
    """The engine hang's reason at ``now``, or None."""
    _, verdict = evaluate(VerdictState(), ev, Policy(), now)
    reasons = [h.reason for h in verdict.hangs if h.kind is HangKind.ENGINE]
    return reasons[0] if reasons else None


@pytest.mark.parametrize(
    ("now", "fires"),
    [(SENT + 7.9, False), (SENT + 8.0, True), (SENT + 14.9, True)],
)
def test_a_canary_waiting_with_no_step_at_all_confirms_at_the_step_window(
    now: float, fires: bool
) -> None:
    reason = engine_hang(evidence(now=now), now)
    assert (reason is not None) is fires
    if fires:
        assert reason is not None
        assert "no engine step at all" in reason


def test_a_timed_out_text_canary_counts_as_waiting() -> None:
    ev = evidence(outstanding=(), results=(canary(SENT, Reason.TIMEOUT),), now=SENT + 8.5)
    assert engine_hang(ev, SENT + 8.5) is not None


@pytest.mark.parametrize(
    ("case", "ev"),
    [
        # Work beyond sentinel's own moved a counter after the send: the engine stepped.
        ("a step after the send", evidence(last_step_at=SENT + 0.5, now=SENT + 12.0)),
        # Tokens processed by engine steps not exposed: no heartbeat to read.
        ("no step signal", evidence(steps=False, now=SENT + 12.0)),
        # Never seen moving in this epoch: a counter that may never move.
        ("never seen beating", evidence(last_step_at=None, seen=False, now=SENT + 12.0)),
        # The engine's gauges show requests (the canary, or one long prompt
        # prefilled in chunks, which moves no counter until its first token).
        ("requests in the queue gauges", evidence(empty_queue=False, now=SENT + 12.0)),
        # Samples covered only 7 s after the send: the rest is not known.
        ("samples lag", evidence(sampled_at=SENT + 7.0, now=SENT + 12.0)),
        # A path canary may wait before the engine (grammar, image) while it idles.
        (
            "a path canary",
            evidence(kind=STRUCTURED, now=SENT + 12.0),
        ),
        # A fast failure may never have reached the engine (the broken rule's).
        (
            "a 500",
            evidence(outstanding=(), results=(canary(SENT, Reason.HTTP_STATUS),), now=SENT + 12.0),
        ),
        # A success after the send: the canary before it proves nothing.
        (
            "a later success",
            evidence(results=(canary(SENT + 1.0),), now=SENT + 12.0),
        ),
        # Sentinel itself was paused for 5 of the 12 s: 7 s observed.
        (
            "sentinel paused",
            evidence(now=SENT + 12.0, unobserved=((SENT + 2.0, SENT + 7.0),)),
        ),
    ],
)
def test_the_still_rule_keeps_out_of(case: str, ev: Evidence) -> None:
    assert engine_hang(ev, SENT + 12.0) is None, case


def test_the_hang_window_still_applies_where_the_step_rule_cannot() -> None:
    """A path canary alone: the ordinary rule confirms at the 15 s hang window."""
    ev = evidence(kind=STRUCTURED, now=SENT + 15.0)
    reason = engine_hang(ev, SENT + 15.0)
    assert reason is not None
    assert "no engine progress" in reason


def sample(at: float, **counters: float) -> MetricsSample:
    return MetricsSample(at=at, counters=counters)


def test_a_step_that_served_only_sentinel_is_a_heartbeat_and_no_step() -> None:
    """A canary's own prefill shows the counter beats, but excuses no canary; real work does."""
    tracker = ProgressTracker()
    base = {"prompt_tokens": 10.0, "generation_tokens": 5.0, "engine_tokens": 15.0}
    tracker.observe(sample(0.0, **base))
    assert STEP_COUNTER in tracker.signals
    assert tracker.last_step_at is None
    tracker.canary_sent(1, 1.0, canary_budget(reply_tokens=2, prompt_tokens=12))
    own = {**base, "prompt_tokens": 22.0, "generation_tokens": 6.0, "engine_tokens": 28.0}
    tracker.observe(sample(2.0, **own))
    assert tracker.last_beat_at == 2.0  # the counter beats ...
    assert tracker.last_step_at is None  # ... but that step was sentinel's canary alone
    assert tracker.last_progress_at is None
    real = {**own, "prompt_tokens": 52.0, "engine_tokens": 58.0}
    tracker.observe(sample(4.0, **real))
    assert tracker.last_step_at == 4.0  # a real prompt prefilled: the engine stepped
    tracker.observe(sample(5.0, **real))
    assert tracker.last_step_at == 4.0  # flat: no step
    tracker.observe(sample(6.0, prompt_tokens=22.0, generation_tokens=5.0))
    assert STEP_COUNTER not in tracker.signals  # the step counter is gone from the exposition


def test_the_ledger_tells_an_empty_queue() -> None:
    """Both queue gauges 0 in the newest sample; a canary shown, or absent gauges, are not."""
    ledger = Ledger([(TEXT, Action.RESTART, None)], 0.0)
    ledger.progress.observe(sample(0.0, engine_tokens=1.0))
    assert not ledger.evidence(0.0, 10.0).queue_empty  # no gauges: unknown
    ledger.canary_sent(TEXT, 1.0)
    idle = {"running": 0.0, "waiting": 0.0}
    ledger.progress.observe(MetricsSample(at=2.0, gauges=idle))
    assert ledger.evidence(2.0, 10.0).queue_empty  # the engine does not show the canary
    ledger.progress.observe(MetricsSample(at=3.0, gauges={**idle, "waiting": 1.0}))
    assert not ledger.evidence(3.0, 10.0).queue_empty  # it does: its gauges are live
