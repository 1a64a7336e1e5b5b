"""Near-tie flips under GPU numerics, against the simulator, in both directions.

The simulator's ``near_ties`` fault gives every token close rivals (the
runner-up 0.1 nats behind, the third 0.3, a far one 2.0), as batch-variant
GPU kernels leave them. The fingerprint is taken with them; then every check
chooses the *third* candidate at its second token (``flip: third``, within
the 0.5-nat margin) and the server stays green, while a flip to the far
candidate (``flip: far``, other weights) turns readiness red as ``corrupt``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sentinel_sim.launch import SimProcess
from tests.loopback.sidecar import FAST, Sidecar, eventually, running_sidecar

CANARIES = {**FAST["canaries"], "correctness": {"interval": 1.0, "deadline": 2.0, "jitter": 0.0}}
WATCH = 8.0  # seconds of flipped checks watched (8 or more checks at 1 s)
RED_BUDGET = 30.0


@pytest.fixture
def sim() -> Iterator[SimProcess]:
    with SimProcess(
        scheduling_policy="priority", decode_tps=200, dev_mode=True, faults=("near_ties",)
    ) as process:
        yield process


async def _fingerprint(sidecar: Sidecar) -> dict[str, Any]:
    document: dict[str, Any] = (await sidecar.json("/fingerprint"))["correctness"]
    return document


async def _red_for_corruption(sidecar: Sidecar) -> bool:
    response = await sidecar.client.get(sidecar.url + "/readyz")
    return response.status_code == 503 and "corrupt output" in str(response.json()["reason"])


async def _true() -> bool:
    return True


async def test_a_flip_to_the_third_candidate_stays_green_a_far_one_is_corrupt(
    sim: SimProcess, tmp_path: Path
) -> None:
    async with running_sidecar(
        sim.base_url, canaries=CANARIES, diagnostics_dir=tmp_path
    ) as sidecar:
        await eventually(sidecar.green, 30, "startup, readiness and liveness green")

        async def taken() -> bool:
            return (await _fingerprint(sidecar))["fingerprint"] is not None

        await eventually(taken, 30, "a fingerprint taken")
        print_ = (await _fingerprint(sidecar))["fingerprint"]
        assert all(len(step) >= 2 for g in print_["generations"] for step in g["candidates"])

        sim.control.set_fault("near_ties", flip="third")
        failures, until = 0, time.monotonic() + WATCH
        while time.monotonic() < until:
            failures += (await sidecar.code("/readyz")) != 200
            await eventually(_true, 1.0, "a poll interval", interval=0.2)
        checks = (await _fingerprint(sidecar))["checks"]
        flipped = [
            c
            for c in checks
            if c["token_ids"] and c["token_ids"][0][1] != print_["generations"][0]["token_ids"][1]
        ]
        print(
            f"near-tie flips to the third candidate: {failures} readiness failures over {WATCH:g} s"
        )
        assert flipped  # the checks did flip, and were forgiven
        assert all(not c["departures"] for c in flipped)
        assert failures == 0

        sim.control.set_fault("near_ties", flip="far")
        took = await eventually(
            lambda: _red_for_corruption(sidecar), RED_BUDGET, "readiness red for corrupt output"
        )
        print(f"a flip outside the margin: readiness red {took:.1f} s after it began")
        assert await sidecar.code("/livez") == 200
