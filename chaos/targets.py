"""The servers a chaos scenario runs against: the simulated vLLM or a real vLLM.

Each target keeps one port for its whole life, so a restarted server is the same
target to sentinel, and applies a scenario's fault in its own way (a signal to
the engine process, the simulator's control port, the real vLLM's fault
plugin, or, for ``pause``, the real vLLM's own ``POST /pause`` and ``/resume``,
which it registers with ``VLLM_SERVER_DEV_MODE=1`` in the target's
environment). The heavy pieces import lazily: a sim-only run never loads the
real vLLM's environment code.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from chaos.ports import free_port
from chaos.scenario import WEIGHT_UPDATE_PAUSE, Scenario, TargetSpec

#: seconds a dev-mode route (``/pause``, ``/resume``) may take to answer
DEV_ROUTE_TIMEOUT = 60.0

if TYPE_CHECKING:
    from chaos.vllm_engine.server import VllmServer
    from sentinel_sim.control import SimControl
    from sentinel_sim.launch import SimProcess


class Target(Protocol):
    """What the runner needs of a server under test."""

    spec: TargetSpec
    base_url: str

    async def start(self) -> float: ...
    async def stop(self) -> None: ...
    async def healthy(self) -> bool: ...
    async def inject(self, scenario: Scenario) -> str: ...
    async def clear(self, scenario: Scenario) -> str: ...
    def alive(self) -> bool: ...
    async def restart(self) -> float: ...


class SimTarget:
    """The simulated vLLM on a fixed port, so a restarted one is the same target."""

    def __init__(self, spec: TargetSpec, workdir: Path) -> None:
        self.spec = spec
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.workdir = workdir
        self.sim: SimProcess | None = None

    def _new(self) -> SimProcess:
        from sentinel_sim.launch import SimProcess

        options: dict[str, Any] = dict(self.spec.sim_options)
        if self.spec.max_num_seqs is not None:
            options["max_num_seqs"] = self.spec.max_num_seqs
        return SimProcess(
            scheduling_policy=self.spec.scheduling_policy,
            extra_args=["--port", str(self.port)],
            log_path=self.workdir / "sim.log",
            env=self.spec.environment or None,
            **options,
        )

    def _running(self) -> SimProcess:
        if self.sim is None:
            raise RuntimeError("the simulator is not started")
        return self.sim

    async def start(self) -> float:
        started = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.sim = self._new()
        await asyncio.to_thread(self.sim.start)
        return time.monotonic() - started

    async def stop(self) -> None:
        if self.sim is not None:
            await asyncio.to_thread(self.sim.stop)
            self.sim = None

    async def restart(self) -> float:
        await self.stop()
        return await self.start()

    def alive(self) -> bool:
        return self.sim is not None and self.sim.returncode() is None

    async def healthy(self) -> bool:
        if not self.alive():
            return False
        sim = self._running()
        await asyncio.to_thread(sim.control.clear_all)
        with contextlib.suppress(OSError):
            os.kill(sim.engine_pid, signal.SIGCONT)
        return True

    def _signalled(self, scenario: Scenario) -> int:
        sim = self._running()
        return sim.api_pid if scenario.fault.process == "api" else sim.engine_pid

    async def inject(self, scenario: Scenario) -> str:
        return await inject_sim(self._running().control, self._signalled(scenario), scenario)

    async def clear(self, scenario: Scenario) -> str:
        return await clear_sim(self._running().control, self._signalled(scenario), scenario)


def _title(scenario: Scenario) -> str:
    return "the API server" if scenario.fault.process == "api" else "VLLM::EngineCore"


async def inject_sim(control: SimControl, pid: int, scenario: Scenario) -> str:
    """A scenario's fault into a simulator: a signal to ``pid`` (its engine or API server),
    or its control port."""
    fault = scenario.fault
    if fault.kind in ("sigstop", "sigkill"):
        signum = signal.SIGSTOP if fault.kind == "sigstop" else signal.SIGKILL
        os.kill(pid, signum)
        return f"{signum.name} {_title(scenario)} pid {pid}"
    params: dict[str, Any] = dict(fault.params)  # a fault's own knobs, never a duration
    done = ""
    if fault.kind == "weight_update" and WEIGHT_UPDATE_PAUSE in params:
        # as RL frameworks do: pause the scheduler, then load the weights
        mode = params.pop(WEIGHT_UPDATE_PAUSE)
        await asyncio.to_thread(control.set_fault, "pause", mode=mode)
        done = f"fault pause {{'mode': {mode!r}}}, then "
    if fault.kind == "api_wedge":  # nothing reaches a wedged loop: it ends on its own
        params["duration"] = fault.duration
    await asyncio.to_thread(control.set_fault, fault.kind, **params)
    return f"{done}fault {fault.kind} {params or ''}".strip()


async def clear_sim(control: SimControl, pid: int, scenario: Scenario) -> str:
    if scenario.fault.kind == "sigstop":
        os.kill(pid, signal.SIGCONT)
        return f"SIGCONT {_title(scenario)}"
    await asyncio.to_thread(control.clear_all)
    return f"fault {scenario.fault.kind} cleared"


class VllmTarget:
    """A real vLLM (CPU build, tiny generated model) on a fixed port."""

    def __init__(self, spec: TargetSpec, workdir: Path) -> None:
        self.spec = spec
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        # absolute: vLLM runs in its log's folder and must find the same fault directory
        self.workdir = workdir.resolve()
        self.server: VllmServer | None = None
        self._paused = False  # a /pause of ours not yet resumed

    def build_server(self) -> VllmServer:
        """The server on this target's fixed port (not started)."""
        from chaos.vllm_engine import env as engine_env
        from chaos.vllm_engine.server import VllmServer

        env = engine_env.ensure_env()
        model = engine_env.ensure_model(env, self.spec.model)
        port = self.port

        class FixedPortServer(VllmServer):
            def command(self) -> list[str]:
                self.port = port  # the same URL across restarts: sentinel's target is fixed
                return super().command()

        extra = list(self.spec.extra_args)
        if self.spec.max_num_seqs is not None:
            extra += ["--max-num-seqs", str(self.spec.max_num_seqs)]
        return FixedPortServer(
            env.python,
            model,
            served_model_name=f"tiny-{self.spec.model}",
            fault_dir=self.workdir / "faults",
            log_path=self.workdir / "vllm.log",
            scheduling_policy=self.spec.scheduling_policy,
            extra_args=extra,
            environment=self.spec.environment,
        )

    def forget_pause(self) -> None:
        """The server was restarted: a /pause of ours ended with it."""
        self._paused = False

    def _built(self) -> VllmServer:
        if self.server is None:
            raise RuntimeError("the vLLM server is not built")
        return self.server

    async def start(self) -> float:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.server is None:
            self.server = await asyncio.to_thread(self.build_server)
        server = self.server
        server.faults.clear_all()
        await asyncio.to_thread(server.start)
        return float(await asyncio.to_thread(server.wait_ready, self.spec.start_timeout))

    async def stop(self) -> None:
        if self.server is not None:
            await asyncio.to_thread(self.server.stop)

    async def restart(self) -> float:
        server = self._built()
        server.faults.clear_all()
        return float(await asyncio.to_thread(server.restart, self.spec.start_timeout))

    def alive(self) -> bool:
        return self.server is not None and bool(self.server.alive())

    async def healthy(self) -> bool:
        if not self.alive():
            return False
        server = self._built()
        server.faults.clear_all()
        await asyncio.to_thread(server.resume_all)
        if self._paused:
            try:
                await self._post("/resume")
            except (httpx.HTTPError, RuntimeError):
                return False

        def one() -> bool:
            with httpx.Client(base_url=self.base_url) as client:
                return server.complete(client, timeout=30.0) is not None

        return await asyncio.to_thread(one)

    def _title(self, scenario: Scenario) -> str:
        from chaos.vllm_engine.server import ENGINE_TITLE, WORKER_TITLE

        return WORKER_TITLE if scenario.fault.process == "worker" else ENGINE_TITLE

    async def _post(self, path: str) -> str:
        """A dev-mode route of the server (``VLLM_SERVER_DEV_MODE=1``); its answer's body."""
        # /pause?mode=wait answers once the running requests are done
        async with httpx.AsyncClient(base_url=self.base_url, timeout=DEV_ROUTE_TIMEOUT) as client:
            response = await client.post(path)
        if response.status_code != 200:
            raise RuntimeError(f"POST {path}: {response.status_code} {response.text[:200]}")
        if path == "/resume":
            self._paused = False
        return response.text.strip()

    async def inject(self, scenario: Scenario) -> str:
        server, fault = self._built(), scenario.fault
        if fault.kind == "pause":
            mode = str(fault.params.get("mode", "keep"))
            self._paused = True
            answer = await self._post(f"/pause?mode={mode}")
            return f"POST /pause?mode={mode}: {answer}"
        if fault.kind in ("sigstop", "sigkill"):
            signum = signal.SIGSTOP if fault.kind == "sigstop" else signal.SIGKILL
            if fault.process == "api":
                os.kill(server.api_pid, signum)
                return f"{signum.name} the API server pid {server.api_pid}"
            title = self._title(scenario)
            pids = server.signal(title, signum)
            return f"{signum.name} {title} pid {', '.join(map(str, pids))}"
        params: dict[str, Any] = dict(fault.params)  # a fault's own knobs, never a duration
        server.faults.set(fault.kind, **params)
        return f"plugin fault {fault.kind} {fault.params or ''}".strip()

    async def clear(self, scenario: Scenario) -> str:
        server = self._built()
        if scenario.fault.kind == "pause":
            return f"POST /resume: {await self._post('/resume')}"
        if scenario.fault.kind == "sigstop":
            if scenario.fault.process == "api":
                os.kill(server.api_pid, signal.SIGCONT)
                return "SIGCONT the API server"
            title = self._title(scenario)
            server.signal(title, signal.SIGCONT)
            return f"SIGCONT {title}"
        server.faults.clear_all()
        return f"plugin fault {scenario.fault.kind} cleared"


def make_target(spec: TargetSpec, workdir: Path) -> Target:
    return SimTarget(spec, workdir) if spec.kind == "sim" else VllmTarget(spec, workdir)
