"""What is worth a diagnostics capture before any hang is confirmed.

A canary that missed its deadline is a suspicion unless the engine it waited
on was seen doing real work after it was sent: then it queued behind load.
Both directions, for a single engine and for one data-parallel engine of
several (vouched for by its own counters only).
"""

from __future__ import annotations

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.evaluation.suspicion import suspicion
from sentinel.verdict import Action, Evidence, Hang, HangKind, KindEvidence, ProbeAnswer, Verdict
from sentinel.verdict.model import EngineProgress

TEXT = CanaryKind.TEXT
GREEN = Verdict(
    liveness=ProbeAnswer(True, "no hang confirmed"),
    readiness=ProbeAnswer(True, "serving"),
    startup=ProbeAnswer(True, "every kind passed"),
)


def missed(sent: float, engine: int | None = None) -> dict[CanaryKind, KindEvidence]:
    result = CanaryResult("text", TEXT, Reason.TIMEOUT, sent, 8.0, engine=engine)
    return {TEXT: KindEvidence(TEXT, results=(result,))}


def test_a_missed_deadline_with_no_work_since_it_was_sent_is_suspected() -> None:
    evidence = Evidence(kinds=missed(100.0), progress_available=True, last_progress_at=99.0)
    assert suspicion(evidence, GREEN) == ("missed-deadline", "a text canary missed its deadline")
    assert suspicion(Evidence(kinds=missed(100.0)), GREEN) is not None  # no counters: suspected


def test_a_missed_deadline_behind_work_the_engine_did_after_it_was_sent_is_load() -> None:
    evidence = Evidence(kinds=missed(100.0), progress_available=True, last_progress_at=104.0)
    assert suspicion(evidence, GREEN) is None


def test_decode_told_apart_vouches_only_by_decoded_tokens() -> None:
    # A stuck decode still prefills what arrives: prefill progress vouches for nothing.
    stuck = Evidence(
        kinds=missed(100.0), decode_available=True, last_decode_at=90.0, last_progress_at=104.0
    )
    assert suspicion(stuck, GREEN) is not None
    decoding = Evidence(kinds=missed(100.0), decode_available=True, last_decode_at=104.0)
    assert suspicion(decoding, GREEN) is None


def test_one_engine_of_several_is_vouched_for_by_its_own_work_only() -> None:
    engines = (
        EngineProgress("0", 0.0, last_progress_at=104.0),
        EngineProgress("1", 0.0, last_progress_at=90.0),
    )
    busy = Evidence(kinds=missed(100.0, engine=0), engines=engines, last_progress_at=104.0)
    assert suspicion(busy, GREEN) is None
    hung = Evidence(kinds=missed(100.0, engine=1), engines=engines, last_progress_at=104.0)
    assert suspicion(hung, GREEN) == (
        "missed-deadline",
        "a text canary aimed at engine 1 missed its deadline",
    )


def test_a_confirmed_hang_is_captured_whatever_the_progress() -> None:
    hang = Hang(HangKind.ENGINE, Action.RESTART, "engine hang", since=95.0)
    hung = Verdict(GREEN.liveness, GREEN.readiness, GREEN.startup, hangs=(hang,))
    evidence = Evidence(kinds=missed(100.0), last_progress_at=104.0)
    assert suspicion(evidence, hung) == ("engine-hang", "engine hang")
