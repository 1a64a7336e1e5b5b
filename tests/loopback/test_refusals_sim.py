"""A deliberate refusal is a state, not a hang: against the simulator, both directions.

vLLM 0.33's ``/pause`` in ``abort`` mode (an RL weight sync's pause) rejects
every new request: 503 "Generation is paused..." to a plain request, an HTTP
200 and an SSE error event with code 503 to a streamed one. With no
``/is_paused`` to ask (no dev mode), those refusals are the only word of the
pause: held (liveness green, readiness red naming it) and green again after
``/resume``; then a hung engine in the same release is still an engine hang.
A refusal in words sentinel does not know is unready at once with its body
quoted in ``/status``, live until ``refusal_bound`` (shortened here), red past
it. A streamed admission refusal is read end to end, so breaking the runner's
stream error path fails here. A server started paused (0.34
``--checkpoint-prepare-on-startup``) passes ``/startupz``, stays unready and
live, and is green after ``POST /checkpoint/restore``. The three run side by
side. Loopback windows (tests/loopback/sidecar.py).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from sentinel_sim.faults import UNKNOWN_REFUSAL
from sentinel_sim.launch import SimProcess
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar

pytestmark = pytest.mark.timeout(240)

GREEN_WITHIN = 45.0
HOLD = 10.0  # seconds held: more than twice the loopback hang window (4 s)
RED_WITHIN = 25.0
REFUSAL_BOUND = 12.0
QUEUE_FULL = "The engine is currently busy and cannot accept new requests. Please try again later."


@dataclass
class Watched:
    polls: int = 0
    failures: int = 0
    readiness: list[tuple[bool, str]] = field(default_factory=list)
    refusals: set[tuple[str, str]] = field(default_factory=set)  # (kind, refusal) of results


async def _watch(sidecar: Sidecar, seconds: float, seen: Watched) -> dict[str, Any]:
    """Poll /livez, /readyz and /status for ``seconds``; the last /status."""
    end = time.monotonic() + seconds
    status: dict[str, Any] = {}
    while time.monotonic() < end:
        seen.polls += 1
        if await sidecar.code("/livez") != 200:
            seen.failures += 1
        status = await sidecar.json("/status")
        readiness = status["verdict"]["readiness"]
        seen.readiness.append((bool(readiness["ok"]), str(readiness["reason"])))
        for kind, canary in status["canaries"].items():
            seen.refusals.update((kind, r["refusal"]) for r in canary["last"] if "refusal" in r)
        await asyncio.sleep(0.5)
    return status


def _last_reason(kind: str, wanted: str) -> Any:
    async def check(sidecar: Sidecar) -> bool:
        last = (await sidecar.json("/status"))["canaries"][kind]["last"]
        return bool(last) and last[-1]["reason"] == wanted

    return check


async def _pause_held_then_hang() -> tuple[Watched, Watched, float, list[str]]:
    paused, admission = Watched(), Watched()
    async with (
        SimProcess(extra_args=["--release", "0.33"]) as sim,
        running_sidecar(sim.base_url) as sidecar,
    ):
        await eventually(sidecar.green, GREEN_WITHIN, "green before the pause")
        await asyncio.to_thread(sim.control.set_fault, "pause", mode="abort")
        await _watch(sidecar, HOLD, paused)
        await asyncio.to_thread(sim.control.clear_fault, "pause")
        await eventually(sidecar.green, GREEN_WITHIN, "green again after the resume")
        # The streamed admission refusal (HTTP 200, then the error event): its own reason.
        await asyncio.to_thread(sim.control.set_fault, "refuse", message=QUEUE_FULL)
        await eventually(
            lambda: _last_reason("text", "admission")(sidecar), 10.0, "a streamed admission refusal"
        )
        await _watch(sidecar, 1.0, admission)
        await asyncio.to_thread(sim.control.clear_fault, "refuse")
        await eventually(sidecar.green, GREEN_WITHIN, "green again after the refusals")
        await asyncio.to_thread(sim.control.set_fault, "engine_hang")

        async def red() -> bool:
            return await sidecar.code("/livez") == 503

        took = await eventually(red, RED_WITHIN, "/livez 503 for a hung engine")
        status = await sidecar.json("/status")
        return paused, admission, took, [str(h["kind"]) for h in status["verdict"]["hangs"]]


async def _unknown_refusal() -> tuple[Watched, dict[str, Any], float]:
    seen = Watched()
    async with (
        SimProcess() as sim,
        running_sidecar(sim.base_url, refusal_bound=REFUSAL_BOUND) as sidecar,
    ):
        await eventually(sidecar.green, GREEN_WITHIN, "green before the refusals")
        started = time.monotonic()
        await asyncio.to_thread(sim.control.set_fault, "refuse")
        status = await _watch(sidecar, REFUSAL_BOUND - 3.0, seen)

        async def red() -> bool:
            return await sidecar.code("/livez") == 503

        await eventually(red, RED_WITHIN, "/livez 503 past the refusal bound")
        return seen, status, time.monotonic() - started


async def _checkpoint_start() -> tuple[Watched, list[int], bool]:
    """0.34's --checkpoint-prepare-on-startup: started paused until a restore."""
    seen = Watched()
    async with (
        SimProcess(extra_args=["--checkpoint-prepare-on-startup"]) as sim,
        running_sidecar(sim.base_url) as sidecar,
    ):

        async def started_paused() -> bool:
            return await sidecar.code("/startupz") == 200

        await eventually(started_paused, GREEN_WITHIN, "/startupz 200 while started paused")
        await _watch(sidecar, HOLD / 2, seen)
        codes = [await sidecar.code(p) for p in ("/startupz", "/readyz", "/livez")]
        async with httpx.AsyncClient(timeout=10.0) as client:
            restored = await client.post(sim.base_url + "/checkpoint/restore")
        await eventually(sidecar.green, GREEN_WITHIN, "green after the restore")
        return seen, codes, restored.status_code == 200


async def test_refusals_are_states_held_and_bounded() -> None:
    (
        (paused, admission, took, kinds),
        (unknown, status, red_after),
        (start, codes, restored),
    ) = await asyncio.gather(_pause_held_then_hang(), _unknown_refusal(), _checkpoint_start())
    print(f"paused (0.33 abort): {paused.failures} liveness failures in {paused.polls} polls")
    print(
        f"hung engine after: red in {took:.1f}s {kinds}; unknown refusal red after {red_after:.1f}s"
    )
    # The pause: held, readiness red naming it, the streamed canary's refusal read as paused.
    assert paused.failures == 0
    assert paused.polls > HOLD
    held = paused.readiness[len(paused.readiness) // 2 :]
    assert all(not ok for ok, _ in held), held
    assert any("Generation is paused" in why for _, why in held), held
    assert ("text", "paused") in paused.refusals, paused.refusals  # streamed
    assert ("correctness", "paused") in paused.refusals, paused.refusals  # a plain 503
    assert ("text", "admission") in admission.refusals, admission.refusals
    # The same release hung: still an engine hang.
    assert took <= RED_WITHIN
    assert "engine" in kinds, kinds
    # The unknown body: unready at once with the body quoted, live until the bound.
    assert unknown.failures == 0
    late = unknown.readiness[len(unknown.readiness) // 2 :]
    assert all(not ok for ok, _ in late), late
    assert any("cannot tell" in why and UNKNOWN_REFUSAL in why for _, why in late), late
    assert status["refusals"]["unknown"]["message"] == UNKNOWN_REFUSAL
    assert REFUSAL_BOUND - 1.0 <= red_after <= REFUSAL_BOUND + RED_WITHIN
    # Started paused: startup passed, unready naming it, live, and green after the restore.
    assert codes == [200, 503, 200], codes
    assert start.failures == 0
    assert all(not ok and why.startswith("started paused") for ok, why in start.readiness)
    assert restored
