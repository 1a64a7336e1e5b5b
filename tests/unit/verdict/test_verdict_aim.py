"""Aimed canaries in the verdict: an unanswered one is evidence against its own engine only.

Two data-parallel engines. Engine 1's work last moved at 10 and engine 0's at
40 unless a case says otherwise; the hang window is 15 s. A canary aimed at
an engine (``CanaryResult.engine``, or ``KindEvidence.outstanding_engines``
for one in flight) counts for that engine's partial hang alone, and for the
whole-server engine hang only once every engine has left one unanswered.
Unaimed canaries keep their meaning: they may have gone to any engine.
"""

from __future__ import annotations

import pytest

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.verdict import (
    EngineProgress,
    Evidence,
    HangKind,
    KindEvidence,
    Policy,
    VerdictState,
    evaluate,
)

TEXT = CanaryKind.TEXT


def unanswered(sent: float, engine: int | None = None) -> CanaryResult:
    return CanaryResult("text-canary", TEXT, Reason.TIMEOUT, sent, 8.0, engine=engine)


def ok(sent: float, engine: int | None = None) -> CanaryResult:
    return CanaryResult("text-canary", TEXT, Reason.OK, sent, 0.2, engine=engine)


def dp(
    *results: CanaryResult,
    engine0: float | None = 40.0,
    engine1: float | None = 10.0,
    outstanding: tuple[tuple[float, int | None], ...] = (),
) -> Evidence:
    """Two engines; the server's own progress last moved when the later of them did."""
    moved = [at for at in (engine0, engine1) if at is not None]
    return Evidence(
        kinds={
            TEXT: KindEvidence(
                TEXT,
                results=results,
                outstanding=tuple(sent for sent, _ in outstanding),
                outstanding_engines=tuple(engine for _, engine in outstanding),
            )
        },
        progress_available=True,
        last_progress_at=max(moved, default=None),
        engines=(EngineProgress("0", 0.0, engine0), EngineProgress("1", 0.0, engine1)),
    )


def hangs_at(ev: Evidence, now: float) -> list[tuple[str, ...]]:
    _, verdict = evaluate(VerdictState(), ev, Policy(), now)
    return [(str(h.kind), *map(str, h.engines)) for h in verdict.hangs]


@pytest.mark.parametrize(
    ("ev", "now", "expected"),
    [
        # Aimed at the flat engine, unanswered; engine 0 worked after it: engine 1 named.
        pytest.param(
            dp(ok(5.0, 0), unanswered(12.0, 1), ok(20.0, 0)),
            27.0,
            [("partial", "1")],
            id="aimed-at-the-stuck-engine",
        ),
        pytest.param(
            dp(ok(5.0, 0), unanswered(12.0, 1), ok(20.0, 0)), 26.9, [], id="inside-the-window"
        ),
        pytest.param(
            dp(ok(5.0, 0), ok(20.0, 0), outstanding=((12.0, 1),)),
            27.0,
            [("partial", "1")],
            id="aimed-and-still-in-flight",
        ),
        # Lost behind engine 0's slow queue while engine 0 kept moving: engine 1,
        # idle and flat, is not accused by a canary that never went to it...
        pytest.param(
            dp(ok(5.0, 1), unanswered(12.0, 0)),
            60.0,
            [],
            id="aimed-at-a-busy-engine-accuses-no-other",
        ),
        # ... whereas an unaimed one could have gone anywhere (today's meaning).
        pytest.param(
            dp(ok(5.0), unanswered(12.0)),
            27.0,
            [("partial", "1")],
            id="unaimed-accuses-every-flat-engine",
        ),
        # Aimed at engine 1, but engine 1 moved after it: not stuck.
        pytest.param(
            dp(unanswered(12.0, 1), ok(20.0, 0), engine1=13.0), 60.0, [], id="engine-1-moved"
        ),
    ],
)
def test_partial_rule_with_aimed_canaries(
    ev: Evidence, now: float, expected: list[tuple[str, ...]]
) -> None:
    assert hangs_at(ev, now) == expected


@pytest.mark.parametrize(
    ("ev", "now", "expected"),
    [
        # Nothing moved anywhere and nothing succeeded since 12, but only engine 1
        # was asked: one engine's silence is not the whole server's.
        pytest.param(
            dp(unanswered(12.0, 1), unanswered(20.0, 1), engine0=5.0, engine1=5.0),
            60.0,
            [],
            id="one-engine-accused",
        ),
        # Both engines left an aimed canary unanswered: the whole server, from the first.
        pytest.param(
            dp(unanswered(12.0, 1), unanswered(20.0, 0), engine0=5.0, engine1=5.0),
            27.0,
            [("engine",)],
            id="every-engine-accused",
        ),
        pytest.param(
            dp(unanswered(12.0, 1), engine0=5.0, engine1=5.0, outstanding=((20.0, 0),)),
            27.0,
            [("engine",)],
            id="every-engine-accused-one-in-flight",
        ),
        pytest.param(
            dp(unanswered(12.0, 1), unanswered(20.0, 0), engine0=5.0, engine1=5.0),
            26.9,
            [],
            id="every-engine-accused-inside-the-window",
        ),
        # Unaimed canaries keep their meaning: the whole server.
        pytest.param(
            dp(unanswered(12.0), engine0=5.0, engine1=5.0), 27.0, [("engine",)], id="unaimed"
        ),
    ],
)
def test_engine_rule_with_aimed_canaries(
    ev: Evidence, now: float, expected: list[tuple[str, ...]]
) -> None:
    assert hangs_at(ev, now) == expected


def test_an_aimed_canary_answered_elsewhere_is_no_whole_server_evidence() -> None:
    """Engine 0 worked after the canary aimed at it was sent: that canary is its own trouble."""
    ev = dp(unanswered(12.0, 1), unanswered(14.0, 0), engine0=16.0, engine1=5.0)
    assert [k for k, *_ in hangs_at(ev, 60.0)] == [str(HangKind.PARTIAL)]


def test_without_per_engine_evidence_an_aimed_canary_counts_for_the_server() -> None:
    ev = Evidence(
        kinds={TEXT: KindEvidence(TEXT, results=(unanswered(12.0, 1),))},
        progress_available=True,
        last_progress_at=5.0,
    )
    assert hangs_at(ev, 27.0) == [("engine",)]


def dp_decode(
    *results: CanaryResult,
    work: tuple[float | None, float | None] = (40.0, 40.0),
    decode: tuple[float | None, float | None] = (40.0, 5.0),
) -> Evidence:
    """Two engines that count first tokens: ``work`` is any progress, ``decode`` decode progress.

    Progress here is beyond sentinel's canaries already (the tracker's job);
    the server's own follows the later engine.
    """
    engines = tuple(
        EngineProgress(str(i), 0.0, work[i], decode_available=True, last_decode_at=decode[i])
        for i in (0, 1)
    )
    return Evidence(
        kinds={TEXT: KindEvidence(TEXT, results=results)},
        progress_available=True,
        last_progress_at=max((at for at in work if at is not None), default=None),
        decode_available=True,
        last_decode_at=max((at for at in decode if at is not None), default=None),
        engines=engines,
    )


@pytest.mark.parametrize(
    ("ev", "now", "expected"),
    [
        # Engine 1 prefills arrivals (its work moves until 40) but decoded nothing since 5.
        pytest.param(
            dp_decode(unanswered(12.0, 1)), 27.0, [("partial", "1")], id="prefill-without-decode"
        ),
        # Slowly, but it decodes: never stuck.
        pytest.param(
            dp_decode(unanswered(12.0, 1), decode=(40.0, 13.0)), 60.0, [], id="slow-decode"
        ),
        # It answered a canary aimed at it after the unanswered one was sent: not stuck.
        pytest.param(dp_decode(unanswered(12.0, 1), ok(20.0, 1)), 60.0, [], id="answered-since"),
        # Engine 0 is idle (its only work was sentinel's, discounted) but answers
        # the canaries aimed at it: it works, so engine 1 alone is stuck.
        pytest.param(
            dp_decode(unanswered(12.0, 1), ok(20.0, 0), work=(None, 40.0), decode=(None, 5.0)),
            27.0,
            [("partial", "1")],
            id="idle-engine-answering",
        ),
        # ... and without any answer from engine 0 nothing says another engine works.
        pytest.param(
            dp_decode(unanswered(12.0, 1), work=(None, 40.0), decode=(None, 5.0)),
            60.0,
            [],
            id="nothing-else-works",
        ),
        # Both prefill arrivals, neither decodes, both left a canary unanswered:
        # the whole server's hang, not two partial ones.
        pytest.param(
            dp_decode(unanswered(12.0, 1), unanswered(14.0, 0), decode=(5.0, 5.0)),
            27.0,
            [("engine",)],
            id="every-engine-prefilling-without-decode",
        ),
    ],
)
def test_engines_vouched_by_decode_and_by_answers(
    ev: Evidence, now: float, expected: list[tuple[str, ...]]
) -> None:
    assert hangs_at(ev, now) == expected
