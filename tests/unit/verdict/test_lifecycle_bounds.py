"""A lifecycle phase that never ends, in both directions, on a virtual clock.

A weight update whose trainer died mid-transfer leaves vLLM's in-flight
gauge at 1: the hold is readiness red with its age and bound, and past
``weight_update_bound`` a hang of its own, named (policy unready); an update
that finishes within it never is, and the bound is timed from the update's
start, not from a pause before it. A lifecycle endpoint that stops answering
is "cannot tell", with its last word kept, never read as awake.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from sentinel.evidence.lifecycle_poll import LifecyclePoller
from sentinel.record.lifecycle import KEEP_WORD, LifecycleTracker, Readings, heard, keeps_word
from sentinel.verdict import Evidence, HangKind, Lifecycle, Phase, Policy, VerdictState, evaluate
from sentinel.verdict.hangs.weight_update import WEIGHT_UPDATE_WHY

UPDATING = {"weight_updates": 1.0}
DONE = {"weight_updates": 0.0}


def tracked(*steps: tuple[float, Readings]) -> Lifecycle:
    tracker = LifecycleTracker()
    for at, readings in steps:
        tracker.update(readings, at)
    return tracker.current


def judged(life: Lifecycle, now: float, **policy: object) -> tuple[list[HangKind], bool, bool, str]:
    state = VerdictState(epoch=0, startup_passed=True)
    _, verdict = evaluate(state, Evidence(lifecycle=life), Policy(**policy), now)  # type: ignore[arg-type]
    hangs = [h.kind for h in verdict.hangs]
    return hangs, verdict.readiness.ok, verdict.liveness.ok, verdict.readiness.reason


def test_a_weight_update_is_a_hold_with_its_age_until_its_bound() -> None:
    life = tracked((0.0, Readings(gauges=UPDATING)))
    assert (life.phase, life.why, life.why_since) == (Phase.PAUSED, WEIGHT_UPDATE_WHY, 0.0)
    hangs, ready, live, reason = judged(life, 299.0)
    assert (hangs, ready, live) == ([], False, True)
    assert reason == "paused: a weight update is in flight for 299s (bound 300s)"


def test_a_weight_update_past_its_bound_is_named_and_unready() -> None:
    life = tracked((0.0, Readings(gauges=UPDATING)), (300.0, Readings(gauges=UPDATING)))
    hangs, ready, live, reason = judged(life, 300.0)
    assert HangKind.WEIGHT_UPDATE in hangs
    assert (ready, live) == (False, True)
    assert reason.startswith("weight update in flight for 300s: the trainer may have died")
    _, _, live_restart, _ = judged(life, 300.0, weight_update_policy="restart")
    assert not live_restart  # the operator's choice: reload the weights from disk


def test_an_update_that_finishes_within_its_bound_is_never_a_hang() -> None:
    life = tracked((0.0, Readings(gauges=UPDATING)), (30.0, Readings(gauges=DONE)))
    assert (life.phase, life.resumed_at) == (Phase.AWAKE, 30.0)
    hangs, _, live, _ = judged(life, 1000.0)
    assert HangKind.WEIGHT_UPDATE not in hangs
    assert live


def test_the_bound_is_timed_from_the_update_not_the_pause_before_it() -> None:
    paused = Readings(is_paused=True)
    life = tracked((0.0, paused), (800.0, Readings(is_paused=True, gauges=UPDATING)))
    assert (life.since, life.why_since) == (0.0, 800.0)
    hangs, _, _, reason = judged(life, 1000.0)
    assert HangKind.WEIGHT_UPDATE not in hangs
    assert "for 200s" in reason
    hangs, _, _, _ = judged(life, 1100.0)
    assert HangKind.WEIGHT_UPDATE in hangs


def test_a_source_that_stops_answering_is_cannot_tell_and_keeps_its_word() -> None:
    silent = ("GET /is_paused: no answer within 2 s",)
    life = tracked(
        (0.0, Readings(is_paused=True)), (5.0, Readings(is_paused=True, unanswered=silent))
    )
    assert life.phase is Phase.PAUSED  # never read as awake: no resume, no crash loop
    assert life.cannot_tell.startswith("cannot tell: GET /is_paused: no answer")
    assert life.cannot_tell_since == 5.0
    later = tracked(
        (0.0, Readings(is_paused=True)),
        (5.0, Readings(is_paused=True, unanswered=silent)),
        (9.0, Readings(is_paused=True, unanswered=silent)),
    )
    assert later.cannot_tell_since == 5.0
    assert later.cannot_tell.endswith("(its last word kept)")
    back = tracked((5.0, Readings(unanswered=silent)), (9.0, Readings(is_paused=False)))
    assert (back.cannot_tell, back.cannot_tell_since) == ("", None)


def test_the_last_word_is_kept_for_a_bounded_time_only() -> None:
    """A missed poll never flips a pause to awake; a stale "asleep" never hides a hang long."""
    silent = ("GET /is_sleeping: no answer within 2 s",)
    assert heard("/is_sleeping", None, True, silent, keep=True) is True
    assert heard("/is_sleeping", None, True, silent, keep=False) is None
    assert heard("/is_paused", False, True, silent, keep=False) is False  # it answered
    assert keeps_word(None, 100.0)
    assert keeps_word(100.0, 100.0 + KEEP_WORD - 0.1)
    assert not keeps_word(100.0, 100.0 + KEEP_WORD)
    stale = tracked(
        (0.0, Readings(is_sleeping=True)),
        (5.0, Readings(is_sleeping=True, unanswered=silent)),
        (5.0 + KEEP_WORD, Readings(unanswered=silent)),
    )
    assert stale.phase is Phase.AWAKE  # judged without it: the engine rules are on again
    assert stale.cannot_tell.endswith("(judged without it)")


def _poller(handler: httpx.MockTransport) -> LifecyclePoller:
    client = httpx.AsyncClient(transport=handler)
    return LifecyclePoller(client, "http://vllm", lambda: 0.0, timeout=0.5)


@pytest.mark.parametrize(
    ("answer", "unanswered"),
    [
        ("timeout", "GET /is_paused: no answer within 0.5 s"),
        (500, "GET /is_paused: HTTP 500"),
        ("garbage", "GET /is_paused: not JSON"),
        ("nested", "GET /is_paused: not JSON"),  # past the recursion limit: hostile, no crash
        ("huge", "GET /is_paused: BodyTooLarge"),
    ],
)
def test_the_poller_names_an_endpoint_that_is_there_but_silent(
    answer: object, unanswered: str
) -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/is_sleeping":
            return httpx.Response(200, json={"is_sleeping": False})
        if answer == "timeout":
            raise httpx.ReadTimeout("slow", request=request)
        if answer == "garbage":
            return httpx.Response(200, content=b"<html>")
        if answer == "nested":
            return httpx.Response(200, content=b"[" * 4_000)
        if answer == "huge":
            return httpx.Response(200, content=b" " * 10_000)
        return httpx.Response(int(str(answer)))

    poll = asyncio.run(_poller(httpx.MockTransport(handle)).poll())
    assert (poll.is_sleeping, poll.is_paused, poll.unanswered) == (False, None, (unanswered,))


def test_an_absent_endpoint_is_no_evidence_not_cannot_tell() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404)

    poll = asyncio.run(_poller(httpx.MockTransport(handle)).poll())
    assert (poll.is_sleeping, poll.is_paused, poll.unanswered) == (None, None, ())
