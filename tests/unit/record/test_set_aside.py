"""Startup that ends: the bounded retries before a never-conclusive kind is set aside."""

from __future__ import annotations

import pytest

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.record.set_aside import (
    SET_ASIDE_AFTER,
    never_conclusive,
    set_aside_reason,
    waiting_to_set_aside,
)
from sentinel.verdict import KindEvidence
from tests.unit.scheduling.test_scheduler import T0, VirtualClock, _specs, scheduling
from tests.unit.scheduling.test_text_fallback import NoTemplateVllm
from tests.unit.verdict.test_verdict import evidence, once

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


def test_the_wait_before_a_kind_is_set_aside_is_said_and_ends() -> None:
    assert waiting_to_set_aside([]) is None
    assert waiting_to_set_aside([NO_TEMPLATE] * 2) == (
        f"refused 2 of {SET_ASIDE_AFTER} before it is set aside (HTTP 400)"
    )
    assert waiting_to_set_aside([THINKING]) == (
        f"inconclusive 1 of {SET_ASIDE_AFTER} before it is set aside"
    )
    # Set aside: no longer waiting. A pass ever, or a failure of the server: never waiting.
    assert waiting_to_set_aside([NO_TEMPLATE] * SET_ASIDE_AFTER) is None
    assert waiting_to_set_aside([result(Reason.OK), NO_TEMPLATE]) is None
    assert waiting_to_set_aside([NO_TEMPLATE, result(Reason.TIMEOUT)]) is None


def test_startup_says_how_far_a_kind_is_from_being_set_aside() -> None:
    waiting = "refused 2 of 5 before it is set aside (HTTP 400)"
    kind = KindEvidence(STRUCTURED, set_aside_waiting=waiting, results=(NO_TEMPLATE,))
    verdict = once(evidence(kind), now=2.0)
    assert not verdict.startup.ok
    assert f"structured ({waiting}; last: http_status" in verdict.startup.reason


async def test_the_scheduler_says_the_wait_then_sets_the_kind_aside() -> None:
    fake: list[NoTemplateVllm] = []

    def server(clock: VirtualClock) -> NoTemplateVllm:
        fake.append(NoTemplateVllm(clock))
        return fake[0]

    every_second = {"interval": 1.0, "jitter": 0.0}
    said: set[str] = set()
    async with scheduling(_specs(text=every_second, structured=every_second), server=server) as h:  # type: ignore[arg-type]
        structured = h.ledger.records[STRUCTURED]
        for second in range(1, 20):
            await h.clock.run_until(T0 + second)
            said.add(structured.set_aside_waiting)
    assert f"refused 2 of {SET_ASIDE_AFTER} before it is set aside (HTTP 400)" in said
    assert not structured.enabled
    assert structured.set_aside_waiting == ""  # set aside: the wait is over
