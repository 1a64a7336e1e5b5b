"""Garbage without log-probabilities, against the simulator, in both directions.

Behind a proxy that strips log-probabilities (the simulator's ``no_logprobs``)
the correctness check cannot run and sets itself aside; a working server
stays green there. When its weights are lost (``weights_lost``: every
free-text reply ``!`` repeated to the length limit, HTTP 200) every canary
still passes, and the ``degenerate`` rule turns readiness red, named, within
:data:`RED_BUDGET`, while liveness stays green (policy unready); readiness
comes back once the replies are ordinary again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from sentinel_sim.launch import SimProcess
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar

RED_BUDGET = 90.0
WATCH = 6.0  # seconds a working server is watched for a readiness failure


@pytest.fixture
def sim() -> Iterator[SimProcess]:
    with SimProcess(
        scheduling_policy="priority", decode_tps=200, dev_mode=True, faults=("no_logprobs",)
    ) as process:
        yield process


async def _readiness(sidecar: Sidecar) -> tuple[int, str]:
    response = await sidecar.client.get(sidecar.url + "/readyz")
    return response.status_code, str(response.json()["reason"])


async def _red_for_degenerate(sidecar: Sidecar) -> bool:
    code, reason = await _readiness(sidecar)
    return code == 503 and "degenerate output" in reason


async def _failures_over(sidecar: Sidecar, seconds: float) -> tuple[int, int]:
    """Readiness and liveness failures over ``seconds`` of polling (a watch, not a wait)."""
    ready = live = 0
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        ready += (await sidecar.code("/readyz")) != 200
        live += (await sidecar.code("/livez")) != 200
        await eventually(_true, 1.0, "a poll interval", interval=0.2)
    return ready, live


async def _true() -> bool:
    return True


async def test_degenerate_output_without_logprobs_turns_readiness_red(sim: SimProcess) -> None:
    async with running_sidecar(sim.base_url) as sidecar:
        await eventually(sidecar.green, 30, "startup, readiness and liveness green")
        status = await sidecar.json("/status")
        assert "degenerate" not in str(status.get("hangs", ""))
        assert await _failures_over(sidecar, WATCH) == (0, 0)  # no logprobs: still green

        sim.control.set_fault("weights_lost")
        lost = time.monotonic()
        await eventually(
            lambda: _red_for_degenerate(sidecar), RED_BUDGET, "readiness red: degenerate output"
        )
        took = time.monotonic() - lost
        print(f"degenerate output without logprobs: readiness red {took:.1f} s after the fault")
        assert await sidecar.code("/livez") == 200  # policy unready: the kubelet keeps it
        assert "degenerate output" in str(await sidecar.json("/status"))

        sim.control.clear_fault("weights_lost")
        await eventually(sidecar.green, 30, "readiness back once the replies are ordinary")
