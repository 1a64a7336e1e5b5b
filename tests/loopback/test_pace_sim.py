"""The verdict's pace on the simulator: judged seldom while nothing is in play, at
every tick once something is, and a hang is red as soon as before.

At idle between canaries nothing is in play: ``/status`` says so and the
verdict is published about once per quiet interval, not at every tick. A hung
engine under the same settings is red within the usual bound, and while red
the verdict is judged at every tick again.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from sentinel_sim.launch import SimProcess
from tests.loopback.sidecar import FAST, eventually, running_sidecar

pytestmark = pytest.mark.timeout(120)

# Canaries sparse against the ticks (the text canary every 8 s, the others every
# 30 s), so most ticks fall between canaries, as at the shipped cadences.
SPARSE: dict[str, Any] = {
    "text": {"interval": 8.0, "deadline": 2.0, "jitter": 0.0},
    "structured": {"interval": 30.0, "deadline": 2.0},
    "multimodal": {"interval": 30.0, "deadline": 2.0},
    "correctness": {"interval": 30.0, "deadline": 2.0},
}
WATCH = 8.0  # seconds of idle over which the judgements are counted


async def test_an_idle_server_is_judged_seldom_and_a_hang_at_every_tick() -> None:
    tick = FAST["eval_interval"]
    with SimProcess() as sim:
        async with running_sidecar(sim.base_url, canaries=SPARSE) as sidecar:
            await eventually(sidecar.green, 30, "startup, readiness and liveness all 200")
            quiet = sidecar.daemon.settings.quiet_interval
            assert quiet > tick

            async def nothing_in_play() -> bool:
                pace = (await sidecar.json("/status"))["verdict"]["pace"]
                return bool(pace["in_play"] is None and pace["every"] == quiet)

            await eventually(nothing_in_play, 30, "/status: nothing in play at idle")
            first = (await sidecar.json("/status"))["revision"]
            started = time.monotonic()
            await eventually(lambda: _after(started + WATCH), WATCH + 5, "the idle watch")
            judged = (await sidecar.json("/status"))["revision"] - first
            print(f"judged {judged} times in {WATCH:.0f} s")
            # Every tick would have published WATCH / tick = 32 times; quiet, one per
            # second (a quarter of FAST's hang window), and a few around a canary.
            assert judged < 0.75 * WATCH / tick, judged
            assert (await sidecar.code("/livez")) == 200

            sim.control.set_fault("engine_hang")
            hung = time.monotonic()

            async def red() -> bool:
                return await sidecar.code("/livez") == 503

            took = await eventually(red, 40, "/livez 503 on the engine hang", interval=0.05)
            pace = (await sidecar.json("/status"))["verdict"]["pace"]
            assert pace == {"every": tick, "in_play": "an answer is red"}
            print(f"engine hang red after {time.monotonic() - hung:.2f} s ({took:.2f} s polled)")
            sim.control.clear_all()


async def _after(moment: float) -> bool:
    return time.monotonic() >= moment
