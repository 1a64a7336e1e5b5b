"""vLLM fault tolerance against the simulator, over real sockets, both ways.

The simulator's rank waits ``unhealthy`` for its retry as vLLM 0.33 does
(generation queued, ``/metrics`` frozen, ``/health`` 200) or 0.34 does (the
faulted 503 at once, the status under ``/v1`` behind ``--api-key``). A
recovery within ``engine_recovery_timeout_sec`` (read from the simulator's
command line, shortened to 6 s) is held: no liveness failure, readiness red
naming the status, green again after. A rank ``dead`` is red within seconds,
before vLLM's own exit; one still unhealthy past its window (a rank whose
timeout never fires) is red at the window. sentinel never applies anything.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sentinel_sim.fault_tolerance import fault_tolerance_calls, set_engine_status
from sentinel_sim.launch import SimProcess
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar

TIMEOUT = 6.0  # engine_recovery_timeout_sec on the simulator's command line
GRACE = 2.0


def _ft(release: str, *more: str) -> list[str]:
    config = f'{{"engine_recovery_timeout_sec":{TIMEOUT:g}}}'
    # --enable-fault-tolerance: vLLM registers the status route only for it (not the config alone).
    on = ["--enable-fault-tolerance", "--fault-tolerance-config", config]
    return [*on, "--fault-tolerance-release", release, *more]


@pytest.fixture
def sim() -> Iterator[SimProcess]:
    with SimProcess(decode_tps=200, extra_args=_ft("0.33")) as process:
        yield process


async def _reason(sidecar: Sidecar) -> str:
    return str((await sidecar.json("/readyz"))["reason"])


async def _live_failures(sidecar: Sidecar, stop: asyncio.Event) -> int:
    failures = 0
    while not stop.is_set():
        failures += await sidecar.code("/livez") != 200
        await asyncio.sleep(0.1)
    return failures


async def _hangs(sidecar: Sidecar) -> str:
    """The liveness answer's reason: the restart hangs confirmed, described."""
    return str((await sidecar.json("/livez"))["reason"])


async def _held_then_back(sidecar: Sidecar, sim: SimProcess, words: str) -> None:
    """A recovery inside its window: readiness names it, liveness never fails, green after."""
    stop = asyncio.Event()
    watching = asyncio.create_task(_live_failures(sidecar, stop))
    set_engine_status(sim.control_url, 0, "unhealthy")
    await eventually(lambda: _has(sidecar, words), 10, "readiness names the recovery")
    status = await sidecar.json("/status")
    section = status["sections"]["fault_tolerance"]
    assert section["engines"][0]["status"] == "unhealthy"
    assert section["recovery_timeout"] == TIMEOUT  # from the command line
    await asyncio.sleep(max(0.0, TIMEOUT - 2.5))  # held most of the window
    set_engine_status(sim.control_url, 0, "healthy")
    await eventually(sidecar.green, 20, "green again once healthy")
    stop.set()
    assert await watching == 0
    assert "fault_tolerance" not in await _hangs(sidecar)


async def _has(sidecar: Sidecar, words: str) -> bool:
    return words in await _reason(sidecar)


async def test_a_033_recovery_is_held_and_a_dead_rank_is_red_at_once(sim: SimProcess) -> None:
    async with running_sidecar(sim.base_url, fault_tolerance_grace=GRACE) as sidecar:
        await eventually(sidecar.green, 30, "startup, readiness and liveness green")
        await _held_then_back(sidecar, sim, "recovering: fault tolerance: engine 0 unhealthy")

        set_engine_status(sim.control_url, 0, "dead")
        dead = time.monotonic()
        await eventually(lambda: _code_is(sidecar, "/livez", 503), 10, "liveness red")
        took = time.monotonic() - dead
        print(f"fault tolerance: dead rank red after {took:.1f} s")
        assert took < TIMEOUT  # sentinel's own word, before vLLM exits at its timeout
        assert "engine 0 dead" in await _hangs(sidecar)
        assert fault_tolerance_calls(sim.control_url)["apply"] == 0


async def _code_is(sidecar: Sidecar, path: str, code: int) -> bool:
    return await sidecar.code(path) == code


async def test_a_rank_unhealthy_past_its_window_is_red(sim: SimProcess) -> None:
    async with running_sidecar(sim.base_url, fault_tolerance_grace=GRACE) as sidecar:
        await eventually(sidecar.green, 30, "startup, readiness and liveness green")
        set_engine_status(sim.control_url, 0, "unhealthy", stuck=True)  # its timeout never fires
        began = time.monotonic()
        await eventually(lambda: _code_is(sidecar, "/livez", 503), TIMEOUT + GRACE + 10, "red")
        took = time.monotonic() - began
        print(f"fault tolerance: unhealthy past its window red after {took:.1f} s")
        assert took >= TIMEOUT + GRACE - 1.0  # never before the window (first seen <= 1 s late)
        assert "fault-tolerance recovery not over" in await _hangs(sidecar)


async def test_the_034_form_refuses_at_once_behind_the_api_key_and_is_held(
    tmp_path: Path,
) -> None:
    key = tmp_path / "key"
    key.write_text("sk-test\n")
    extra = _ft("0.34", "--api-key", "sk-test")
    with SimProcess(decode_tps=200, extra_args=extra) as sim:
        async with running_sidecar(
            sim.base_url, fault_tolerance_grace=GRACE, api_key_file=str(key)
        ) as sidecar:
            await eventually(sidecar.green, 30, "startup, readiness and liveness green")
            await _held_then_back(sidecar, sim, "engine 0 unhealthy (RuntimeError, recovering)")
            section = (await sidecar.json("/status"))["sections"]["fault_tolerance"]
            assert section["path"] == "/v1/fault_tolerance/status"
            calls = fault_tolerance_calls(sim.control_url)
            assert calls["status"] > 0
            assert calls["apply"] == 0
