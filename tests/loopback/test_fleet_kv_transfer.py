"""A disaggregated decode node (issue 30, state 9), against the simulator, both ways.

Real requests carry ``kv_transfer_params`` (``do_remote_prefill``, what a
disaggregation proxy sends a decode node); the simulator's ``remote_kv``
fault is the node's NIXL connector: each such request waits deferred
(``vllm:num_requests_waiting_by_reason{reason="deferred"}``) until its
transfer lands, while sentinel's canaries, which carry none, are served
locally. Transfers landing within the lease under load are a working node:
green and ready over the hold. Transfers that never land (``land: never``)
are the ``kv_transfer`` hang within the bound, readiness red with the reason
in ``/status``, liveness green (policy unready): under NIXL, whose landing
counter the node exposes, and under Mooncake, where no real progress stands in.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from chaos.load import LoadConfig
from sentinel_sim.launch import SimProcess
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar
from tests.loopback.test_unseen_hangs_sim import _load

pytestmark = pytest.mark.timeout(120)

BOUND = 5.0  # kv_transfer_bound, scaled down from the shipped 120 s
LAND_S = 1.0  # each transfer's wait on the working node (NIXL's lease is 30 s)
HOLD = 10.0
RED_WITHIN = 90.0
REMOTE = {"do_remote_prefill": True, "remote_engine_id": "prefill-0", "remote_block_ids": [1]}


@pytest.fixture
def sim() -> Iterator[SimProcess]:
    with SimProcess(scheduling_policy="priority", decode_tps=200) as process:
        yield process


def _routed(target: str) -> LoadConfig:
    """The proxy's routed traffic: every request's KV prefilled elsewhere."""
    return LoadConfig(
        target=target, concurrency=4, duration=20.0, max_tokens=8, kv_transfer_params=REMOTE
    )


def _section(status: Any) -> dict[str, Any]:
    return dict(status["sections"].get("kv_transfer") or {})


async def _deferred(sidecar: Sidecar) -> bool:
    return float(_section(await sidecar.json("/status")).get("deferred") or 0) >= 1


@dataclass
class Landing:
    """What a working decode node's sentinel showed over HOLD, transfers landing."""

    live_failures: int
    ready_failures: int
    deferred_samples: int
    status: dict[str, Any]


async def _landing(connector: str) -> Landing:
    with SimProcess(scheduling_policy="priority", decode_tps=200) as sim:
        sim.control.set_fault("remote_kv", seconds=LAND_S, connector=connector)
        async with (
            _load(_routed(sim.base_url)),
            running_sidecar(sim.base_url, kv_transfer_bound=BOUND) as sidecar,
        ):
            await eventually(sidecar.green, 30, "green first")
            await eventually(lambda: _deferred(sidecar), 10, "routed requests shown deferred")
            live_failures = ready_failures = deferred_samples = samples = 0
            end = time.monotonic() + HOLD
            while time.monotonic() < end:
                live_failures += await sidecar.code("/livez") != 200
                ready_failures += await sidecar.code("/readyz") != 200
                deferred_samples += await _deferred(sidecar)
                samples += 1
                await asyncio.sleep(0.5)  # the polling interval, not a wait for a state
            status = await sidecar.json("/status")
            print(
                f"{connector} transfers landing: {live_failures} liveness and {ready_failures} "
                f"readiness failures in {HOLD:.0f}s, deferred in {deferred_samples}/{samples} "
                f"samples, section {_section(status)}"
            )
            return Landing(live_failures, ready_failures, deferred_samples, status)


@pytest.fixture(scope="module")
def landings() -> dict[str, Landing | BaseException]:
    """Both connectors' working nodes held at once, each on its own simulator and sentinel."""

    async def both() -> tuple[Landing | BaseException, Landing | BaseException]:
        return await asyncio.gather(_landing("nixl"), _landing("mooncake"), return_exceptions=True)

    nixl, mooncake = asyncio.run(both())
    return {"nixl": nixl, "mooncake": mooncake}


@pytest.mark.parametrize(
    ("connector", "landing"),
    [("nixl", "vllm:nixl_xfer_time_seconds"), ("mooncake", "no landing counter")],
)
def test_a_decode_node_whose_transfers_land_stays_green_and_ready(
    landings: dict[str, Landing | BaseException], connector: str, landing: str
) -> None:
    got = landings[connector]
    if isinstance(got, BaseException):
        raise got
    section = _section(got.status)
    assert (got.live_failures, got.ready_failures) == (0, 0)
    assert got.deferred_samples >= 1
    assert str(section["landing"]).startswith(landing)
    assert (section["last_landed_ago"] is not None) == (connector == "nixl")
    assert got.status["verdict"]["hangs"] == []


@pytest.mark.parametrize(
    ("connector", "told"),
    [("nixl", "no vllm:nixl_xfer_time_seconds moved"), ("mooncake", "no real progress")],
)
async def test_a_decode_node_whose_transfers_never_land_is_named_and_unready(
    sim: SimProcess, connector: str, told: str
) -> None:
    """Mooncake exposes no landing counter: the absence of real progress stands in."""
    async with (
        running_sidecar(sim.base_url, kv_transfer_bound=BOUND) as sidecar,
        _load(_routed(sim.base_url)),
    ):
        await eventually(sidecar.green, 30, "green first")
        sim.control.set_fault("remote_kv", land="never", connector=connector)
        stuck = time.monotonic()

        async def named() -> bool:
            code = await sidecar.code("/readyz")
            hangs = (await sidecar.json("/status"))["verdict"]["hangs"]
            return code == 503 and [str(h["kind"]) for h in hangs] == ["kv_transfer"]

        await eventually(named, RED_WITHIN, "kv_transfer named, readiness red")
        took = time.monotonic() - stuck
        status = await sidecar.json("/status")
        reason = str((await sidecar.json("/readyz"))["reason"])
        print(f"transfers never landing: named {took:.1f}s after (bound {BOUND:g}s): {reason}")
        assert took >= BOUND
        assert "kv transfers not landing" in reason
        assert told in reason
        assert "kv transfers not landing" in str(status["verdict"]["hangs"][0]["reason"])
        assert float(_section(status)["deferred"]) >= 1
        assert await sidecar.code("/livez") == 200  # policy unready: no restart
