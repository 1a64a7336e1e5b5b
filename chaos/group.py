"""A multi-node group under the harness's kubelet: the simulator as leader, worker ranks apart.

Multi-node vLLM runs as a LeaderWorkerSet: the leader pod holds the API
server, the engine and sentinel; each worker pod holds ranks that every engine
step waits on (a tensor- or pipeline-parallel collective). The stand-in here:
the kubelet's container is the simulator (the leader's vllm container), and
each worker rank is a process of its own session (its own pod), started by the
harness on a listening socket the leader's engine connects to
(``--remote-rank``, :mod:`sentinel_sim.workers`). A hang in a worker rank
(SIGSTOP) stops the leader's engine at its next step, while ``/health`` stays
green and the stopped process is not one sentinel can see.

What restarts is LeaderWorkerSet's ``restartPolicy``: under
``RecreateGroupOnPodRestart`` every restart of the leader's container
recreates the whole group (each rank killed and started fresh before the
leader starts again); under ``None`` the leader restarts alone and finds the
stopped rank still there, and its start-up waits on it for good.

One simplification: LeaderWorkerSet recreates the leader *pod*, sentinel
with it; here sentinel runs on across the restart. A fresh sentinel changes
nothing in detection; the restart-loop brake's count, which a fresh process
would lose, is kept in the pod's Lease (:mod:`sentinel.fleet.brake_memory`,
tested across sidecar restarts against a fake API server in
tests/loopback/test_brake_memory.py; docs/groups.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import subprocess
import sys
from pathlib import Path

from chaos.containers import Container, ContainerError, SimContainer
from chaos.containers import make_container as make_single
from chaos.group_spec import GroupSpec
from chaos.ports import free_port
from chaos.scenario import Scenario, TargetSpec

#: a worker rank's title: the pipeline stage its pod holds (``VLLM::Worker_PP<r>``)
RANK_TITLE = "VLLM::Worker_PP{rank}"


class GroupContainer(SimContainer):
    """The leader's vllm container, with the group's worker ranks as processes of their own."""

    def __init__(self, spec: TargetSpec, workdir: Path, load_time: float) -> None:
        assert spec.group is not None
        super().__init__(spec, workdir, load_time)
        self.group: GroupSpec = spec.group
        self.rank_ports = [free_port() for _ in range(self.group.ranks)]
        self.command = [*self.command, *(f"--remote-rank=127.0.0.1:{p}" for p in self.rank_ports)]
        self.ranks: list[subprocess.Popen[bytes]] = []
        self.recreated = 0  # how many times the worker ranks were started (1: never again)
        self._log = workdir / "ranks.log"

    async def before_start(self, container: int) -> None:
        """The ranks before the leader: the first time, and again for each recreated group."""
        if container == 0 or self.group.restart_policy == "RecreateGroupOnPodRestart":
            await asyncio.to_thread(self._recreate)

    def _recreate(self) -> None:
        self.close()
        with self._log.open("ab") as log:
            for rank, port in enumerate(self.rank_ports, start=1):
                # bound before the rank starts: the leader can connect the moment it starts
                with socket.create_server(("127.0.0.1", port)) as listener:
                    fd = listener.fileno()
                    command = [sys.executable, "-m", "sentinel_sim.workers", "--listen-fd", str(fd)]
                    self.ranks.append(
                        subprocess.Popen(
                            [*command, "--title", RANK_TITLE.format(rank=rank)],
                            pass_fds=(fd,),
                            stdin=subprocess.DEVNULL,
                            stdout=log,
                            stderr=log,
                            start_new_session=True,  # a pod of its own: not the leader's group
                        )
                    )
        self.recreated += 1

    def close(self) -> None:
        """Every rank killed (a stopped one too: SIGKILL needs no SIGCONT) and reaped."""
        ranks, self.ranks = self.ranks, []
        for process in ranks:
            with contextlib.suppress(OSError):
                process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5.0)

    def _rank(self, scenario: Scenario) -> tuple[int, subprocess.Popen[bytes]]:
        rank = int(scenario.fault.params.get("rank", len(self.ranks)))
        if not 1 <= rank <= len(self.ranks):
            raise ContainerError(f"no worker rank {rank} (the group has {len(self.ranks)})")
        return rank, self.ranks[rank - 1]

    async def inject(self, scenario: Scenario, group: int) -> str:
        fault = scenario.fault
        if fault.process != "worker":
            return await super().inject(scenario, group)
        rank, process = self._rank(scenario)
        signum = signal.SIGSTOP if fault.kind == "sigstop" else signal.SIGKILL
        process.send_signal(signum)
        title = RANK_TITLE.format(rank=rank)
        return f"{signum.name} worker rank {rank} ({title} pid {process.pid})"

    async def clear(self, scenario: Scenario, group: int) -> str:
        if scenario.fault.process != "worker":
            return await super().clear(scenario, group)
        rank, process = self._rank(scenario)
        process.send_signal(signal.SIGCONT)
        return f"SIGCONT worker rank {rank}"


def make_container(spec: TargetSpec, workdir: Path, load_time: float) -> Container:
    """A group's leader where the target has a group, else one server's container."""
    if spec.group is not None:
        return GroupContainer(spec, workdir, load_time)
    return make_single(spec, workdir, load_time)
