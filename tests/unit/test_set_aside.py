"""Startup that ends: the bounded retries before a never-conclusive kind is set aside."""

from __future__ import annotations

import pytest

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.scheduling.set_aside import SET_ASIDE_AFTER, never_conclusive, set_aside_reason

STRUCTURED = CanaryKind("structured")


def result(reason: Reason, status: int | None = None, detail: str = "") -> CanaryResult:
    return CanaryResult(
        "structured",
        STRUCTURED,
        reason,
        started=1.0,
        duration=0.1,
        http_status=status,
        detail=detail,
    )


THINKING = result(Reason.INCONCLUSIVE, detail="only reasoning generated")
NO_TEMPLATE = result(Reason.HTTP_STATUS, 400, "default chat template is no longer allowed")


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        pytest.param(THINKING, True, id="reasoning-cut-short"),
        pytest.param(NO_TEMPLATE, True, id="400-no-template"),
        pytest.param(result(Reason.HTTP_STATUS, 422), True, id="422-refused-field"),
        pytest.param(result(Reason.HTTP_STATUS, 401), False, id="401-credentials"),
        pytest.param(result(Reason.HTTP_STATUS, 429), False, id="429-rate-limited"),
        pytest.param(result(Reason.HTTP_STATUS, 503), False, id="503-is-the-server"),
        pytest.param(result(Reason.TIMEOUT), False, id="timeout-is-the-server"),
        pytest.param(result(Reason.SCHEMA), False, id="schema-miss-is-a-failure"),
    ],
)
def test_what_can_never_pass_on_this_server(given: CanaryResult, expected: bool) -> None:
    assert never_conclusive(given) is expected


def test_a_kind_is_set_aside_after_a_bounded_run_of_never_conclusive_replies() -> None:
    assert set_aside_reason([THINKING] * (SET_ASIDE_AFTER - 1)) is None
    why = set_aside_reason([THINKING] * SET_ASIDE_AFTER)
    assert why is not None
    assert "5 canaries in a row inconclusive (only reasoning" in why
    why = set_aside_reason([THINKING, *[NO_TEMPLATE] * SET_ASIDE_AFTER])
    assert why is not None
    assert "refused with HTTP 400: default chat template" in why
    # The runner's detail names the status already; the reason says it once.
    prefixed = result(Reason.HTTP_STATUS, 400, "HTTP 400: default chat template")
    why = set_aside_reason([prefixed] * SET_ASIDE_AFTER)
    assert why is not None
    assert "refused with HTTP 400: default chat template" in why


def test_a_timeout_in_the_run_or_a_pass_ever_keeps_the_kind() -> None:
    run = [THINKING] * SET_ASIDE_AFTER
    assert set_aside_reason([*run[:-1], result(Reason.TIMEOUT)]) is None
    assert set_aside_reason([result(Reason.OK), *run]) is None
