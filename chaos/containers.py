"""The vllm container a supervised chaos run restarts: its command, and how a fault reaches it.

Under :class:`chaos.kubelet.Kubelet` the server is not a :mod:`chaos.targets`
target that the runner starts and stops: the kubelet starts the command,
kills the process group and starts it again. So a container here is only what
the kubelet needs (a command on fixed ports, its environment and process
options) and what the harness needs to reach the running one: the fault put
into the process group the kubelet started (a signal to the process titled
``VLLM::EngineCore`` or ``VLLM::Worker``, the simulator's control port, the
real vLLM's fault files). A fault lives in the processes it was put into: the
fault files are cleared before every start, so a restarted server is clean.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Any, Protocol

import psutil

from chaos.kubelet import sim_command
from chaos.ports import free_port
from chaos.scenario import Scenario, TargetSpec
from chaos.targets import VllmTarget, clear_sim, inject_sim

ENGINE = "VLLM::EngineCore"
WORKER = "VLLM::Worker"


class ContainerError(RuntimeError):
    """The fault could not be put into the running container (no such process)."""


class Container(Protocol):
    """What a supervised run needs of the server it restarts."""

    base_url: str
    command: list[str]
    env: dict[str, str] | None
    popen: dict[str, Any]

    async def before_start(self, container: int) -> None: ...
    async def inject(self, scenario: Scenario, group: int) -> str: ...
    async def clear(self, scenario: Scenario, group: int) -> str: ...


def titled(group: int, title: str) -> list[psutil.Process]:
    """The processes of process group ``group`` whose title is ``title``.

    The title is read from the command line, which ``setproctitle`` rewrites:
    the kernel's 15-character name cuts ``VLLM::Worker_TP1`` short.
    """
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(process.pid) != group:
                continue
            line = " ".join(process.cmdline()).strip()
            name = line if line.startswith("VLLM::") else process.name()
            if name == title or name.startswith(title + "_"):
                found.append(process)
    return found


def signal_titled(group: int, title: str, signum: signal.Signals) -> list[int]:
    processes = titled(group, title)
    if not processes:
        raise ContainerError(f"no {title} process in the container's group {group}")
    for process in processes:
        process.send_signal(signum)
    return [p.pid for p in processes]


class SimContainer:
    """The simulated vLLM on fixed ports; ``load_time`` is its model load (its port closed)."""

    def __init__(self, spec: TargetSpec, workdir: Path, load_time: float) -> None:
        from sentinel_sim.launch import SimProcess

        self.port, self.control_port = free_port(), free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.control_url = f"http://127.0.0.1:{self.control_port}"
        options: dict[str, Any] = dict(spec.sim_options)
        options.pop("startup_delay", None)  # the supervised run's load time is the load
        if spec.max_num_seqs is not None:
            options["max_num_seqs"] = spec.max_num_seqs
        flags = SimProcess(scheduling_policy=spec.scheduling_policy, **options).args
        assert flags[2:4] == ["--port", "0"], flags
        assert flags[6:8] == ["--control-port", "0"], flags
        self.command = sim_command(
            self.port, self.control_port, startup_delay=load_time, extra=flags[8:]
        )
        self.env = {**os.environ, **spec.environment} if spec.environment else None
        self.popen: dict[str, Any] = {}
        workdir.mkdir(parents=True, exist_ok=True)

    async def before_start(self, container: int) -> None:
        return None  # the simulator's faults live in its processes

    def _control(self) -> Any:
        from sentinel_sim.control import SimControl

        return SimControl(self.control_url)

    def _engine(self, group: int) -> int:
        engines = titled(group, ENGINE)
        if not engines:
            raise ContainerError(f"no {ENGINE} process in the container's group {group}")
        return engines[0].pid

    def _signalled(self, scenario: Scenario, group: int) -> int:
        return group if scenario.fault.process == "api" else self._engine(group)

    def held_by_wedged(self, scenario: Scenario, group: int) -> int | None:
        """For ``api_wedge``: the connections to the port its satellite holds (None: not one).

        The API servers share one listening socket and the busiest accepts first,
        so a satellite may hold none of the load's pooled connections: wedged
        then, it keeps no one waiting (fresh connections go to its peers).
        """
        if scenario.fault.kind != "api_wedge":
            return None
        from sentinel_sim.satellite import TITLE

        index = scenario.fault.params.get("server", 1)
        for process in titled(group, f"{TITLE}_{index}"):
            with contextlib.suppress(psutil.Error, OSError):
                return sum(
                    c.status == psutil.CONN_ESTABLISHED and c.laddr.port == self.port
                    for c in process.net_connections("tcp")
                )
        return None

    async def inject(self, scenario: Scenario, group: int) -> str:
        return await inject_sim(self._control(), self._signalled(scenario, group), scenario)

    async def clear(self, scenario: Scenario, group: int) -> str:
        return await clear_sim(self._control(), self._signalled(scenario, group), scenario)


class VllmContainer:
    """A real vLLM (CPU build, the tiny model) on a fixed port; its load is the real one."""

    def __init__(self, spec: TargetSpec, workdir: Path) -> None:
        self.target = VllmTarget(spec, workdir)
        self.base_url = self.target.base_url
        server = self.target.server = self.target.build_server()
        self.command = server.command()
        env, self.popen = server.spawn_options()
        self.env: dict[str, str] | None = env

    async def before_start(self, container: int) -> None:
        assert self.target.server is not None
        self.target.server.faults.clear_all()
        self.target.forget_pause()

    def _title(self, scenario: Scenario) -> str:
        return WORKER if scenario.fault.process == "worker" else ENGINE

    async def inject(self, scenario: Scenario, group: int) -> str:
        fault = scenario.fault
        if fault.kind in ("sigstop", "sigkill"):
            signum = signal.SIGSTOP if fault.kind == "sigstop" else signal.SIGKILL
            if fault.process == "api":  # the container's main process: the API server
                os.kill(group, signum)
                return f"{signum.name} the API server pid {group}"
            title = self._title(scenario)
            pids = signal_titled(group, title, signum)
            return f"{signum.name} {title} pid {', '.join(map(str, pids))}"
        return await self.target.inject(scenario)

    async def clear(self, scenario: Scenario, group: int) -> str:
        if scenario.fault.kind == "sigstop":
            if scenario.fault.process == "api":
                os.kill(group, signal.SIGCONT)
                return "SIGCONT the API server"
            title = self._title(scenario)
            signal_titled(group, title, signal.SIGCONT)
            return f"SIGCONT {title}"
        return await self.target.clear(scenario)


def make_container(spec: TargetSpec, workdir: Path, load_time: float) -> Container:
    """The container for ``spec``; ``load_time`` is the simulator's (a real vLLM loads for real)."""
    if spec.kind == "sim":
        return SimContainer(spec, workdir, load_time)
    return VllmContainer(spec, workdir)
