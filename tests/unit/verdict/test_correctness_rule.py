"""The corrupt rule on a virtual clock: checks against a fingerprint, in both directions.

A check within the tolerance (a near-tie flip, a late divergence, logprobs a
hair apart) stays green however often it happens; a departure is corruption
only when repeated; the signs no batching noise makes (one token repeated
where the fingerprint was not, a collapse of log-probabilities, NaN, a 5xx
beside a passing control, vLLM's NaN counter) confirm it at once. A
random-weight model's repetitive fingerprint is no alarm; a change from it is.
"""

from __future__ import annotations

import math

import pytest

from sentinel.canary.correctness import CORRECTNESS, CorrectnessEvidence, Fingerprint
from sentinel.canary.result import CanaryResult, Generation, Reason
from sentinel.canary.spec import CanaryKind
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
from sentinel.verdict.hangs.corrupt import (
    FLIP_MARGIN,
    LOGPROB_TOLERANCE,
    compare,
    corrupt_hang,
)

TEXT = CanaryKind.TEXT
BASE = (
    Generation((11, 12, 13, 14, 15, 16), (-0.1, -0.3, -0.2, -0.5, -0.4, -0.2), (3.0,) * 6),
    Generation((21, 22, 23, 24, 25, 26), (-0.2, -0.2, -0.2, -0.2, -0.2, -0.2), (2.0,) * 6),
)
LOST = tuple(Generation((0,) * 6, (-11.9,) * 6, (0.0,) * 6) for _ in BASE)
REPETITIVE = (  # a random-weight model: the last prompt token over and over, flat logits
    Generation((7,) * 6, (-5.9,) * 6, (0.05,) * 6, (3,) * 6),
    Generation((9,) * 6, (-5.8,) * 6, (0.04,) * 6, (4,) * 6),
)
PRINT = Fingerprint("m", "", "req", BASE, 1.0e9, "first check")


def check(sent: float, generations: tuple[Generation, ...] = BASE, **kw: object) -> CanaryResult:
    return CanaryResult(
        "correctness", CORRECTNESS, kw.pop("reason", Reason.OK), sent, 0.2,  # type: ignore[arg-type]
        generations=generations, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def control(sent: float, reason: Reason = Reason.OK) -> CanaryResult:
    return CanaryResult("text", TEXT, reason, sent, 0.1)


def evidence(
    *checks: CanaryResult,
    fingerprint: Fingerprint | None = PRINT,
    controls: tuple[CanaryResult | None, ...] = (),
    **kw: object,
) -> Evidence:
    facts = CorrectnessEvidence(fingerprint, kw.pop("since", 0.0), kw.pop("corrupted_at", None))  # type: ignore[arg-type]
    kinds = {CORRECTNESS: KindEvidence(CORRECTNESS, results=checks, controls=controls)}
    return Evidence(kinds=kinds, correctness=facts, **kw)  # type: ignore[arg-type]


def hang(ev: Evidence, now: float = 100.0) -> str | None:
    found = corrupt_hang(ev, Policy(), now)
    return None if found is None else found.reason


def shifted(base: tuple[Generation, ...], at: int, margin: float = 3.0) -> tuple[Generation, ...]:
    """The first prompt's generation diverging at token ``at`` (fingerprint margin there)."""
    first = base[0]
    ids = first.token_ids[:at] + tuple(90 + i for i in range(len(first.token_ids) - at))
    margins = tuple(margin if i == at else m for i, m in enumerate(first.margins))
    return (Generation(ids, first.logprobs, margins), *base[1:])


# -- the comparison --------------------------------------------------------------------------


def test_identical_generations_do_not_depart() -> None:
    assert compare(BASE, BASE) == ()


def test_a_remembered_comparison_is_the_same_pair_only() -> None:
    # Evaluations judge the same kept checks again: the answer is remembered per pair
    # of objects, so an equal-looking but different check is judged afresh.
    departed = shifted(BASE, 1)
    assert [d.sign for d in compare(BASE, departed)] == ["diverged"]
    assert compare(BASE, departed) is compare(BASE, departed)
    assert compare(BASE, shifted(BASE, 4)) == ()
    assert compare(list(BASE), list(departed)) == compare(BASE, departed)  # lists: not kept


def test_divergence_after_the_early_tokens_is_tolerated() -> None:
    assert compare(BASE, shifted(BASE, 4)) == ()


def test_early_divergence_departs_unless_the_fingerprint_shows_a_near_tie() -> None:
    departures = compare(BASE, shifted(BASE, 1))
    assert [d.sign for d in departures] == ["diverged"]
    tie = (3.0, FLIP_MARGIN / 2, 3.0, 3.0, 3.0, 3.0)
    flipped = Generation(BASE[0].token_ids, BASE[0].logprobs, tie, (None, 90, None))
    assert compare((flipped, BASE[1]), shifted(BASE, 1)) == ()  # the runner-up won: noise
    elsewhere = Generation(BASE[0].token_ids, BASE[0].logprobs, tie, (None, 55, None))
    assert [d.sign for d in compare((elsewhere, BASE[1]), shifted(BASE, 1))] == ["diverged"]


def test_a_flip_to_any_recorded_candidate_within_the_margin_is_forgiven() -> None:
    """GPU kernels are batch-variant: under load the third candidate may win a near-tie."""
    tie = (3.0, 0.1, 3.0, 3.0, 3.0, 3.0)
    ranked = ((), ((55, 0.1), (90, FLIP_MARGIN * 0.8), (70, FLIP_MARGIN * 3)), (), (), (), ())
    base = Generation(BASE[0].token_ids, BASE[0].logprobs, tie, (55,) * 6, ranked)
    assert compare((base, BASE[1]), shifted(BASE, 1)) == ()  # token 90: the third, within
    far = tuple(() if i != 1 else ((55, 0.1), (90, FLIP_MARGIN * 1.5)) for i in range(6))
    outside = Generation(BASE[0].token_ids, BASE[0].logprobs, tie, (55,) * 6, far)
    assert [d.sign for d in compare((outside, BASE[1]), shifted(BASE, 1))] == ["diverged"]
    unlisted = Generation(BASE[0].token_ids, BASE[0].logprobs, tie, (55,) * 6, ranked[:1] * 6)
    assert [d.sign for d in compare((unlisted, BASE[1]), shifted(BASE, 1))] == ["diverged"]


def test_checks_flipping_to_the_third_candidate_under_load_stay_green() -> None:
    """Repeated forgiven flips, every check, never confirm corruption."""
    ranked = tuple(((55, 0.1), (90, 0.3)) if i == 1 else () for i in range(6))
    base = Generation(BASE[0].token_ids, BASE[0].logprobs, BASE[0].margins, (), ranked)
    fingerprint = Fingerprint("m", "", "req", (base, BASE[1]), 1.0e9, "first check")
    flipped = [check(10.0 * i, shifted(BASE, 1)) for i in range(1, 8)]
    assert hang(evidence(*flipped, fingerprint=fingerprint)) is None
    elsewhere = tuple(((55, 0.1), (91, 0.3)) if i == 1 else () for i in range(6))
    moved = Generation(BASE[0].token_ids, BASE[0].logprobs, BASE[0].margins, (), elsewhere)
    other = Fingerprint("m", "", "req", (moved, BASE[1]), 1.0e9, "first check")
    assert "checks in a row left the fingerprint" in (
        hang(evidence(*flipped, fingerprint=other)) or ""
    )


def test_agreed_tokens_whose_logprobs_moved_depart() -> None:
    moved = Generation(BASE[0].token_ids, tuple(v - 0.01 for v in BASE[0].logprobs), ())
    assert compare(BASE, (moved, BASE[1])) == ()
    far = Generation(BASE[0].token_ids, (-0.1 - LOGPROB_TOLERANCE * 1.5, *BASE[0].logprobs[1:]), ())
    assert [d.sign for d in compare(BASE, (far, BASE[1]))] == ["logprobs"]


def test_weights_lost_is_degenerate_and_collapsed_at_once() -> None:
    signs = {d.sign for d in compare(BASE, LOST) if d.immediate}
    assert signs == {"degenerate", "collapse"}


def test_a_repetitive_fingerprint_is_no_alarm_but_a_change_from_it_is() -> None:
    assert compare(REPETITIVE, REPETITIVE) == ()
    other = (Generation((8,) * 6, (-5.9,) * 6, ()), REPETITIVE[1])
    departures = compare(REPETITIVE, other)
    assert [d.sign for d in departures] == ["diverged"]
    assert not any(d.immediate for d in departures)


def test_nan_departs_at_once() -> None:
    nan = Generation(BASE[0].token_ids, (math.nan,) * 6, ())
    assert [d.sign for d in compare(BASE, (nan, BASE[1]))] == ["nan"]


def test_a_collapse_below_the_fingerprint_departs_at_once() -> None:
    low = Generation((*BASE[0].token_ids[:4], 70, 71), (-0.1, -0.3, -0.2, -0.5, -15, -15), ())
    signs = {d.sign for d in compare(BASE, (low, BASE[1]))}
    assert signs == {"collapse"}  # the tokens agree where they must; the confidence collapsed


# -- the rule ---------------------------------------------------------------------------------


def test_checks_that_match_never_confirm() -> None:
    assert hang(evidence(*(check(t) for t in range(1, 60, 10)))) is None


def test_one_departure_is_not_corruption_two_in_a_row_are() -> None:
    one = evidence(check(1), check(11, shifted(BASE, 0)))
    assert hang(one) is None
    two = evidence(check(1), check(11, shifted(BASE, 0)), check(21, shifted(BASE, 0)))
    assert "2 checks in a row" in str(hang(two))
    healed = evidence(check(11, shifted(BASE, 0)), check(21, shifted(BASE, 0)), check(31))
    assert hang(healed) is None


def test_degenerate_output_confirms_at_once_and_clears_when_it_matches_again() -> None:
    assert "degenerate" in str(hang(evidence(check(1), check(11, LOST))))
    assert hang(evidence(check(1), check(11, LOST), check(21))) is None


def test_a_5xx_on_the_check_beside_a_passing_control_is_corruption_at_once() -> None:
    failed = check(11, (), reason=Reason.HTTP_STATUS, http_status=500, detail="HTTP 500")
    assert "error" in str(hang(evidence(check(1), failed, controls=(None, control(11)))))
    dead = (None, control(11, Reason.HTTP_STATUS))
    assert hang(evidence(check(1), failed, controls=dead)) is None  # the engine rules' case


@pytest.mark.parametrize(
    "message",
    [
        "EngineCore encountered an issue. See stack trace (above) for the cause.",  # 0.10-0.32
        "The server had an error while processing your request.",  # 0.33+
    ],
)
def test_vllm_engine_dead_500_beside_a_control_that_passed_just_before_is_no_corruption(
    message: str,
) -> None:
    # A server shutting down (or crashing): the control was answered, then the engine went.
    detail = f"HTTP 500: {message}"
    gone = check(11, (), reason=Reason.HTTP_STATUS, http_status=500, detail=detail)
    assert hang(evidence(check(1), gone, controls=(None, control(11)))) is None


def test_vllm_nan_counter_is_corruption_until_a_check_matches_after_it() -> None:
    assert "NaN logits" in str(hang(evidence(check(1), corrupted_at=5.0)))
    assert hang(evidence(check(1), check(11), corrupted_at=5.0)) is None


def test_no_fingerprint_or_checks_before_it_judge_nothing() -> None:
    assert hang(evidence(check(1, LOST), fingerprint=None)) is None
    assert hang(evidence(check(1, LOST), since=50.0)) is None


def test_off_while_asleep_and_only_checks_after_the_wake_up_count() -> None:
    asleep = Lifecycle(Phase.ASLEEP, 10.0, "asleep")
    assert hang(evidence(check(1), check(11, LOST), lifecycle=asleep)) is None
    woke = Lifecycle(Phase.AWAKE, 30.0, "", resumed_at=30.0)
    assert hang(evidence(check(11, LOST), check(21, LOST), lifecycle=woke)) is None
    assert hang(evidence(check(11, LOST), check(31, LOST), lifecycle=woke)) is not None


@pytest.mark.parametrize("action", [Action.UNREADY, Action.RESTART, Action.ALERT])
def test_policy_decides_what_the_kubelet_sees(action: Action) -> None:
    ev = evidence(check(1), check(11, LOST), epoch_started=0.0)
    text = KindEvidence(TEXT, results=(control(1), control(11)))
    ev = Evidence(kinds={**ev.kinds, TEXT: text}, correctness=ev.correctness, epoch_started=0.0)
    state = VerdictState(epoch=0, startup_passed=True)
    _, verdict = evaluate(state, ev, Policy(corrupt_policy=action), 20.0)
    assert [h.kind for h in verdict.hangs] == [HangKind.CORRUPT]
    assert verdict.readiness.ok is (action is Action.ALERT)
    assert verdict.liveness.ok is (action is not Action.RESTART)
    if not verdict.readiness.ok:
        assert "corrupt output" in verdict.readiness.reason


def test_vllm_refusing_to_encode_nan_logprobs_is_corruption_at_once() -> None:
    detail = "HTTP 400: Out of range float values are not JSON compliant"
    refused = check(11, (), reason=Reason.HTTP_STATUS, http_status=400, detail=detail)
    assert "nan" in str(hang(evidence(check(1), refused, controls=(None, None))))
    other = check(11, (), reason=Reason.HTTP_STATUS, http_status=400, detail="HTTP 400: bad")
    assert hang(evidence(check(1), other, controls=(None, control(11)))) is None


def test_one_data_parallel_engine_with_corrupt_weights_among_good_ones() -> None:
    """Checks go to each engine in turn: engine 1's departures alternate with engine 0's matches."""
    bad = shifted(BASE, 0)
    checks = [check(t, bad if t % 2 else BASE, engine=t % 2) for t in range(1, 9)]
    found = corrupt_hang(evidence(*checks), Policy(), 20)
    assert found is not None
    assert found.engines == (1,)
    assert "engine 1" in found.reason
    healthy = [check(t, BASE, engine=t % 2) for t in range(1, 9)]
    assert hang(evidence(*healthy)) is None
