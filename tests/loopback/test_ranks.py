"""One stuck rank or engine of a multi-process server, caught and named (simulator).

The simulator runs vLLM's multi-process shapes: ``--data-parallel-size 2``
(``VLLM::EngineCore_DP0`` and ``_DP1``, new requests to the least loaded, every metric
sample labelled with its ``engine``) and ``--tensor-parallel-size 2``
(``VLLM::EngineCore`` -> ``VLLM::Worker_TP0``, ``_TP1``; every step waits for
both ranks). Timings are scaled as in the other loopback tests (hang window
4 s for the shipped 15 s); the issue's bar is red within 30 s.

- DP, ``engine_hang`` aimed at engine 1: nothing is stopped and engine 0
  keeps answering, so only engine 1's own progress shows it: a *partial*
  hang naming engine 1, and never a whole-engine hang.
- DP, SIGSTOP of ``VLLM::EngineCore_DP1``: red, engine 1 named.
- TP, SIGSTOP of ``VLLM::Worker_TP1``: red, TP rank 1 named.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from itertools import chain
from typing import Any

import psutil
import pytest

from sentinel_sim.launch import SimProcess
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar

pytestmark = pytest.mark.timeout(180)

RED_WITHIN = 30.0
GREEN_WITHIN = 30.0
TEXT_ONLY: dict[str, Any] = {
    "canaries": {
        "text": {"interval": 1.0, "deadline": 2.0, "jitter": 0.0},
        "structured": {"enabled": False},
        "multimodal": {"enabled": False},
    }
}


@pytest.fixture
def dp_sim() -> Iterator[SimProcess]:
    with _owned(SimProcess(data_parallel_size=2)) as sim:
        yield sim


@pytest.fixture
def tp_sim() -> Iterator[SimProcess]:
    with _owned(SimProcess(tensor_parallel_size=2)) as sim:
        yield sim


class _owned:
    """The simulator, and a check on the way out that none of its processes outlived it."""

    def __init__(self, sim: SimProcess) -> None:
        self.sim = sim
        self.pids: list[int] = []

    def __enter__(self) -> SimProcess:
        self.sim.start()
        self.pids = [self.sim.api_pid, *self.sim.engine_pids, *chain(*self.sim.worker_pids)]
        return self.sim

    def __exit__(self, *exc: object) -> None:
        self.sim.stop()
        left = [pid for pid in self.pids if _alive(pid)]
        assert left == [], f"simulator processes left running: {left}"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def _red(sidecar: Sidecar, what: str) -> dict[str, Any]:
    async def red() -> bool:
        return await sidecar.code("/livez") == 503

    await eventually(red, RED_WITHIN, f"liveness red after {what}", 0.2)
    status: dict[str, Any] = await sidecar.json("/status")
    return status


def _process(status: dict[str, Any], title: str) -> dict[str, Any]:
    for entry in status["evidence"]["processes"]["engines"]:
        if entry["name"] == title:
            found: dict[str, Any] = entry
            return found
    raise AssertionError(f"{title} not in /status: {status['evidence']['processes']}")


async def test_one_hung_engine_is_a_partial_hang_naming_it(dp_sim: SimProcess) -> None:
    async with running_sidecar(dp_sim.base_url, **TEXT_ONLY) as sidecar:
        await eventually(sidecar.green, GREEN_WITHIN, "startup, readiness and liveness 200")
        assert [
            e["engine"] for e in (await sidecar.json("/status"))["evidence"]["processes"]["engines"]
        ] == [0, 1]
        dp_sim.control.set_fault("engine_hang", engine=1)
        kinds_seen: set[str] = set()

        async def partial_red() -> bool:
            status = await sidecar.json("/status")
            kinds_seen.update(h["kind"] for h in status["verdict"]["hangs"])
            return await sidecar.code("/livez") == 503

        await eventually(partial_red, RED_WITHIN, "liveness red after engine 1 hung", 0.2)
        status = await sidecar.json("/status")
        (hang,) = status["verdict"]["hangs"]
        assert (hang["kind"], hang["engine"], hang["engines"]) == ("partial", 1, [1]), hang
        assert "engine 1" in hang["reason"]
        # Engine 0 kept working: its progress keeps the whole-engine rule quiet.
        assert "engine" not in kinds_seen, kinds_seen
        engines = status["evidence"]["progress"]["engines"]
        assert set(engines) == {"0", "1"}
        assert engines["1"]["progress_age"] is None or (
            engines["0"]["progress_age"] < engines["1"]["progress_age"]
        )
        dp_sim.control.clear_fault("engine_hang")
        await eventually(sidecar.green, GREEN_WITHIN, "green again after the hang cleared")


async def test_sigstop_of_one_engine_is_red_and_names_it(dp_sim: SimProcess) -> None:
    async with running_sidecar(dp_sim.base_url, **TEXT_ONLY) as sidecar:
        await eventually(sidecar.green, GREEN_WITHIN, "startup, readiness and liveness 200")
        pid = dp_sim.engine_pids[1]
        os.kill(pid, signal.SIGSTOP)
        try:
            status = await _red(sidecar, "SIGSTOP of VLLM::EngineCore_DP1")
        finally:
            os.kill(pid, signal.SIGCONT)
        assert any(h["engine"] == 1 for h in status["verdict"]["hangs"]), status["verdict"]
        dead = [h for h in status["verdict"]["hangs"] if h["kind"] == "dead"]
        assert dead, status["verdict"]
        assert "engine 1 (VLLM::EngineCore_DP1" in dead[0]["reason"]
        stopped = _process(status, "VLLM::EngineCore_DP1")
        assert (stopped["state"], stopped["engine"]) == ("stopped", 1)
        assert _process(status, "VLLM::EngineCore_DP0")["state"] != "stopped"
        await eventually(sidecar.green, GREEN_WITHIN, "green again after SIGCONT")


async def test_sigstop_of_one_tensor_parallel_worker_is_red_and_names_the_rank(
    tp_sim: SimProcess,
) -> None:
    async with running_sidecar(tp_sim.base_url, **TEXT_ONLY) as sidecar:
        await eventually(sidecar.green, GREEN_WITHIN, "startup, readiness and liveness 200")
        pid = tp_sim.worker_pids[0][1]
        os.kill(pid, signal.SIGSTOP)
        try:
            status = await _red(sidecar, "SIGSTOP of VLLM::Worker_TP1")
        finally:
            os.kill(pid, signal.SIGCONT)
        assert any(h["ranks"] == [1] for h in status["verdict"]["hangs"]), status["verdict"]
        dead = [h for h in status["verdict"]["hangs"] if h["kind"] == "dead"]
        assert dead, status["verdict"]
        assert "TP rank 1 worker (VLLM::Worker_TP1" in dead[0]["reason"]
        stopped = _process(status, "VLLM::Worker_TP1")
        assert (stopped["state"], stopped["tp_rank"]) == ("stopped", 1)
        assert _process(status, "VLLM::Worker_TP0")["state"] != "stopped"
        await eventually(sidecar.green, GREEN_WITHIN, "green again after SIGCONT")
