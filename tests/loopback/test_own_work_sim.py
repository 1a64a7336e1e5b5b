"""sentinel's own work is never real, and a dead decode loop is red (issue 39): the simulator.

Both directions, with the shortened windows of :data:`tests.loopback.sidecar.FAST`:

* no client at all, on every exposition the simulator offers (0.10, 0.20,
  0.32, and 0.32's behind a proxy that drops histograms): ``/status`` shows
  zero real progress and no real completion, whatever the canaries did (the
  multimodal baseline, the correctness canary's decode seen mid-flight);
* an idle auto-sleeping server beside sentinel sleeps, and stays asleep (no
  wake by sentinel);
* ``decode_dead`` (vLLM #45094: every request gets its first token at once
  and never a second, prefill alive, the engine stepping on CPU) with 0.32's
  exposition: red with the canaries the only traffic and with one-token
  traffic completing beside it; where the exposition cannot tell decode from
  first tokens ``/status`` says so and the hang window still turns it red.

The working twins (one-token traffic at saturation, slow decode, long
prefill) are in test_one_token_saturation_sim.py and test_legit_stalls_sim.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest

from chaos.load import LoadConfig
from sentinel_sim.expositions import EXPOSITIONS
from sentinel_sim.launch import SimProcess
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar
from tests.loopback.test_unseen_hangs_sim import _load

pytestmark = pytest.mark.timeout(120)

WATCH = 6.0  # seconds of no client watched, after the first canaries are in
RED_WITHIN = 20.0  # FAST's 4 s hang window, a canary deadline and scrapes, on a loaded machine


def _real(status: Any) -> dict[str, float]:
    totals = status["evidence"]["progress"]["epoch_totals"]
    return {k: float(v["progress"]) for k, v in totals.items() if float(v["progress"])}


@asynccontextmanager
async def _pair(exposition: str, **sim: Any) -> AsyncIterator[tuple[SimProcess, Sidecar]]:
    extra = ["--exposition", exposition, *sim.pop("extra_args", ())]
    with SimProcess(scheduling_policy="priority", extra_args=extra, **sim) as process:
        async with running_sidecar(process.base_url) as sidecar:
            yield process, sidecar


async def _no_client(exposition: str, sidecar: Sidecar) -> tuple[str, dict[str, Any]]:
    await eventually(sidecar.green, 40, f"{exposition}: green first")
    end = time.monotonic() + WATCH
    seen: dict[str, Any] = {}
    while time.monotonic() < end:
        status = await sidecar.json("/status")
        real, completion = _real(status), status["evidence"]["real_completion_age"]
        if real or completion is not None:
            seen = {"real": real, "real_completion_age": completion}
            break
        await asyncio.sleep(0.5)  # the polling interval, not a wait for a state
    sent = sum(
        s.value
        for family in sidecar.daemon.registry.collect()
        if family.name == "sentinel_canary"
        for s in family.samples
        if s.name.endswith("_total")
    )
    return exposition, {**seen, "canaries": sent}


async def test_no_client_is_zero_real_progress_on_every_exposition() -> None:
    """Every exposition at once, one simulator and sidecar each: nothing real ever shows."""
    async with AsyncExitStack() as stack:
        pairs = [await stack.enter_async_context(_pair(form)) for form in EXPOSITIONS]
        found = await asyncio.gather(
            *(
                _no_client(form, sidecar)
                for form, (_, sidecar) in zip(EXPOSITIONS, pairs, strict=True)
            )
        )
    print(dict(found))
    for exposition, seen in found:
        assert seen["canaries"] > 0, exposition
        assert set(seen) == {"canaries"}, (exposition, seen)


async def _red(sidecar: Sidecar) -> float:
    async def red() -> bool:
        return await sidecar.code("/livez") == 503

    return await eventually(red, RED_WITHIN, "liveness red")


async def _engine_hang(sidecar: Sidecar) -> str:
    hangs = (await sidecar.json("/status"))["verdict"]["hangs"]
    assert [h["kind"] for h in hangs] == ["engine"], hangs
    return str(hangs[0]["reason"])


def _one_token_load(target: str) -> Any:
    """Judges or scorers: one-token requests, completing on a dead decode loop too."""
    return _load(LoadConfig(target=target, concurrency=4, duration=10.0, max_tokens=1))


@pytest.mark.parametrize("beside", ["canaries-only", "one-token-traffic"])
async def test_a_dead_decode_loop_is_red(beside: str) -> None:
    async with AsyncExitStack() as stack:
        sim, sidecar = await stack.enter_async_context(_pair("0.32"))
        if beside == "one-token-traffic":
            await stack.enter_async_context(_one_token_load(sim.base_url))
        await eventually(sidecar.green, 40, "green first")
        sim.control.set_fault("decode_dead")
        took = await _red(sidecar)
        reason = await _engine_hang(sidecar)
        status = await sidecar.json("/status")
        progress = status["evidence"]["progress"]
        print(f"{beside}: red {took:.1f}s after decode died: {reason}; real {_real(status)}")
        assert progress["decode_evidence"] is True
        assert "decode" in reason
        if beside == "one-token-traffic":
            assert status["evidence"]["real_completion_age"] is not None  # they completed


async def test_where_decode_cannot_be_told_the_hang_window_still_applies() -> None:
    """Histograms dropped by a proxy: /status says decode is not told; canaries alone, red."""
    async with _pair("counters") as (sim, sidecar):
        await eventually(sidecar.green, 40, "green first")
        progress = (await sidecar.json("/status"))["evidence"]["progress"]
        assert progress["decode_evidence"] is False
        assert "cannot tell" in progress["decode"]
        sim.control.set_fault("decode_dead")
        took = await _red(sidecar)
        reason = await _engine_hang(sidecar)
        print(f"no first-token count: red {took:.1f}s after decode died: {reason}")
        assert "no engine progress" in reason


TTL, HOLD = 3.0, 3.0  # the server's --sleep-idle-ttl and auto_sleep_hold, scaled down
ASLEEP_WATCH = 8.0


async def test_an_idle_auto_sleeping_server_sleeps_and_sentinel_never_wakes_it() -> None:
    args = ["--sleep-idle-ttl", str(TTL), "--wake-seconds", "1.0"]
    with SimProcess(scheduling_policy="priority", dev_mode=True, extra_args=args) as sim:
        async with running_sidecar(sim.base_url, auto_sleep_hold=HOLD) as sidecar:
            await eventually(sidecar.green, 40, "green first")

            async def phase() -> str:
                return str((await sidecar.json("/status"))["lifecycle"]["phase"])

            async def asleep() -> bool:
                return await phase() == "asleep"

            took = await eventually(asleep, HOLD + TTL + 15, "asleep")
            wakes, was_asleep = 0, True
            end = time.monotonic() + ASLEEP_WATCH
            while time.monotonic() < end:
                now_asleep = await asleep()
                wakes += was_asleep and not now_asleep
                was_asleep = now_asleep
                await asyncio.sleep(0.25)  # the polling interval, not a wait for a state
            status = await sidecar.json("/status")
            section = status["sections"]["auto_sleep"]
            print(f"asleep {took:.1f}s after green; {wakes} wakes in {ASLEEP_WATCH:g}s; {section}")
            assert wakes == 0
            assert section["real_traffic_ago"] is None  # never any: the canaries are sentinel's
            assert _real(status) == {}
