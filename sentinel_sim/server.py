"""The API process's state: the engine child, faults, metrics and requests in flight.

:class:`SimServer` is what the OpenAI routes (:mod:`sentinel_sim.openai_api`)
and the control routes (:mod:`sentinel_sim.control_api`) act on; the process
around it (ports, signals, start-up order) is :mod:`sentinel_sim.app`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import sys
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sentinel_sim import ipc
from sentinel_sim.config import SimConfig
from sentinel_sim.faults import ENGINE_FAULTS, ActiveFault, Fault, FaultSpec, FaultTable
from sentinel_sim.metrics import VllmMetrics
from sentinel_sim.model import Reply
from sentinel_sim.scheduler import EngineStats


class EngineDead(RuntimeError):
    """The engine child is gone; every request in flight fails (vLLM's EngineDeadError)."""


class Pending:
    """A request handed to the engine, updated from the engine's step outputs."""

    __slots__ = ("error", "event", "finish", "generated", "prompt_tokens", "reply", "rid")

    def __init__(self, rid: int, reply: Reply, prompt_tokens: int) -> None:
        self.rid = rid
        self.reply = reply
        self.prompt_tokens = prompt_tokens
        self.generated = 0
        self.finish: str | None = None
        self.error: BaseException | None = None
        self.event = asyncio.Event()

    @property
    def done(self) -> bool:
        return self.finish is not None or self.error is not None

    async def wait_update(self) -> None:
        await self.event.wait()
        self.event.clear()
        if self.error is not None:
            raise self.error


class SimServer:
    """Everything the two HTTP apps share: config, faults, metrics and the engine link."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.faults = FaultTable()
        self.metrics = VllmMetrics(
            config.model,
            max_model_len=config.max_model_len,
            kv_cache_tokens=config.kv_cache_tokens,
        )
        self.pending: dict[int, Pending] = {}
        self.engine_pid: int | None = None
        self.engine_proc: asyncio.subprocess.Process | None = None
        self.dead = False
        self.stopping = asyncio.Event()
        self.exit_code = 0
        self.random = random.Random()
        # vLLM preprocesses multimodal input on one thread: one stuck image blocks the next.
        self.mm_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mm-preprocess")
        self.mm_gate = threading.Event()
        self.mm_gate.set()
        self.open_gate = asyncio.Event()  # cleared while the blackhole fault is on
        self.open_gate.set()
        self.metrics_gate = asyncio.Event()  # cleared while the metrics_lapse fault is on
        self.metrics_gate.set()
        # Set by the process around us: closes the OpenAI port for good (listener_closed).
        self.close_listener: Callable[[], Awaitable[None]] | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._adds: list[tuple[Any, ...]] = []
        self._aborts: list[int] = []
        self._flush_scheduled = False
        self._next_rid = 0
        self._expiry_handles: dict[Fault, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._engine_ready = asyncio.get_running_loop().create_future()

    # -- engine link ---------------------------------------------------------

    async def start_engine(self) -> None:
        parent, child = socket.socketpair()
        config_json = json.dumps(self.config.engine_json())
        self.engine_proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "sentinel_sim.engine",
            "--ipc-fd",
            str(child.fileno()),
            "--scheduling-policy",
            self.config.scheduling_policy,
            "--max-num-seqs",
            str(self.config.max_num_seqs),
            "--config",
            config_json,
            pass_fds=(child.fileno(),),
            stdin=asyncio.subprocess.DEVNULL,
        )
        child.close()
        self.engine_pid = self.engine_proc.pid
        reader, self._writer = await asyncio.open_connection(sock=parent)
        self._spawn(self._read_engine(reader))
        self._spawn(self._watch_engine(self.engine_proc))
        await self._engine_ready

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _read_engine(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                header = await reader.readexactly(ipc.HEADER_SIZE)
                payload = await reader.readexactly(ipc.frame_length(header))
                message = ipc.decode(payload)
                if message[0] == "step":
                    self._on_step(message[1], message[2])
                elif message[0] == "ready" and not self._engine_ready.done():
                    self._engine_ready.set_result(None)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        self._on_engine_dead()

    async def _watch_engine(self, proc: asyncio.subprocess.Process) -> None:
        await proc.wait()
        self._on_engine_dead()

    def _on_step(self, outputs: list[tuple[int, int, str | None]], stats: EngineStats) -> None:
        self.metrics.record(stats, bool(outputs))
        pending = self.pending
        for rid, generated, finish in outputs:
            request = pending.get(rid)
            if request is None:
                continue
            request.generated = generated
            if finish is not None:
                request.finish = finish
                del pending[rid]
            request.event.set()

    def _on_engine_dead(self) -> None:
        if self.dead:
            return
        self.dead = True
        if not self._engine_ready.done():
            self._engine_ready.set_exception(EngineDead("engine exited during start-up"))
        for request in self.pending.values():
            request.error = EngineDead("EngineCore encountered an issue.")
            request.event.set()
        self.pending.clear()
        if not self.stopping.is_set():
            self.exit_code = 1
            asyncio.get_running_loop().call_later(self.config.dead_exit_delay, self.stopping.set)

    def submit(
        self,
        reply: Reply,
        *,
        prompt_tokens: int,
        max_tokens: int,
        eos_at: int | None,
        priority: int,
        arrival: float,
        structured: bool,
    ) -> Pending:
        if self.dead:
            raise EngineDead("EngineCore encountered an issue.")
        self._next_rid += 1
        rid = self._next_rid
        request = Pending(rid, reply, prompt_tokens)
        self.pending[rid] = request
        self._adds.append((rid, prompt_tokens, max_tokens, eos_at, priority, arrival, structured))
        self._schedule_flush()
        return request

    def abort(self, request: Pending) -> None:
        """The client went away: tell the engine to drop the request (vLLM aborts it)."""
        if request.done or self.pending.pop(request.rid, None) is None:
            return
        self._aborts.append(request.rid)
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        writer = self._writer
        if writer is None or self.dead:
            return
        if self._adds:
            writer.write(ipc.encode(("add", self._adds)))
            self._adds = []
        if self._aborts:
            writer.write(ipc.encode(("abort", self._aborts)))
            self._aborts = []

    def _send(self, message: tuple[Any, ...]) -> None:
        if self._writer is not None and not self.dead:
            self._writer.write(ipc.encode(message))

    # -- faults --------------------------------------------------------------

    def set_fault(self, spec: FaultSpec) -> ActiveFault:
        entry = self.faults.set(spec)
        old = self._expiry_handles.pop(spec.fault, None)
        if old is not None:
            old.cancel()
        if spec.fault in ENGINE_FAULTS:
            self._send(("fault", spec.fault.value, dict(entry.params), entry.until))
        loop = asyncio.get_running_loop()
        if spec.duration is not None:
            self._expiry_handles[spec.fault] = loop.call_later(
                spec.duration, self._expire, spec.fault, entry
            )
        self._apply_gates()
        if spec.fault is Fault.LISTENER_CLOSED and self.close_listener is not None:
            self._spawn(self.close_listener())
        if spec.fault is Fault.EXIT:
            loop.call_later(float(entry.params["delay"]), self._exit_now, int(entry.params["code"]))
        return entry

    def clear_fault(self, fault: Fault | None) -> None:
        self.faults.clear(fault)
        for name in [fault] if fault is not None else list(self._expiry_handles):
            handle = self._expiry_handles.pop(name, None)
            if handle is not None:
                handle.cancel()
        self._send(("clear", None if fault is None else fault.value))
        self._apply_gates()

    def _expire(self, fault: Fault, entry: ActiveFault) -> None:
        self._expiry_handles.pop(fault, None)
        if self.faults.get(fault) in (entry, None):
            self.faults.clear(fault)
        self._apply_gates()

    def _apply_gates(self) -> None:
        if self.faults.get(Fault.MULTIMODAL_HANG) is None:
            self.mm_gate.set()
        else:
            self.mm_gate.clear()
        for fault, gate in (
            (Fault.BLACKHOLE, self.open_gate),
            (Fault.METRICS_LAPSE, self.metrics_gate),
        ):
            if self.faults.get(fault) is None:
                gate.set()
            else:
                gate.clear()

    def should_fail_5xx(self) -> int | None:
        entry = self.faults.get(Fault.ERROR_5XX)
        if entry is None or self.random.random() >= float(entry.params["rate"]):
            return None
        return int(entry.params["status"])

    def garbage_mode(self) -> str | None:
        entry = self.faults.get(Fault.GARBAGE)
        return None if entry is None else str(entry.params["mode"])

    def _exit_now(self, code: int) -> None:
        """The ``exit`` fault: the API server dies abruptly and takes the engine with it."""
        if self.engine_pid is not None:
            with contextlib.suppress(OSError):
                os.kill(self.engine_pid, signal.SIGCONT)
                os.kill(self.engine_pid, signal.SIGKILL)
        sys.stdout.flush()
        os._exit(code)

    def signal_engine(self, name: str) -> int:
        signals = {"stop": signal.SIGSTOP, "cont": signal.SIGCONT, "kill": signal.SIGKILL}
        if name not in signals:
            raise ValueError(f"signal must be one of {', '.join(signals)}")
        if self.engine_pid is None:
            raise ProcessLookupError("no engine process")
        os.kill(self.engine_pid, signals[name])
        return self.engine_pid

    def state(self) -> dict[str, Any]:
        return {
            "api_pid": os.getpid(),
            "engine_pid": self.engine_pid,
            "engine_alive": not self.dead,
            "model": self.config.model,
            "scheduling_policy": self.config.scheduling_policy,
            "max_num_seqs": self.config.max_num_seqs,
            "in_flight": len(self.pending),
        }

    async def shutdown_engine(self) -> None:
        proc = self.engine_proc
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(OSError):
            os.kill(proc.pid, signal.SIGCONT)
        self._send(("shutdown",))
        try:
            await asyncio.wait_for(proc.wait(), timeout=2.0)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()

    def close(self) -> None:
        self.mm_gate.set()  # release a preprocessing thread held by multimodal_hang
        self.mm_executor.shutdown(wait=False, cancel_futures=True)
        for task in self._tasks:
            task.cancel()
