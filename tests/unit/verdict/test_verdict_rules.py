"""The new confirmed kinds and the path rule's pace judgement, on a virtual clock.

Cases from issue "progress, not motion" at the verdict level: a 500 storm, an
empty 200, resets on every request, a listener closed while the process
lives, a slow server whose path canaries stream at its pace, a path that
produces nothing while text works.
"""

from __future__ import annotations

import pytest

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
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


def result(
    sent: float,
    reason: Reason = Reason.OK,
    kind: CanaryKind = TEXT,
    *,
    took: float = 0.2,
    status: int | None = None,
    ttft: float | None = None,
    received: int | None = None,
    completion: int | None = None,
) -> CanaryResult:
    return CanaryResult(
        f"{kind}-canary",
        kind,
        reason,
        sent,
        took,
        http_status=status,
        ttft=ttft,
        tokens_received=received,
        completion_tokens=completion,
    )


def kinds(*text: CanaryResult) -> dict[CanaryKind, KindEvidence]:
    return {TEXT: KindEvidence(TEXT, results=text)}


def hangs_at(ev: Evidence, now: float, state: VerdictState | None = None) -> set[HangKind]:
    _, verdict = evaluate(state or VerdictState(), ev, Policy(), now)
    return {h.kind for h in verdict.hangs}


STORM = [result(1.0)] + [result(t, Reason.HTTP_STATUS, status=500) for t in range(10, 200, 5)]


@pytest.mark.parametrize(
    ("ev", "now", "broken"),
    [
        # Counters keep moving (prefills of real requests) but nothing completes.
        pytest.param(
            Evidence(kinds=kinds(*STORM), progress_available=True, last_progress_at=190.0),
            69.9,
            False,
            id="500-storm-before-window",
        ),
        pytest.param(
            Evidence(kinds=kinds(*STORM), progress_available=True, last_progress_at=190.0),
            70.0,
            True,
            id="500-storm-60s",
        ),
        pytest.param(
            Evidence(
                kinds=kinds(result(1.0), *(result(t, Reason.EMPTY) for t in range(10, 200, 5))),
                progress_available=True,
                last_progress_at=190.0,
            ),
            70.0,
            True,
            id="empty-200",
        ),
        pytest.param(
            Evidence(
                kinds=kinds(result(1.0), *(result(t, Reason.PROTOCOL) for t in range(10, 200, 5))),
                progress_available=True,
                last_progress_at=190.0,
            ),
            70.0,
            True,
            id="reset-on-every-request",
        ),
        pytest.param(
            Evidence(
                kinds=kinds(*STORM),
                progress_available=True,
                last_progress_at=190.0,
                last_real_completion_at=60.0,
            ),
            119.9,
            False,
            id="real-completions-push-the-window",
        ),
        pytest.param(
            Evidence(
                kinds=kinds(
                    result(1.0),
                    *(result(t, Reason.HTTP_STATUS, status=404) for t in range(10, 200, 5)),
                )
            ),
            500.0,
            False,
            id="4xx-is-not-broken",
        ),
        pytest.param(
            Evidence(
                kinds=kinds(
                    result(1.0),
                    result(10.0, Reason.PROTOCOL),  # in flight when the port closed
                    *(result(t, Reason.CONNECT) for t in range(15, 200, 5)),
                )
            ),
            500.0,
            False,
            id="resets-then-refusals-are-the-listener-rule",
        ),
        pytest.param(
            Evidence(kinds=kinds(*STORM[:10], result(55.0), *STORM[10:])),
            115.0,
            False,
            id="a-success-restarts-the-window",
        ),
    ],
)
def test_broken_every_canary_failing_fast_for_the_window(
    ev: Evidence, now: float, broken: bool
) -> None:
    assert (HangKind.BROKEN in hangs_at(ev, now)) is broken


def test_broken_has_its_own_action() -> None:
    ev = Evidence(kinds=kinds(*STORM), progress_available=True, last_progress_at=190.0)
    _, verdict = evaluate(VerdictState(), ev, Policy(broken_policy=Action.ALERT), 70.0)
    broken = [h for h in verdict.hangs if h.kind is HangKind.BROKEN]
    assert broken
    assert broken[0].action is Action.ALERT


PASSED = VerdictState(epoch=0, startup_passed=True)


@pytest.mark.parametrize(
    ("refused_since", "api_alive", "state", "now", "down"),
    [
        pytest.param(100.0, True, PASSED, 129.9, False, id="within-grace"),
        pytest.param(100.0, True, PASSED, 130.0, True, id="grace-over"),
        pytest.param(100.0, None, PASSED, 500.0, False, id="no-process-evidence"),
        pytest.param(100.0, False, PASSED, 500.0, False, id="process-gone-is-a-restart"),
        pytest.param(100.0, True, VerdictState(epoch=0), 500.0, False, id="before-startup"),
        pytest.param(None, True, PASSED, 500.0, False, id="answering"),
    ],
)
def test_listener_down_after_startup_while_the_api_server_lives(
    refused_since: float | None, api_alive: bool | None, state: VerdictState, now: float, down: bool
) -> None:
    ev = Evidence(
        kinds=kinds(result(1.0), *(result(t, Reason.CONNECT) for t in range(100, 500, 5))),
        refused_since=refused_since,
        api_alive=api_alive,
    )
    found = hangs_at(ev, now, state)
    assert (HangKind.LISTENER_DOWN in found) is down
    assert HangKind.ENGINE not in found  # a refusal is never an unanswered canary


def path_evidence(*pairs: tuple[CanaryResult, CanaryResult]) -> Evidence:
    warm = (result(1.0, kind=STRUCTURED), result(1.0))
    every = [warm, *pairs]
    return Evidence(
        kinds={
            TEXT: KindEvidence(TEXT, results=tuple(c for _, c in every)),
            STRUCTURED: KindEvidence(
                STRUCTURED,
                path=STRUCTURED != TEXT,
                results=tuple(r for r, _ in every),
                controls=tuple(c for _, c in every),
            ),
        },
        progress_available=True,
        last_progress_at=None,
    )


# 2 s per token: the 2-token text control takes ~4.2 s; a 32-token
# structured reply cannot finish in its 10 s deadline but streams at that pace.
SLOW_CONTROL = [result(t, took=4.2, ttft=2.1, completion=2) for t in (20.0, 30.0)]


@pytest.mark.parametrize(
    ("paths", "hung"),
    [
        pytest.param(
            [
                result(t, Reason.TIMEOUT, STRUCTURED, took=10.0, ttft=2.2, received=4)
                for t in (20, 30)
            ],
            False,
            id="slow-server-streams-at-engine-pace",
        ),
        pytest.param(
            [result(t, Reason.TIMEOUT, STRUCTURED, took=10.0, ttft=2.2) for t in (20, 30)],
            False,
            id="first-token-came-count-unknown",
        ),
        pytest.param(
            [result(t, Reason.TIMEOUT, STRUCTURED, took=10.0) for t in (20, 30)],
            True,
            id="nothing-before-deadline",
        ),
        pytest.param(
            [
                result(t, Reason.TIMEOUT, STRUCTURED, took=10.0, ttft=0.1, received=1)
                for t in (20, 30)
            ],
            True,
            id="stalled-after-first-token-while-text-streams",
        ),
        pytest.param(
            [result(t, Reason.EMPTY, STRUCTURED) for t in (20, 30)],
            True,
            id="empty-path-replies",
        ),
        pytest.param(
            [result(t, Reason.SCHEMA, STRUCTURED) for t in (20, 30)],
            False,
            id="wrong-schema-is-not-a-hang",
        ),
    ],
)
def test_path_hang_judges_the_path_by_its_own_progress(
    paths: list[CanaryResult], hung: bool
) -> None:
    controls = SLOW_CONTROL
    if paths[0].ttft == 0.1:  # the stalled case: text streams quickly
        controls = [result(t, took=0.4, ttft=0.1, completion=2) for t in (20.0, 30.0)]
    ev = path_evidence(*zip(paths, controls, strict=True))
    assert (HangKind(STRUCTURED) in hangs_at(ev, 41.0)) is hung
