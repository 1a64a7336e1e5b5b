"""Start and stop a simulated vLLM as a subprocess, from tests, scenarios and the demo.

:class:`SimProcess` runs ``python -m sentinel_sim --port 0 --control-port 0 ...``,
waits (with a deadline, never a fixed sleep) for the one JSON "ready" line the
simulator prints, and exposes what callers need::

    with SimProcess(max_num_seqs=4, scheduling_policy="priority") as sim:
        httpx.get(sim.base_url + "/health")        # http://127.0.0.1:PORT
        sim.control.set_fault("engine_hang", duration=3)
        os.kill(sim.engine_pid, signal.SIGSTOP)    # the VLLM::EngineCore child

    async with SimProcess() as sim:                # the same from asyncio code
        ...

On exit it stops everything it started, whatever state it is in: the engine
child gets SIGCONT first (a stopped process would ignore SIGTERM), the API
process gets SIGTERM and, after a grace period, SIGKILL; the engine is killed
if it outlived the API process. The simulator's stderr goes to a log file
(:attr:`SimProcess.log_path`) whose tail is included in start-up errors.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import psutil

from sentinel_sim.control import SimControl
from sentinel_sim.engine import PROCESS_TITLE

__all__ = ["PROCESS_TITLE", "SimProcess", "SimStartError"]


def _gone(process: psutil.Process, timeout: float) -> bool:
    """Poll until ``process`` has exited (a zombie counts: its parent, not we, reaps it)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


class SimStartError(RuntimeError):
    """The simulator exited or did not report ready before the deadline."""


class SimProcess:
    """One simulated vLLM (API process + ``VLLM::EngineCore`` child) owned by the caller.

    Keyword options map to the simulator's flags (``None`` keeps its default):
    ``model``, ``max_num_seqs``, ``kv_cache_tokens``, ``decode_tps``,
    ``prefill_tps``, ``scheduling_policy`` (``fcfs`` | ``priority``),
    ``text_only``, ``reply_tokens``, ``max_model_len``, ``startup_delay``,
    ``dead_exit_delay``, ``data_parallel_size`` (engine children),
    ``tensor_parallel_size`` (worker children per engine),
    ``max_num_batched_tokens`` (the per-step token budget), ``dev_mode``
    (vLLM's dev routes: sleep, pause, weight updates), ``reasoning_parser``,
    ``reasoning_tokens`` and ``reasoning_field`` (chat replies think first),
    ``no_chat_template`` (a base model: chat answers vLLM's 400),
    ``thinking_ignores_template`` (a template that thinks whatever it is told), and
    ``faults`` (``NAME[:k=v,...]`` strings active from the start).
    ``extra_args`` are appended verbatim; ``env`` is added to the simulator's
    environment (e.g. ``{"VLLM_SERVER_DEV_MODE": "1"}``, as vLLM reads it).
    """

    def __init__(
        self,
        *,
        model: str | None = None,
        max_num_seqs: int | None = None,
        kv_cache_tokens: int | None = None,
        decode_tps: float | None = None,
        prefill_tps: float | None = None,
        scheduling_policy: str | None = None,
        text_only: bool = False,
        reply_tokens: int | None = None,
        max_model_len: int | None = None,
        startup_delay: float | None = None,
        dead_exit_delay: float | None = None,
        data_parallel_size: int | None = None,
        tensor_parallel_size: int | None = None,
        api_server_count: int | None = None,
        max_num_batched_tokens: int | None = None,
        dev_mode: bool = False,
        reasoning_parser: str | None = None,
        reasoning_tokens: int | None = None,
        reasoning_field: str | None = None,
        no_chat_template: bool = False,
        thinking_ignores_template: bool = False,
        faults: Sequence[str] = (),
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        host: str = "127.0.0.1",
        startup_timeout: float = 30.0,
        log_path: str | os.PathLike[str] | None = None,
    ) -> None:
        args = ["--host", host, "--port", "0", "--control-host", host, "--control-port", "0"]
        options: dict[str, Any] = {
            "--model": model,
            "--max-num-seqs": max_num_seqs,
            "--kv-cache-tokens": kv_cache_tokens,
            "--decode-tps": decode_tps,
            "--prefill-tps": prefill_tps,
            "--scheduling-policy": scheduling_policy,
            "--reply-tokens": reply_tokens,
            "--max-model-len": max_model_len,
            "--startup-delay": startup_delay,
            "--dead-exit-delay": dead_exit_delay,
            "--data-parallel-size": data_parallel_size,
            "--tensor-parallel-size": tensor_parallel_size,
            "--api-server-count": api_server_count,
            "--max-num-batched-tokens": max_num_batched_tokens,
            "--reasoning-parser": reasoning_parser,
            "--reasoning-tokens": reasoning_tokens,
            "--reasoning-field": reasoning_field,
        }
        for flag, value in options.items():
            if value is not None:
                args += [flag, str(value)]
        if text_only:
            args.append("--text-only")
        if dev_mode:
            args.append("--dev-mode")
        if no_chat_template:
            args.append("--no-chat-template")
        if thinking_ignores_template:
            args.append("--thinking-ignores-template")
        for fault in faults:
            args += ["--fault", fault]
        args += list(extra_args)
        self.args: list[str] = args
        self.env: dict[str, str] = dict(env or {})
        self.host = host
        self.startup_timeout = startup_timeout
        self._log_path = Path(log_path) if log_path is not None else None
        self._owns_log = log_path is None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: Any = None
        self._control: SimControl | None = None
        self.ready: dict[str, Any] = {}

    # -- what callers use ------------------------------------------------------

    @property
    def port(self) -> int:
        return int(self._require_ready()["port"])

    @property
    def control_port(self) -> int:
        return int(self._require_ready()["control_port"])

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible root, e.g. ``http://127.0.0.1:PORT`` (no ``/v1``)."""
        return f"http://{self.host}:{self.port}"

    @property
    def control_url(self) -> str:
        return f"http://{self.host}:{self.control_port}"

    @property
    def engine_pid(self) -> int:
        return int(self._require_ready()["engine_pid"])

    @property
    def engine_pids(self) -> list[int]:
        """One PID per data-parallel engine (``VLLM::EngineCore_DP<i>``), engine 0 first."""
        return [int(pid) for pid in self._require_ready().get("engine_pids") or [self.engine_pid]]

    @property
    def worker_pids(self) -> list[list[int]]:
        """Each engine's tensor-parallel workers (``VLLM::Worker_TP<r>``), by rank."""
        return [list(map(int, pids)) for pids in self._require_ready().get("worker_pids") or []]

    @property
    def api_pid(self) -> int:
        return int(self._require_ready()["api_pid"])

    @property
    def api_pids(self) -> list[int]:
        """Every API-server process, server 0 (the one owning the engine link) first."""
        return [int(pid) for pid in self._require_ready().get("api_pids") or [self.api_pid]]

    @property
    def model(self) -> str:
        return str(self._require_ready()["model"])

    @property
    def scheduling_policy(self) -> str:
        return str(self._require_ready()["scheduling_policy"])

    @property
    def log_path(self) -> Path | None:
        return self._log_path

    @property
    def control(self) -> SimControl:
        """A control client for this simulator, closed when the simulator stops."""
        if self._control is None:
            self._control = SimControl(self.control_url)
        return self._control

    def engine_process(self) -> psutil.Process:
        return psutil.Process(self.engine_pid)

    def signal_engine(self, signum: int) -> None:
        os.kill(self.engine_pid, signum)

    def returncode(self) -> int | None:
        """The API process's exit status, or None while it runs."""
        return None if self._proc is None else self._proc.poll()

    def wait_exit(self, timeout: float) -> int:
        """Wait for the API process to exit on its own (after SIGKILL of the engine, ``exit``)."""
        if self._proc is None:
            raise RuntimeError("not started")
        return self._proc.wait(timeout=timeout)

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> Self:
        if self._proc is not None:
            raise RuntimeError("already started")
        if self._log_path is None:
            handle, name = tempfile.mkstemp(prefix="chaos-sim-", suffix=".log")
            os.close(handle)
            self._log_path = Path(name)
        self._log_file = open(self._log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "sentinel_sim", *self.args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log_file,
            start_new_session=True,
            env={**os.environ, **self.env} if self.env else None,
        )
        try:
            self.ready = self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> dict[str, Any]:
        assert self._proc is not None
        assert self._proc.stdout is not None
        deadline = time.monotonic() + self.startup_timeout
        buffer = b""
        with selectors.DefaultSelector() as selector:
            selector.register(self._proc.stdout, selectors.EVENT_READ)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise SimStartError(
                        f"simulator not ready after {self.startup_timeout} s\n{self._log_tail()}"
                    )
                if selector.select(timeout=min(remaining, 0.5)):
                    chunk = os.read(self._proc.stdout.fileno(), 65536)
                    if not chunk:
                        self._proc.wait(timeout=5)
                        raise SimStartError(
                            f"simulator exited with {self._proc.returncode} before ready\n"
                            + self._log_tail()
                        )
                    buffer += chunk
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        with contextlib.suppress(ValueError):
                            message = json.loads(line)
                            if isinstance(message, dict) and message.get("event") == "ready":
                                return message
                elif self._proc.poll() is not None:
                    raise SimStartError(
                        f"simulator exited with {self._proc.returncode} before ready\n"
                        + self._log_tail()
                    )

    def _log_tail(self, limit: int = 4000) -> str:
        if self._log_path is None or not self._log_path.exists():
            return ""
        return self._log_path.read_text(errors="replace")[-limit:]

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the API process and the engine child, even if stopped or hung; idempotent."""
        if self._control is not None:
            self._control.close()
            self._control = None
        proc = self._proc
        if proc is not None:
            engine = self._engine_if_alive()
            # Every engine and worker: a stopped one would ignore SIGTERM.
            children = self._descendants()
            for pid in (engine.pid if engine else None, proc.pid, *(c.pid for c in children)):
                if pid is not None:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGCONT)
            if proc.poll() is None:
                with contextlib.suppress(OSError):
                    proc.terminate()
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=timeout)
            for child in [*([engine] if engine is not None else []), *children]:
                if not _gone(child, timeout):
                    with contextlib.suppress(psutil.Error):
                        child.kill()
                    _gone(child, timeout)
            if proc.stdout is not None:
                proc.stdout.close()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self._owns_log and self._log_path is not None:
            with contextlib.suppress(OSError):
                self._log_path.unlink()

    def _descendants(self) -> list[psutil.Process]:
        """Every process below the API process (engines and their workers), while it lives."""
        if self._proc is None:
            return []
        try:
            return psutil.Process(self._proc.pid).children(recursive=True)
        except psutil.Error:
            return []

    def _engine_if_alive(self) -> psutil.Process | None:
        pid = self.ready.get("engine_pid")
        if pid is None:
            return None
        try:
            engine = psutil.Process(int(pid))
            return engine if engine.is_running() else None
        except psutil.Error:
            return None

    def _require_ready(self) -> dict[str, Any]:
        if not self.ready:
            raise RuntimeError("SimProcess is not started (use start() or a with block)")
        return self.ready

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        import asyncio

        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        import asyncio

        await asyncio.to_thread(self.stop)
