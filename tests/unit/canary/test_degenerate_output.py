"""Degenerate output without log-probabilities, in both directions, on a virtual clock.

A server (or a proxy stripping log-probabilities) answering ``!!`` to the
length limit or undecodable text with HTTP 200 passes every canary; the text
kind notes the shape and the ``degenerate`` rule confirms it over repeated
canaries (policy unready). A tiny random-weight model's ordinary output
(``"emmag"``, ``"ens checks"``), punctuation that ends on its own, one odd
reply, and a model whose correctness check matched meanwhile stay green.
"""

from __future__ import annotations

import pytest

from sentinel.canary.correctness import CORRECTNESS, CorrectnessEvidence, Fingerprint
from sentinel.canary.degenerate import DEGENERATE_PREFIX, degenerate_shape
from sentinel.canary.protocol import CanaryRequest, Reply
from sentinel.canary.result import CanaryResult, Generation, Reason
from sentinel.canary.spec import TEXT
from sentinel.canary.text import CANARY
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
from sentinel.verdict.hangs.degenerate import degenerate_hang

SENT = CanaryRequest(body={}, nonce="n")


@pytest.mark.parametrize(
    ("text", "finish"),
    [
        ("!!", "length"),
        ("!!!!!!!!", "length"),
        (" ! ! ", "length"),
        ("\ufffd\ufffd", "stop"),
        ("\x00\x01\x02x", "length"),
        ("\ue000\ue001", None),  # private use
    ],
)
def test_degenerate_shapes(text: str, finish: str | None) -> None:
    assert degenerate_shape(text, finish) is not None


@pytest.mark.parametrize(
    ("text", "finish"),
    [
        ("emmag", "length"),  # vLLM's tiny random-weight model
        ("ens checks", "length"),
        ("Ok.", "length"),
        ("ok", "stop"),
        ("!!", "stop"),  # the model ended on its own
        ("aaaa", "length"),  # letters: a word-piece repeated is a model's choice
        ("the the", "length"),
        ("\n\n", "length"),
        ("", "length"),
        ("caf\ufffd", "length"),  # one character cut in half at the limit
        ("**Ok", "length"),
        ("**", "length"),  # a working model opening its reply in bold, cut at two tokens
        ("...", "length"),
        ("--", "length"),
    ],
)
def test_ordinary_shapes(text: str, finish: str | None) -> None:
    assert degenerate_shape(text, finish) is None


def test_the_text_kind_passes_a_degenerate_reply_and_notes_its_shape() -> None:
    judged = CANARY.judge(
        SENT, Reply("!!", completion_tokens=2, finish_reason="length"), baseline_prompt_tokens=None
    )
    assert judged.reason is Reason.OK
    assert judged.detail.startswith(DEGENERATE_PREFIX)
    plain = CANARY.judge(
        SENT,
        Reply("emmag", completion_tokens=2, finish_reason="length"),
        baseline_prompt_tokens=None,
    )
    assert plain.reason is Reason.OK
    assert plain.detail == ""


def text(sent: float, reply: str = "!!", reason: Reason = Reason.OK) -> CanaryResult:
    shape = degenerate_shape(reply, "length")
    detail = "" if shape is None else DEGENERATE_PREFIX + shape
    return CanaryResult("text", TEXT, reason, sent, 0.1, detail=detail, completion_tokens=2)


def evidence(*results: CanaryResult, **kw: object) -> Evidence:
    kinds = {TEXT: KindEvidence(TEXT, results=results)}
    return Evidence(kinds=kinds, **kw)  # type: ignore[arg-type]


def hang(ev: Evidence) -> str | None:
    found = degenerate_hang(ev, Policy(), 100.0)
    return None if found is None else found.reason


def test_three_degenerate_replies_in_a_row_confirm_it_named() -> None:
    assert hang(evidence(text(5), text(10))) is None
    reason = hang(evidence(text(0, "emmag"), text(5), text(10), text(15)))
    assert reason is not None
    assert reason.startswith("degenerate output: 3 text canaries in a row")
    assert "'!' repeated to the length limit" in reason


def test_an_ordinary_reply_in_the_run_or_one_odd_reply_is_nothing() -> None:
    assert hang(evidence(text(5), text(10, "emmag"), text(15), text(20))) is None
    assert hang(evidence(*(text(5.0 * i, "ens checks") for i in range(10)))) is None
    failed = text(12, "", reason=Reason.TIMEOUT)  # says nothing about the shape
    assert hang(evidence(text(5), text(10), failed, text(15))) is not None


def test_a_matching_correctness_check_says_the_model_really_answers_so() -> None:
    gen = (Generation((5, 6), (-0.1, -0.2)),)
    check = CanaryResult("correctness", CORRECTNESS, Reason.OK, 11.0, 0.2, generations=gen)
    facts = CorrectnessEvidence(Fingerprint("m", "", "req", gen, 1e9), 0.0)
    kinds = {
        TEXT: KindEvidence(TEXT, results=(text(5), text(10), text(15))),
        CORRECTNESS: KindEvidence(CORRECTNESS, results=(check,)),
    }
    assert hang(Evidence(kinds=kinds, correctness=facts)) is None


def test_off_while_paused_and_counted_again_from_the_resume() -> None:
    paused = Lifecycle(Phase.PAUSED, 1.0, "paused")
    verdict_state = VerdictState(epoch=0, startup_passed=True)
    ev = evidence(text(5), text(10), text(15), lifecycle=paused)
    _, verdict = evaluate(verdict_state, ev, Policy(), 20.0)
    assert HangKind.DEGENERATE not in [h.kind for h in verdict.hangs]
    resumed = Lifecycle(Phase.AWAKE, 12.0, "", resumed_at=12.0)
    assert hang(evidence(text(5), text(10), text(15), lifecycle=resumed)) is None


@pytest.mark.parametrize("action", [Action.UNREADY, Action.RESTART, Action.ALERT])
def test_readiness_red_with_the_reason_by_policy(action: Action) -> None:
    state = VerdictState(epoch=0, startup_passed=True)
    ev = evidence(text(5), text(10), text(15))
    _, verdict = evaluate(state, ev, Policy(degenerate_policy=action), 20.0)
    assert [h.kind for h in verdict.hangs] == [HangKind.DEGENERATE]
    assert verdict.readiness.ok is (action is Action.ALERT)
    assert verdict.liveness.ok is (action is not Action.RESTART)
    if not verdict.readiness.ok:
        assert "degenerate output" in verdict.readiness.reason
    healthy = evidence(text(5, "emmag"), text(10, "emmag"), text(15, "emmag"))
    _, fine = evaluate(state, healthy, Policy(degenerate_policy=action), 20.0)
    assert fine.hangs == ()
    assert fine.readiness.ok
    assert fine.liveness.ok
