"""Idle auto-sleep (issue 30, state 7), against the simulator, both ways.

The simulator's ``--sleep-idle-ttl`` is vLLM's proposed idle auto-sleep
(PR #47703): the engine sleeps after that long without an inference request,
and the next request is held in the API server while the engine wakes. With
canaries every second an idle server would never sleep; sentinel holds every
canary once no real traffic was seen for ``auto_sleep_hold``, so the server
sleeps, stays asleep with no canary waking it, and stays ready (a request
wakes it). A real request wakes it and is served; the canaries resume.
The broken twin in the same clothes: the wake never returns (``wake_hang``);
a real request's wake shows as ``/is_sleeping`` unanswered, the canaries go
out again, and the server still asleep past ``wake_bound`` is the ``wake``
hang, liveness red with the reason in ``/status``. A sleep asked for while the
canaries flow (``POST /sleep``, an RL trainer) keeps today's rules: unready.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from sentinel_sim.launch import SimProcess
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar

pytestmark = pytest.mark.timeout(150)

TTL = 3.0  # the server's --sleep-idle-ttl
HOLD = 3.0  # auto_sleep_hold, scaled down from the shipped 60 s
WAKE_BOUND = 6.0  # wake_bound, scaled down from the shipped 60 s
ASLEEP_WATCH = 8.0  # how long the idle sleep is watched for a canary waking it
RED_WITHIN = 90.0
CHAT = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}


@pytest.fixture
def sim() -> Iterator[SimProcess]:
    args = ["--sleep-idle-ttl", str(TTL), "--wake-seconds", "1.0"]
    with SimProcess(scheduling_policy="priority", dev_mode=True, extra_args=args) as process:
        yield process


@asynccontextmanager
async def _sidecar(sim: SimProcess, **overrides: Any) -> AsyncIterator[Sidecar]:
    settings: dict[str, Any] = {"auto_sleep_hold": HOLD, "wake_bound": WAKE_BOUND, **overrides}
    async with running_sidecar(sim.base_url, **settings) as sidecar:
        yield sidecar


def _section(status: Any) -> dict[str, Any]:
    return dict(status["sections"].get("auto_sleep") or {})


async def _phase(sidecar: Sidecar) -> str:
    return str((await sidecar.json("/status"))["lifecycle"]["phase"])


async def _asleep_idle(sidecar: Sidecar) -> bool:
    status = await sidecar.json("/status")
    return status["lifecycle"]["phase"] == "asleep" and bool(_section(status).get("asleep_idle"))


def _skipped(sidecar: Sidecar) -> float:
    """Canary steps held for the auto-sleep, read from the daemon's own registry."""
    value = sidecar.daemon.registry.get_sample_value(
        "sentinel_canaries_skipped_total", {"reason": "auto_sleep"}
    )
    return float(value or 0.0)


async def _chat(sim: SimProcess, client: httpx.AsyncClient) -> httpx.Response:
    body = {"model": sim.model, **CHAT}
    return await client.post(sim.base_url + "/v1/chat/completions", json=body)


async def test_an_idle_auto_sleeping_server_sleeps_stays_ready_and_wakes_for_a_user(
    sim: SimProcess,
) -> None:
    async with _sidecar(sim) as sidecar, httpx.AsyncClient(timeout=30.0) as client:
        failures = {"live": 0, "ready": 0}

        async def polled(check: Any) -> bool:
            failures["live"] += await sidecar.code("/livez") != 200
            failures["ready"] += await sidecar.code("/readyz") != 200
            return bool(await check())

        await eventually(sidecar.green, 30, "green first")
        took = await eventually(
            lambda: polled(lambda: _asleep_idle(sidecar)), 30, "the idle server asleep"
        )
        print(f"asleep idle {took:.1f}s after green (hold {HOLD:g}s, ttl {TTL:g}s)")
        # Asleep with nobody asking: no canary wakes it, and it stays ready.
        held_before = _skipped(sidecar)
        end = time.monotonic() + ASLEEP_WATCH
        awake_samples = 0
        while time.monotonic() < end:
            awake_samples += not await polled(lambda: _asleep_idle(sidecar))
            await asyncio.sleep(0.5)  # the polling interval, not a wait for a state
        held = _skipped(sidecar) - held_before
        status = await sidecar.json("/status")
        print(f"asleep {ASLEEP_WATCH:g}s: {held:.0f} canary steps held, {_section(status)}")
        assert awake_samples == 0  # no canary woke it
        assert held >= 4
        assert "wakes on request" in str((await sidecar.json("/readyz"))["reason"])
        # A user arrives: the request wakes it and is served; the canaries resume.
        sent_before = _sent(sidecar)  # none go out while held
        asked = time.monotonic()
        reply = await _chat(sim, client)
        served = time.monotonic() - asked
        assert reply.status_code == 200, reply.text
        await eventually(lambda: polled(lambda: _awake(sidecar)), 20, "awake after the user")
        await eventually(
            lambda: polled(lambda: _more_sent(sidecar, sent_before)), 20, "canaries resumed"
        )
        # Idle again: back to sleep, still never a failed probe.
        await eventually(lambda: polled(lambda: _asleep_idle(sidecar)), 30, "asleep again")
        status = await sidecar.json("/status")
        print(
            f"served after the wake in {served:.1f}s; {failures['live']} liveness and "
            f"{failures['ready']} readiness failures; hangs {status['verdict']['hangs']}"
        )
        assert failures == {"live": 0, "ready": 0}
        assert status["verdict"]["hangs"] == []


async def _awake(sidecar: Sidecar) -> bool:
    return await _phase(sidecar) == "awake"


def _sent(sidecar: Sidecar) -> float:
    total = 0.0
    for family in sidecar.daemon.registry.collect():
        if family.name == "sentinel_canary":
            total += sum(s.value for s in family.samples if s.name.endswith("_total"))
    return total


async def _more_sent(sidecar: Sidecar, before: float) -> bool:
    return _sent(sidecar) > before


async def test_a_wake_that_never_returns_is_the_wake_hang(sim: SimProcess) -> None:
    async with _sidecar(sim) as sidecar, httpx.AsyncClient(timeout=120.0) as client:
        await eventually(sidecar.green, 30, "green first")
        await eventually(lambda: _asleep_idle(sidecar), 30, "the idle server asleep")
        sim.control.set_fault("wake_hang")
        asked = time.monotonic()
        user = asyncio.create_task(_chat(sim, client))  # held for good: the wake never returns
        try:

            async def named() -> bool:
                hangs = (await sidecar.json("/status"))["verdict"]["hangs"]
                kinds = [str(h["kind"]) for h in hangs]
                return await sidecar.code("/livez") == 503 and kinds == ["wake"]

            await eventually(named, RED_WITHIN, "the wake hang named, liveness red")
            took = time.monotonic() - asked
            status = await sidecar.json("/status")
            reason = str(status["verdict"]["hangs"][0]["reason"])
            print(f"wake never returning: red {took:.1f}s after the user (bound {WAKE_BOUND:g}s)")
            print(f"reason: {reason}; section {_section(status)}")
            assert took >= WAKE_BOUND
            assert "does not wake" in reason
            assert "/is_sleeping unanswered" in reason
            assert not user.done()  # the user still waits: nothing but a restart serves it
        finally:
            user.cancel()
            await asyncio.gather(user, return_exceptions=True)


async def test_a_sleep_asked_for_while_canaries_flow_keeps_todays_rules(sim: SimProcess) -> None:
    """An RL trainer's ``POST /sleep`` on a server that also auto-sleeps: unready, not idle."""
    async with (
        _sidecar(sim, auto_sleep_hold=120.0) as sidecar,
        httpx.AsyncClient(timeout=10.0) as client,
    ):
        await eventually(sidecar.green, 30, "green first")
        reply = await client.post(sim.base_url + "/sleep?level=1")
        assert reply.status_code == 200, reply.text

        async def unready_asleep() -> bool:
            answer = await sidecar.json("/readyz")
            return await sidecar.code("/readyz") == 503 and "asleep" in str(answer["reason"])

        await eventually(unready_asleep, 20, "unready while asleep on request")
        status = await sidecar.json("/status")
        assert _section(status)["asleep_idle"] is False
        assert await sidecar.code("/livez") == 200
