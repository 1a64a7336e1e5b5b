"""A weight update that never ends, against the simulator, in both directions.

The simulator's ``weight_update`` fault is one weight-transfer RPC in flight
(``vllm:rl_weight_update_operations_in_flight`` 1, the engine loop blocked,
so ``/is_sleeping`` and ``/is_paused`` wait and time out, as on vLLM 0.32).
One that ends within ``weight_update_bound`` is a hold and nothing more; one
whose trainer died (no duration) is readiness red with its age during the
hold, then the named ``weight_update`` hang past the bound, liveness green
(policy unready), and ``/status`` says the silent lifecycle source cannot
tell instead of reading it as awake.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from sentinel_sim.launch import SimProcess
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar

BOUND = 6.0
RED_BUDGET = BOUND + 20.0


@pytest.fixture
def sim() -> Iterator[SimProcess]:
    with SimProcess(scheduling_policy="priority", decode_tps=200, dev_mode=True) as process:
        yield process


async def _readiness(sidecar: Sidecar) -> tuple[int, str]:
    response = await sidecar.client.get(sidecar.url + "/readyz")
    return response.status_code, str(response.json()["reason"])


async def _reason_has(sidecar: Sidecar, words: str) -> bool:
    code, reason = await _readiness(sidecar)
    return code == 503 and words in reason


def _cannot_tell(document: Any) -> str | None:
    """The lifecycle's "cannot tell", wherever /status nests it."""
    if isinstance(document, dict):
        found = document.get("cannot_tell")
        if isinstance(found, str):
            return found
        values: Any = document.values()
    elif isinstance(document, list):
        values = document
    else:
        return None
    return next((f for f in map(_cannot_tell, values) if f), None)


async def test_a_weight_update_whose_trainer_died_is_named_past_its_bound(sim: SimProcess) -> None:
    async with running_sidecar(sim.base_url, weight_update_bound=BOUND) as sidecar:
        await eventually(sidecar.green, 30, "startup, readiness and liveness green")

        # The working twin: an update that ends within the bound is a hold, never a hang.
        sim.control.set_fault("weight_update", duration=2.0)
        await eventually(lambda: _reason_has(sidecar, "weight update is in flight"), 10, "hold")
        await eventually(sidecar.green, 30, "green again once the update finished")
        assert "weight_update" not in str((await sidecar.json("/status")).get("hangs", ""))

        # The trainer died mid-transfer: the operation stays in flight.
        sim.control.set_fault("weight_update")
        stuck = time.monotonic()
        await eventually(
            lambda: _reason_has(sidecar, "paused: a weight update is in flight for"), 10, "hold"
        )
        await eventually(
            lambda: _reason_has(sidecar, "the trainer may have died"), RED_BUDGET, "named hang"
        )
        took = time.monotonic() - stuck
        print(f"weight update stuck: named hang {took:.1f} s after it began (bound {BOUND:g} s)")
        assert took >= BOUND
        assert await sidecar.code("/livez") == 200  # policy unready: the kubelet keeps it

        async def cannot_tell() -> bool:
            return _cannot_tell(await sidecar.json("/status")) is not None

        await eventually(cannot_tell, 20, "/status: the blocked lifecycle endpoints cannot tell")
        said = _cannot_tell(await sidecar.json("/status")) or ""
        assert "/is_" in said
        assert await sidecar.code("/livez") == 200

        sim.control.clear_fault("weight_update")
        await eventually(sidecar.green, 30, "green once the update ended")
