"""One-token traffic at saturation (issue 30), against the simulator, both ways.

A prefill worker in a disaggregated pool gets only ``max_tokens: 1`` requests
from the NIXL/Mooncake proxies (judges and scorers do too). Saturated, its
queue never empties and no request decodes past its first token, while the
priority canary passes: its completions are its queue being served, so it
stays green. The same traffic on a server that admits nothing but the
canary completes nothing: *starved*.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from chaos.load import LoadConfig
from sentinel_sim.launch import SimProcess
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar
from tests.loopback.test_unseen_hangs_sim import _load

pytestmark = pytest.mark.timeout(240)

GREEN_WITHIN = 45.0
STARVED_WITHIN = 35.0  # as in test_unseen_hangs_sim: 60 s at the shipped window, scaled
HOLD = 30.0  # twice the shipped starvation rule's restart time on the old rule (15.6 s)
MAX_NUM_SEQS = 4
CONCURRENCY = 32  # eight times max_num_seqs: the waiting queue never empties


def _one_token_load(target: str) -> contextlib.AbstractAsyncContextManager[None]:
    """The closed-loop one-token load, run again and again for the whole test."""
    return _load(LoadConfig(target=target, concurrency=CONCURRENCY, duration=20.0, max_tokens=1))


async def _waiting(sidecar: Sidecar) -> bool:
    status = await sidecar.json("/status")
    return float(status["evidence"]["waiting_real"] or 0) >= 1


async def test_a_saturated_server_fed_only_one_token_requests_stays_green() -> None:
    async with (
        SimProcess(scheduling_policy="priority", max_num_seqs=MAX_NUM_SEQS) as sim,
        _one_token_load(sim.base_url),
        running_sidecar(sim.base_url) as sidecar,
    ):
        await eventually(sidecar.green, GREEN_WITHIN, "green first")
        await eventually(lambda: _waiting(sidecar), 20.0, "real requests shown waiting")
        failures, waiting_samples, samples = 0, 0, 0
        end = time.monotonic() + HOLD
        while time.monotonic() < end:
            if await sidecar.code("/livez") != 200:
                failures += 1
            samples += 1
            waiting_samples += await _waiting(sidecar)
            await asyncio.sleep(0.5)  # the polling interval, not a wait for a state
        status = await sidecar.json("/status")
        print(
            f"one-token saturation: {failures} liveness failures in {HOLD:.0f}s, "
            f"waiting in {waiting_samples}/{samples} samples, "
            f"hangs {status['verdict']['hangs']}"
        )
        assert failures == 0
        assert waiting_samples > samples // 2, "saturated: the queue stayed non-empty"
        assert status["canaries"]["text"]["passing"]


async def test_one_token_traffic_a_scheduler_never_admits_is_starved() -> None:
    async with (
        SimProcess(scheduling_policy="priority", max_num_seqs=MAX_NUM_SEQS) as sim,
        _one_token_load(sim.base_url),
        running_sidecar(sim.base_url) as sidecar,
    ):
        await eventually(sidecar.green, GREEN_WITHIN, "green first")
        sim.control.set_fault("starve", below=0)  # only negative priorities admitted

        async def red() -> bool:
            return await sidecar.code("/livez") == 503

        took = await eventually(red, STARVED_WITHIN, "/livez 503")
        status = await sidecar.json("/status")
        kinds = [str(h["kind"]) for h in status["verdict"]["hangs"]]
        print(f"one-token starved: red after {took:.1f}s, {kinds}")
        assert kinds == ["starved"]
