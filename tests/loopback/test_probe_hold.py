"""``/startupz`` and ``/readyz`` hold a settling "not yet" over a real socket.

A restarted server's first canaries are under way when the kubelet asks: a
held probe passes the moment the published answer does, a probe of an answer
that is not settling is answered at once, and a hold that runs out answers
what is true then.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace

import httpx
import pytest
from prometheus_client import CollectorRegistry

from sentinel.evaluation.health import HealthState, ProbeAnswer
from sentinel.serve.http import HttpServer

HOLD = 1.5


@pytest.fixture
async def held() -> AsyncIterator[tuple[HealthState, httpx.AsyncClient]]:
    state = HealthState()
    http = HttpServer(state, CollectorRegistry(), "127.0.0.1", 0, probe_hold=HOLD)
    await http.start()
    try:
        async with httpx.AsyncClient(base_url=http.url, timeout=5) as client:
            yield state, client
    finally:
        await http.stop()


async def _publish_later(state: HealthState, delay: float, which: str, answer: ProbeAnswer) -> None:
    await asyncio.sleep(delay)  # the verdict landing while the probe is held
    snapshot = state.snapshot()
    if which == "startup":
        await state.publish(replace(snapshot, startup=answer))
    else:
        await state.publish(replace(snapshot, readiness=answer))


async def test_a_settling_startup_passes_the_moment_the_verdict_does(
    held: tuple[HealthState, httpx.AsyncClient],
) -> None:
    state, client = held
    assert state.snapshot().startup.settling  # before any verdict: startup waits on canaries
    later = asyncio.create_task(
        _publish_later(state, 0.3, "startup", ProbeAnswer(True, "the server serves"))
    )
    began = time.monotonic()
    response = await client.get("/startupz")
    took = time.monotonic() - began
    await later
    assert response.status_code == 200
    assert 0.25 <= took < HOLD  # held, and answered as soon as it passed


async def test_readiness_waiting_on_canaries_in_flight_is_held_then_passes(
    held: tuple[HealthState, httpx.AsyncClient],
) -> None:
    state, client = held
    waits = ProbeAnswer(False, "readiness waits on structured", settling=True)
    await state.publish(replace(state.snapshot(), readiness=waits))
    later = asyncio.create_task(
        _publish_later(state, 0.2, "readiness", ProbeAnswer(True, "every canary kind succeeded"))
    )
    response = await client.get("/readyz")
    await later
    assert response.status_code == 200


async def test_a_not_yet_that_is_not_settling_is_answered_at_once(
    held: tuple[HealthState, httpx.AsyncClient],
) -> None:
    state, client = held
    hung = ProbeAnswer(False, "hang confirmed: engine_stalled")
    await state.publish(replace(state.snapshot(), readiness=hung))
    began = time.monotonic()
    response = await client.get("/readyz")
    assert response.status_code == 503
    assert time.monotonic() - began < HOLD / 2


async def test_a_hold_that_runs_out_answers_what_is_true_then(
    held: tuple[HealthState, httpx.AsyncClient],
) -> None:
    state, client = held
    began = time.monotonic()
    response = await client.get("/startupz")
    took = time.monotonic() - began
    assert response.status_code == 503
    assert response.json()["reason"] == state.snapshot().startup.reason
    assert HOLD - 0.05 <= took < HOLD + 1.0
    # /livez is never held: the kubelet's restart decision stays immediate.
    began = time.monotonic()
    assert (await client.get("/livez")).status_code == 200
    assert time.monotonic() - began < 0.5
