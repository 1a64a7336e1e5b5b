"""sentinel itself restarted under the harness's kubelet, the server running on.

A sidecar container is restarted on its own (an OOM kill, a rollout of a new
sentinel image) while the vllm container keeps running. For those seconds
the kubelet's probes of the vllm container find nothing listening, and
failures counted then add to the liveness threshold; the new sentinel knows
nothing of the old one's in-memory history. Both directions: with a working
server the restart costs no server restart and the new sentinel's liveness is
green from its first answer; with a hung engine, the new sentinel finds the
hang on its own evidence and the kubelet restarts the server exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from chaos.kubelet import Kubelet, sim_command
from chaos.kubelet_state import Event, KubeletSettings
from chaos.ports import free_port
from sentinel_sim.control import SimControl
from tests.loopback.sidecar import Sidecar, running_sidecar

pytestmark = pytest.mark.timeout(150)

SCALE = 0.2
SETTINGS = KubeletSettings.from_manifest().scaled(SCALE, timeout_floor=1.0)
LOAD = 4.0
DOWN = 2.0  # seconds the sidecar container is away: two liveness periods, under the threshold


class Sidecars:
    """The current sentinel, restartable as the kubelet restarts a sidecar container."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.stack = contextlib.AsyncExitStack()
        self.current: Sidecar | None = None
        self.started = 0

    async def start(self) -> Sidecar:
        self.current = await self.stack.enter_async_context(running_sidecar(self.target))
        self.started += 1
        return self.current

    async def restart(self) -> str:
        await self.stack.aclose()
        self.stack = contextlib.AsyncExitStack()
        await asyncio.sleep(DOWN)  # the sidecar container away: its image pulled, started
        return (await self.start()).url

    async def close(self) -> None:
        await self.stack.aclose()


@contextlib.asynccontextmanager
async def supervised(tmp_path: Path) -> AsyncIterator[tuple[Kubelet, Sidecars, int]]:
    port, control_port = free_port(), free_port()
    sidecars = Sidecars(f"http://127.0.0.1:{port}")
    first = await sidecars.start()
    command = sim_command(
        port, control_port, startup_delay=LOAD, extra=["--scheduling-policy", "priority"]
    )
    try:
        async with Kubelet(
            command,
            first.url,
            SETTINGS,
            log_path=tmp_path / "sim.log",
            restart_sidecar=sidecars.restart,
        ) as kubelet:
            await kubelet.wait_for("ready", container=0, within=45)
            yield kubelet, sidecars, control_port
    finally:
        await sidecars.close()


async def _first_livez(sidecar: Sidecar) -> int:
    return await sidecar.code("/livez")


@dataclass
class Working:
    """A sentinel restarted beside a working server: what the kubelet and it showed."""

    kubelet: Kubelet
    first_livez: int
    back_at: float
    restarts_while_quiet: set[int]
    status: dict[str, Any]


async def _working(tmp_path: Path) -> Working:
    async with supervised(tmp_path) as (kubelet, sidecars, _control_port):
        await kubelet.restart_sidecar()
        new = sidecars.current
        assert new is not None
        first = await _first_livez(new)
        back = kubelet.note("sidecar_back")
        await kubelet.wait_for("ready", container=0, within=45, count=2)
        seen: set[int] = set()
        quiet_until = time.monotonic() + 8.0
        while time.monotonic() < quiet_until:
            seen.add(kubelet.restarts)
            await asyncio.sleep(0.2)
        status = await new.json("/status")
    return Working(kubelet, first, back.at, seen, status)


@dataclass
class DuringHang:
    """A sentinel restarted during a hang: what the kubelet showed through the restart."""

    kubelet: Kubelet
    fault_at: float
    kill: Event
    reply: httpx.Response
    restarts_while_quiet: set[int]
    started: int


async def _during_hang(tmp_path: Path) -> DuringHang:
    async with supervised(tmp_path) as (kubelet, sidecars, control_port):
        with SimControl(f"http://127.0.0.1:{control_port}") as control:
            fault = kubelet.note("fault", "engine_hang")
            control.set_fault("engine_hang")
        await kubelet.restart_sidecar()  # before the old one could confirm anything
        kill = await kubelet.wait_for("kill", within=40)
        await kubelet.wait_for("ready", container=1, within=45)
        async with httpx.AsyncClient(timeout=10.0) as client:
            body = {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}]}
            reply = await client.post(sidecars.target + "/v1/chat/completions", json=body)
        seen: set[int] = set()
        quiet_until = time.monotonic() + 8.0
        while time.monotonic() < quiet_until:
            seen.add(kubelet.restarts)
            await asyncio.sleep(0.2)
    return DuringHang(kubelet, fault.at, kill, reply, seen, sidecars.started)


Runs = tuple[Working | BaseException, DuringHang | BaseException]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """Both pods at once, each with its own server, kubelet and sentinels (ports of their own).

    The file pays for the longer of the two rather than the sum; each test then
    asserts on its own pod's timeline.
    """

    async def both() -> Runs:
        return await asyncio.gather(
            _working(tmp_path_factory.mktemp("working")),
            _during_hang(tmp_path_factory.mktemp("during-hang")),
            return_exceptions=True,
        )

    return asyncio.run(both())


def test_a_sentinel_restart_beside_a_working_server_restarts_nothing(runs: Runs) -> None:
    got = runs[0]
    if isinstance(got, BaseException):
        raise got
    kubelet = got.kubelet
    print(f"\n{kubelet.timeline()}")
    assert got.first_livez == 200  # a server it has not judged yet is not hung
    assert got.restarts_while_quiet == {0}, kubelet.timeline()
    assert kubelet.restarts == 0
    assert kubelet.of("kill", container=0)[0].detail == "pod deleted"
    late = [e for e in kubelet.of("probe_failure", probe="liveness") if e.at > got.back_at]
    assert late == [], kubelet.timeline()  # green from the new sentinel's first answer
    assert got.status["verdict"]["hangs"] == []


def test_a_sentinel_restarted_during_a_hang_finds_it_and_one_restart_follows(runs: Runs) -> None:
    got = runs[1]
    if isinstance(got, BaseException):
        raise got
    kubelet = got.kubelet
    print(f"\n{kubelet.timeline()}")
    took = got.kill.at - got.fault_at
    print(f"sentinel restarted during the hang: killed {took:.1f} s after the fault")
    assert got.restarts_while_quiet == {1}, kubelet.timeline()
    assert got.kill.probe == "liveness"
    assert got.reply.status_code == 200, got.reply.text
    assert kubelet.restarts == 1
    assert got.started == 2
