"""One real vLLM per test session, shared by the engine tests and the contract tests.

The server runs the tiny random PaliGemma, which answers text, structured and
image requests, so one server covers every canary kind, with ``--max-num-seqs 4``
so that a saturation test can fill every slot. It is started on first
use, kept in the pytest config's stash, and stopped when pytest unconfigures
(also on Ctrl-C or SIGTERM, and the API server dies with pytest's process if
pytest itself is killed).

If the engine environment cannot be built the tests fail loudly, unless
``SENTINEL_SKIP_ENGINE=1`` asks for a skip with the reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import httpx
import psutil
import pytest

from chaos.vllm_engine import env as engine_env
from chaos.vllm_engine.faults import FaultSwitch
from chaos.vllm_engine.server import (
    ENGINE_TITLE,
    WORKER_TITLE,
    ServerError,
    VllmServer,
)

SKIP_ENV = "SENTINEL_SKIP_ENGINE"
SERVED_MODEL = "tiny-paligemma"
START_DEADLINE = 300.0  # generous: two cores shared with the rest of the suite
CANARY_DEADLINE = 60.0

_SERVER = pytest.StashKey["EngineServer"]()
_FAILED = pytest.StashKey[str]()


@dataclass
class EngineServer:
    """What engine tests get: the server, its faults and its processes."""

    server: VllmServer
    start_seconds: float
    restarts: int = field(default=0)

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def model(self) -> str:
        return self.server.served_model_name

    @property
    def api_pid(self) -> int:
        return self.server.api_pid

    @property
    def faults(self) -> FaultSwitch:
        return self.server.faults

    @property
    def log_path(self) -> Path:
        return self.server.log_path

    def engine_core(self) -> psutil.Process:
        return self.server.engine_core()

    def worker(self) -> psutil.Process:
        return self.server.worker()

    def stop_worker(self) -> list[int]:
        return self.server.signal(WORKER_TITLE, signal.SIGSTOP)

    def resume_worker(self) -> list[int]:
        return self.server.signal(WORKER_TITLE, signal.SIGCONT)

    def stop_engine_core(self) -> list[int]:
        return self.server.signal(ENGINE_TITLE, signal.SIGSTOP)

    def resume_engine_core(self) -> list[int]:
        return self.server.signal(ENGINE_TITLE, signal.SIGCONT)

    def kill_engine_core(self) -> list[int]:
        return self.server.signal(ENGINE_TITLE, signal.SIGKILL)

    def resume_all(self) -> list[int]:
        return self.server.resume_all()

    def alive(self) -> bool:
        return self.server.alive()

    def canary(self, deadline_s: float = CANARY_DEADLINE) -> bool:
        """Poll with small top-priority completions until one succeeds or the deadline."""
        deadline = time.monotonic() + deadline_s
        with httpx.Client(base_url=self.base_url) as client:
            while True:
                remaining = deadline - time.monotonic()
                if not self.alive() or remaining <= 0:
                    return False
                if self.server.complete(client, timeout=min(remaining, 10.0)) is not None:
                    return True
                time.sleep(0.1)  # a failed canary is retried until the deadline

    def restart(self) -> float:
        self.faults.clear_all()
        self.start_seconds = self.server.restart(START_DEADLINE)
        self.restarts += 1
        return self.start_seconds

    def contract_target(self) -> RealVllmTarget:
        return RealVllmTarget(self)


@dataclass
class RealVllmTarget:
    """The session's real vLLM behind the contract-test protocol."""

    engine: EngineServer
    supports_images: bool = True

    @property
    def base_url(self) -> str:
        return self.engine.base_url

    @property
    def model(self) -> str:
        return self.engine.model

    @property
    def scheduling_policy(self) -> str:
        return self.engine.server.scheduling_policy

    def stop_engine(self) -> None:
        """SIGSTOP the worker: the process that runs the model and makes tokens."""
        self.engine.stop_worker()

    def resume_engine(self) -> None:
        self.engine.resume_worker()


def _build_env() -> tuple[engine_env.EngineEnv, Path]:
    env = engine_env.ensure_env()
    return env, engine_env.ensure_model(env, "vision")


def _sigterm_as_interrupt() -> None:
    """Turn SIGTERM into KeyboardInterrupt so pytest's cleanup stops the server."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)


def shared_server(config: pytest.Config) -> EngineServer:
    """The session's server, started on first use."""
    existing = config.stash.get(_SERVER, None)
    if existing is not None:
        return existing
    failed = config.stash.get(_FAILED, None)
    if failed is None:
        try:
            env, model = _build_env()
        except (engine_env.EngineEnvError, OSError) as error:
            failed = config.stash[_FAILED] = f"real vLLM environment unavailable: {error}"
    if failed is not None:  # remembered, so later tests do not rebuild or restart
        if os.environ.get(SKIP_ENV) == "1":
            pytest.skip(f"{failed} ({SKIP_ENV}=1)")
        pytest.fail(failed, pytrace=False)
    logs = engine_env.cache_dir() / "logs"
    fault_dir = engine_env.cache_dir() / "faults" / f"session-{os.getpid()}"
    server = VllmServer(
        env.python,
        model,
        served_model_name=SERVED_MODEL,
        fault_dir=fault_dir,
        log_path=logs / f"vllm-session-{os.getpid()}.log",
        extra_args=["--max-num-seqs", "4"],  # few slots: saturation tests fill them
    )
    server.faults.clear_all()
    _sigterm_as_interrupt()
    config.add_cleanup(lambda: shutil.rmtree(fault_dir, ignore_errors=True))
    config.add_cleanup(server.stop)  # cleanups run last-in first-out: this one first
    try:
        server.start()
        seconds = server.wait_ready(START_DEADLINE)
    except ServerError as error:
        server.stop()
        config.stash[_FAILED] = f"the session's vLLM server could not start: {error}"
        raise
    engine = EngineServer(server, seconds)
    config.stash[_SERVER] = engine
    return engine


@contextlib.contextmanager
def healthy_between_tests(engine: EngineServer) -> Iterator[EngineServer]:
    """Yield the engine; afterwards clear faults, resume processes and demand a good canary.

    If the canary fails the server is restarted, so later tests start clean, and
    the test that left it broken fails.
    """
    yield engine
    engine.faults.clear_all()
    resumed = engine.resume_all() if engine.alive() else []
    if engine.alive() and engine.canary():
        return
    reason = "vLLM exited" if not engine.alive() else "no good canary within the deadline"
    engine.restart()
    pytest.fail(
        f"test left the real vLLM unhealthy ({reason}; resumed {resumed}); server restarted",
        pytrace=False,
    )
