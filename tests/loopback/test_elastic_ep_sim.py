"""Elastic EP in vLLM 0.33's form against the simulator, both directions.

0.33's scaling middleware lets ``/health`` and ``POST /is_scaling_elastic_ep``
through while a scale runs and answers every other path, ``/metrics``
included, 503 "currently scaling"; a scale-up restarts every counter at 0. A
scale must cost no liveness failure, name its phase in ``/status`` and keep
the server's epoch; a commit that failed with the gate left up must turn red
within ``scale_failed_grace`` of ``phase: failed``; a scale that never ends
turns red at ``scale_bound``, a rank retired mid-commit whose commit never
returns too; a retired rank is unready, named, and never restarted. Windows
are the loopback ones, shortened: a 10 s scale, a 2 s grace, a 12 s bound;
the five run side by side (the full-length figures are
``tests/bench/bench_elastic_ep.py``'s).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from sentinel.evidence.metrics import parse_vllm_metrics
from sentinel_sim.elastic_ep import RETIRED_MESSAGE, SCALING_MESSAGE
from sentinel_sim.launch import SimProcess
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar

pytestmark = pytest.mark.timeout(240)

SCALE_S = 10.0
FAILED_AFTER = 4.0  # the failing scale's commit fails this long after it began
GRACE = 2.0
BOUND = 12.0
GREEN_WITHIN = 45.0
FAST_EEP: dict[str, Any] = {"lifecycle_interval": 0.5, "scale_failed_grace": GRACE}


@dataclass
class Watched:
    polls: int = 0
    failures: int = 0
    readiness: set[str] = field(default_factory=set)
    phases: set[str] = field(default_factory=set)
    epochs: set[int] = field(default_factory=set)
    ready: int = 0


async def _watch(sidecar: Sidecar, seconds: float, seen: Watched) -> None:
    """Poll /livez and /status for ``seconds`` (the polling interval is not a wait)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        seen.polls += 1
        if await sidecar.code("/livez") != 200:
            seen.failures += 1
        status = await sidecar.json("/status")
        readiness = status["verdict"]["readiness"]
        seen.ready += bool(readiness["ok"])
        seen.readiness.add(str(readiness["reason"]))
        seen.phases.add(str(status["lifecycle"]["phase"]))
        seen.epochs.add(int(status["server"]["epoch"]))
        await asyncio.sleep(0.25)


async def _red_at(sidecar: Sidecar, deadline: float) -> tuple[float, str]:
    async def red() -> bool:
        return await sidecar.code("/livez") == 503

    took = await eventually(red, deadline, "/livez 503")
    status = await sidecar.json("/status")
    return took, "; ".join(f"{h['kind']}: {h['reason']}" for h in status["verdict"]["hangs"])


async def _scale_held() -> Watched:
    seen = Watched()
    async with SimProcess() as sim, running_sidecar(sim.base_url, **FAST_EEP) as sidecar:
        await eventually(sidecar.green, GREEN_WITHIN, "green before the scale")

        async def counted() -> bool:  # so the scale-up's reset to 0 is a drop sentinel sees
            totals = (await sidecar.json("/status"))["evidence"]["progress"]["epoch_totals"]
            return float(totals.get("completions", {}).get("delta", 0.0)) >= 3.0

        await eventually(counted, GREEN_WITHIN, "completions counted before the scale")
        await asyncio.to_thread(sim.control.set_fault, "elastic_scale", duration=SCALE_S, size=2)
        await _watch(sidecar, SCALE_S + 2.0, seen)
        await eventually(sidecar.green, GREEN_WITHIN, "green again after the scale")
        seen.epochs.add(int((await sidecar.json("/status"))["server"]["epoch"]))
    return seen


async def _failed_commit() -> tuple[float, str]:
    async with SimProcess() as sim, running_sidecar(sim.base_url, **FAST_EEP) as sidecar:
        await eventually(sidecar.green, GREEN_WITHIN, "green before the scale")
        await asyncio.to_thread(
            sim.control.set_fault, "elastic_scale", duration=FAILED_AFTER, commit="fail"
        )
        took, hangs = await _red_at(sidecar, FAILED_AFTER + GRACE + 20.0)
        return took - FAILED_AFTER, hangs


async def _never_ends() -> tuple[float, str]:
    async with (
        SimProcess() as sim,
        running_sidecar(sim.base_url, scale_bound=BOUND, **FAST_EEP) as sidecar,
    ):
        await eventually(sidecar.green, GREEN_WITHIN, "green before the scale")
        await asyncio.to_thread(sim.control.set_fault, "elastic_scale")  # the commit never returns
        return await _red_at(sidecar, BOUND + 20.0)


async def _retired() -> Watched:
    seen = Watched()
    async with SimProcess() as sim, running_sidecar(sim.base_url, **FAST_EEP) as sidecar:
        await eventually(sidecar.green, GREEN_WITHIN, "green before the scale-down")
        await asyncio.to_thread(
            sim.control.set_fault, "elastic_scale", duration=2.0, retire=True, size=1
        )
        await _watch(sidecar, 12.0, seen)
    return seen


async def _retired_mid_commit() -> tuple[float, str]:
    async with (
        SimProcess() as sim,
        running_sidecar(sim.base_url, scale_bound=BOUND, **FAST_EEP) as sidecar,
    ):
        await eventually(sidecar.green, GREEN_WITHIN, "green before the scale-down")
        # Retired from the commit on (as vLLM marks it), and the commit never returns.
        await asyncio.to_thread(sim.control.set_fault, "elastic_scale", retire=True, size=1)
        return await _red_at(sidecar, BOUND + 20.0)


async def test_a_0_33_scale_is_held_and_a_failed_or_endless_one_turns_red() -> None:
    held, (failed, failed_hangs), (endless, endless_hangs), retired, stuck = await asyncio.gather(
        _scale_held(), _failed_commit(), _never_ends(), _retired(), _retired_mid_commit()
    )
    print(f"0.33 scale {SCALE_S:.0f}s: {held.failures} liveness failures in {held.polls} polls")
    print(f"failed commit: red {failed:.1f}s after phase failed; {failed_hangs}")
    print(f"never-ending scale: red after {endless:.1f}s (bound {BOUND:.0f}s); {endless_hangs}")
    print(f"retired rank: {retired.failures} liveness failures, {retired.readiness}")
    print(f"rank retired mid-commit, commit never returns: red after {stuck[0]:.1f}s; {stuck[1]}")
    # Held: no liveness failure, the phase named, and the counter reset is the same server.
    assert held.failures == 0
    assert held.polls > SCALE_S
    assert "scaling" in held.phases
    assert any("elastic EP phase " in r for r in held.readiness), held.readiness
    assert held.epochs == {0}, "a scale-up's counter reset was read as a new server"
    # A failed commit with the gate up: red within the grace (plus a poll or two).
    assert 0.0 < failed <= GRACE + 4.0
    assert "elastic EP scale failed" in failed_hangs
    assert "commit failed" in failed_hangs  # vLLM's error, quoted
    assert BOUND <= endless <= BOUND + 6.0
    assert "did not end" in endless_hangs
    # Retired: unready with its reason, never restarted.
    assert retired.failures == 0
    assert "retired" in retired.phases
    assert any("has been retired" in r for r in retired.readiness), retired.readiness
    # Retired before its commit returned, and it never does: a scale, red at its bound.
    assert BOUND <= stuck[0] <= BOUND + 6.0
    assert "did not end" in stuck[1]
    assert "being retired" in stuck[1]


def completions(answer: httpx.Response) -> float:
    return parse_vllm_metrics(answer.text, 0.0).counters.get("completions", -1.0)


async def test_the_simulator_answers_as_0_33_and_0_32_do() -> None:
    async with (
        SimProcess() as sim,
        SimProcess(extra_args=["--elastic-ep-release", "0.32"]) as old,
        httpx.AsyncClient(timeout=5.0) as client,
    ):

        async def status(base: str) -> dict[str, Any]:
            answer = await client.post(base + "/is_scaling_elastic_ep")
            assert answer.status_code == 200, answer.text
            return dict(answer.json())

        assert (await status(sim.base_url))["phase"] == "idle"
        request = {"model": "sim-model", "prompt": "hi", "max_tokens": 4}
        assert (await client.post(sim.base_url + "/v1/completions", json=request)).is_success
        assert completions(await client.get(sim.base_url + "/metrics")) == 1.0
        await asyncio.to_thread(sim.control.set_fault, "elastic_scale", duration=2.0, size=2)
        await asyncio.to_thread(old.control.set_fault, "elastic_scale", duration=2.0, size=2)
        assert (await client.get(sim.base_url + "/health")).status_code == 200  # exempt
        gated = await client.get(sim.base_url + "/metrics")
        assert (gated.status_code, gated.json()["error"]) == (503, SCALING_MESSAGE)
        now = await status(sim.base_url)
        assert (now["is_scaling_elastic_ep"], now["phase"]) == (True, "preparing")
        assert now["requested_data_parallel_size"] == 2
        assert (await client.get(old.base_url + "/health")).status_code == 503  # 0.32: gated
        assert (await client.post(old.base_url + "/is_scaling_elastic_ep")).status_code == 503

        async def completed() -> bool:
            return bool((await status(sim.base_url))["phase"] == "completed")

        await eventually(completed, 10.0, "phase completed")

        async def lifted() -> bool:
            return (await client.get(sim.base_url + "/metrics")).status_code == 200

        # The gate lifts with the commit; a loaded machine may answer one more 503 first.
        await eventually(lifted, 10.0, "the gate lifted")
        served = await client.get(sim.base_url + "/metrics")
        assert completions(served) == 0.0  # the scale-up re-created the stat loggers

        async def old_done() -> bool:
            answer = await client.post(old.base_url + "/is_scaling_elastic_ep")
            return answer.status_code == 200

        # The 0.32 scale was asked for after the 0.33 one: it may end a moment later.
        await eventually(old_done, 10.0, "the 0.32 scale over")
        assert await status(old.base_url) == {"is_scaling_elastic_ep": False}
        # A commit that fails: phase failed with its error, the gate left up for good.
        await asyncio.to_thread(sim.control.set_fault, "elastic_scale", duration=1.0, commit="fail")

        async def failed() -> bool:
            return bool((await status(sim.base_url))["phase"] == "failed")

        await eventually(failed, 10.0, "phase failed")
        assert (await status(sim.base_url))["error"]
        assert (await client.get(sim.base_url + "/v1/models")).status_code == 503
        # A rank scaled away: retired, /health 200, everything else 503.
        await asyncio.to_thread(sim.control.set_fault, "elastic_scale", duration=1.0, retire=True)

        async def retired() -> bool:
            answer = await client.get(sim.base_url + "/v1/models")
            return answer.status_code == 503 and answer.json()["error"] == RETIRED_MESSAGE

        await eventually(retired, 10.0, "the rank retired")
        assert (await client.get(sim.base_url + "/health")).status_code == 200
