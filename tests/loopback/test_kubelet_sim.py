"""A real kubelet loop around the simulated vLLM, with sentinel as the sidecar it probes.

:class:`chaos.kubelet.Kubelet` runs the shipped manifest's probes, five times
faster (sentinel on tests/loopback/sidecar.py's FAST timings), and really kills
and restarts the server: on the same port, with a model load during which the
port refuses connections, while sentinel runs on. The hang tests print the
detect and recover figures (seconds from the fault) and put them on the
kubelet's timeline as a ``recovery`` event.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest

from chaos.kubelet import Kubelet, sim_command
from chaos.kubelet_state import KubeletSettings, ProbeSpec, recovery
from chaos.ports import free_port
from sentinel_sim.control import SimControl
from tests.loopback.sidecar import Sidecar, running_sidecar

pytestmark = pytest.mark.timeout(120)

SCALE = 0.2
# A probe timeout of 0.6 s would be the harness's own stall, not sentinel's answer.
SETTINGS = KubeletSettings.from_manifest().scaled(SCALE, timeout_floor=1.0)
LOAD = 4.0  # the simulator's model load, longer than sentinel's dead grace (FAST: 1.5 s)
QUIET = 10.0  # no second restart this long after recovery: 2.5 liveness kill budgets (4 x 1 s)


@dataclass
class Load:
    refused: float = 0.0  # seconds the port refused connections after the new start
    sentinel: list[tuple[int, int]] = field(default_factory=list)  # (/startupz, /livez) meanwhile

    def summary(self) -> str:
        return ", ".join(
            f"{pair} x{len(list(group))}" for pair, group in itertools.groupby(self.sentinel)
        )


CHAT = {"model": "sim-model", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}


async def test_a_server_crashing_at_load_restarts_on_the_crash_back_off(tmp_path: Path) -> None:
    port = free_port()
    async with (
        running_sidecar(f"http://127.0.0.1:{port}") as sidecar,
        # Loads for a second, then fails: the server never opens its port.
        Kubelet(
            ["false"], sidecar.url, SETTINGS, load_time=1.0, log_path=tmp_path / "c.log"
        ) as kubelet,
    ):
        await kubelet.wait_for("start", container=4, within=45)
    gaps = [
        kubelet.of("start", container=n + 1)[0].at - kubelet.of("exit", container=n)[0].at
        for n in range(4)
    ]
    expected = [0.0, 10 * SCALE, 20 * SCALE, 40 * SCALE]  # at once, then 10 s doubling
    print(f"\ncrash loop: exit-to-start gaps {[round(g, 2) for g in gaps]} s, expected {expected}")
    print(kubelet.timeline())
    assert all(abs(gap - want) < 1.0 for gap, want in zip(gaps, expected, strict=True)), gaps
    exits = [kubelet.of("exit", container=n)[0] for n in range(4)]
    assert [e.data["returncode"] for e in exits] == [1.0] * 4
    runs = [e.at - kubelet.of("start", container=e.container)[0].at for e in exits]
    assert all(0.9 < run < 2.5 for run in runs), runs  # the second of loading, then exit 1
    assert kubelet.of("kill", probe="startup") == []  # the load budget is 900 startup periods
    assert kubelet.of("started") == []
    assert kubelet.restarts >= 4


def _group(pgid: int) -> list[int]:
    """The live (not zombie) processes of a process group."""
    members = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process.pid)
    return members


async def test_a_container_ignoring_sigterm_is_killed_with_its_whole_group() -> None:
    # Nothing answers the probes: three failed startup probes kill the container.
    settings = KubeletSettings(
        startup=ProbeSpec("/startupz", period=0.2, timeout=0.5, failure_threshold=3), grace=1.0
    )
    command = ["sh", "-c", 'trap "" TERM; sleep 60 & sleep 60; wait']
    unanswered = f"http://127.0.0.1:{free_port()}"
    async with Kubelet(command, unanswered, settings, shutdown_grace=0.5) as kubelet:
        await kubelet.wait_for("start", within=5)
        pgid = kubelet.pid
        assert pgid is not None
        kill = await kubelet.wait_for("kill", within=10)
        assert len(_group(pgid)) >= 2  # sh and its two sleeps, before the kill
        ended = await kubelet.wait_for("exit", within=10)
        assert _group(pgid) == []
    print(kubelet.timeline())
    assert kill.probe == "startup"
    sigkill = kubelet.of("sigkill", container=0)[0]
    assert 0.9 < sigkill.at - kill.at < 2.0  # SIGTERM was ignored for the whole grace
    assert ended.data["returncode"] == -9
    assert kubelet.of("start", container=1)[0].at - ended.at < 0.5  # the first restart: at once


async def _load(client: httpx.AsyncClient, url: str, sidecar: Sidecar, within: float) -> Load:
    """Watch the restarted server's load from now: its port refusing, sentinel meanwhile."""
    begin = time.monotonic()
    load = Load()
    while True:
        try:
            await client.get(url + "/health", timeout=1.0)
        except httpx.ConnectError:
            load.sentinel.append((await sidecar.code("/startupz"), await sidecar.code("/livez")))
        else:
            assert load.sentinel, "the restarted server answered before its model load"
            load.refused = time.monotonic() - begin
            return load
        if time.monotonic() - begin > within:
            raise AssertionError(f"the port still refused after {within:g}s")
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("watch_processes", [True, False], ids=["watch", "no_watch"])
async def test_a_hung_engine_is_restarted_once_and_the_new_server_lives(
    watch_processes: bool, tmp_path: Path
) -> None:
    port, control_port = free_port(), free_port()
    target = f"http://127.0.0.1:{port}"
    command = sim_command(
        port, control_port, startup_delay=LOAD, extra=["--scheduling-policy", "priority"]
    )
    async with (
        running_sidecar(target, watch_processes=watch_processes) as sidecar,
        Kubelet(command, sidecar.url, SETTINGS, log_path=tmp_path / "sim.log") as kubelet,
        httpx.AsyncClient(timeout=10.0) as client,
    ):
        await kubelet.wait_for("ready", container=0, within=45)
        with SimControl(f"http://127.0.0.1:{control_port}") as control:
            fault = kubelet.note("fault", "engine_hang")
            control.set_fault("engine_hang")
        kill = await kubelet.wait_for("kill", within=40)
        assert kill.probe == "liveness", kubelet.timeline()
        await kubelet.wait_for("start", container=1, within=SETTINGS.kill_grace("liveness") + 10)
        load = await _load(client, target, sidecar, within=LOAD + 20)
        await kubelet.wait_for("ready", container=1, within=45)
        reply = await client.post(target + "/v1/chat/completions", json=CHAT)
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]["content"]
        quiet_until = time.monotonic() + QUIET
        while time.monotonic() < quiet_until:
            assert kubelet.restarts == 1, kubelet.timeline()
            assert kubelet.of("kill", container=1) == [], kubelet.timeline()
            await asyncio.sleep(0.2)
        assert await sidecar.code("/livez") == 200
        epoch = (await sidecar.json("/status"))["server"]["epoch"]
        figures = recovery(kubelet.events, fault.at)
        kubelet.note("recovery", **figures, port_refused=load.refused)
    print(
        f"\nkubelet restart (watch_processes={watch_processes}): detect {figures['detect']:.1f} s,"
        f" kill {figures['kill']:.1f} s, new server started {figures['restart']:.1f} s,"
        f" recover {figures['recover']:.1f} s after the fault; restarts {kubelet.restarts};"
        f" port refused {load.refused:.1f} s during the load; sentinel server epoch {epoch}"
    )
    print(f"sentinel (/startupz, /livez) during the load: {load.summary()}")
    print(kubelet.timeline())
    assert kubelet.restarts == 1
    assert [e.probe for e in kubelet.of("kill")][:1] == ["liveness"]  # then the pod's deletion
    assert kubelet.of("probe_failure", container=1, probe="liveness") == []
    assert figures["detect"] < figures["kill"] < figures["restart"] < figures["recover"]
    assert load.refused >= LOAD - 1.0
    # The new server has to pass startup again, and is not judged by the old one's hang.
    assert (503, 200) in load.sentinel, load.summary()
    assert load.sentinel[-1] == (503, 200), load.summary()


async def test_a_server_crashing_again_and_again_is_named_in_status_and_sentinel_adds_no_restart(
    tmp_path: Path,
) -> None:
    # Each container loads (half a second), answers, then exits after 3 s (timeout's
    # SIGTERM): the kubelet restarts it on its crash back-off (0, 2, 4, 8 s scaled).
    port, control_port = free_port(), free_port()
    command = ["timeout", "-s", "TERM", "3", *sim_command(port, control_port, startup_delay=0.5)]
    livez: list[int] = []
    said: dict[str, object] = {}
    async with (
        running_sidecar(f"http://127.0.0.1:{port}") as sidecar,
        Kubelet(command, sidecar.url, SETTINGS, log_path=tmp_path / "sim.log") as kubelet,
    ):
        deadline = time.monotonic() + 60
        while True:  # polled: until /status names the crash loop while the port refuses
            livez.append(await sidecar.code("/livez"))
            server = (await sidecar.json("/status"))["server"]
            if "crash loop" in str(server["not_answering"]):
                said = server
                break
            assert time.monotonic() < deadline, (
                f"no crash loop named: {server}\n{kubelet.timeline()}"
            )
            await asyncio.sleep(0.1)
        starts = len(kubelet.of("start"))
        deadline = time.monotonic() + 30
        while len(kubelet.of("start")) <= starts:  # and once more, /livez polled meanwhile
            livez.append(await sidecar.code("/livez"))
            assert time.monotonic() < deadline, kubelet.timeline()
            await asyncio.sleep(0.1)
        kinds = {
            sample.labels["kind"]
            for metric in sidecar.daemon.evaluator.metrics.hang_detections.collect()
            for sample in metric.samples
            if sample.name.endswith("_total") and sample.value > 0
        }
    print(f"\n/status server while the crash-looping server was away: {said}")
    print(kubelet.timeline())
    not_answering = str(said["not_answering"])
    assert not_answering.startswith("the server is not answering: connections refused for ")
    assert not_answering.endswith("sentinel asks no restart")
    departures = said["departures"]
    assert isinstance(departures, dict)
    assert departures["count"] >= 3, departures
    assert f"went away or restarted {departures['count']} times in the last 10 min" in not_answering
    # Sentinel added no restart: /livez answered 200 at every poll, the kubelet never
    # saw a liveness failure, and every restart followed the container's own exit.
    assert set(livez) == {200}, livez
    assert kubelet.of("probe_failure", probe="liveness") == []
    # No probe killed a container; only the pod's deletion at the end of the test.
    assert [e.detail for e in kubelet.of("kill")] in ([], ["pod deleted"]), kubelet.timeline()
    assert len(kubelet.of("exit")) >= 3
    assert all(e.data["returncode"] == 124.0 for e in kubelet.of("exit")), kubelet.timeline()
    # Nothing for sentinel to restart. The only hang it may confirm is the engine gone in
    # the moment between the engine's exit and the API server's, on a server that passed
    # startup and is exiting anyway (the kubelet never saw liveness fail, above).
    assert kinds <= {"dead"}, kinds
