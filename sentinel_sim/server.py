"""The API process's state: the engine child, faults, metrics and requests in flight.

:class:`SimServer` is what the OpenAI routes (:mod:`sentinel_sim.openai_api`)
and the control routes (:mod:`sentinel_sim.control_api`) act on; the process
around it (ports, signals, start-up order) is :mod:`sentinel_sim.app`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sentinel_sim.auto_sleep import IdleSleep
from sentinel_sim.config import SimConfig, check_fault_fits
from sentinel_sim.engine_link import EngineLink
from sentinel_sim.faults import (
    ENGINE_FAULTS,
    ActiveFault,
    Fault,
    FaultError,
    FaultSpec,
    FaultTable,
)
from sentinel_sim.metrics import VllmMetrics
from sentinel_sim.model import Reply
from sentinel_sim.scheduler import EngineStats


class EngineDead(RuntimeError):
    """The engine child is gone; every request in flight fails (vLLM's EngineDeadError)."""


class Pending:
    """A request handed to the engine, updated from the engine's step outputs."""

    __slots__ = (
        "engine",
        "error",
        "event",
        "finish",
        "generated",
        "prompt_tokens",
        "reply",
        "rid",
    )

    def __init__(self, rid: int, reply: Reply, prompt_tokens: int) -> None:
        self.rid = rid
        self.reply = reply
        self.prompt_tokens = prompt_tokens
        self.generated = 0
        self.engine = 0  # the data-parallel engine serving it
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
            engines=config.data_parallel_size,
        )
        self.pending: dict[int, Pending] = {}
        self.links: list[EngineLink] = []
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
        self.idle = IdleSleep(self)  # --sleep-idle-ttl: asleep when idle, woken by a request
        self.metrics_gate.set()
        # Set by the process around us: closes the OpenAI port for good (listener_closed).
        self.close_listener: Callable[[], Awaitable[None]] | None = None
        # Set by the process around us under --api-server-count: (server, seconds, spin).
        self.wedge_api: Callable[[int, float, bool], None] | None = None
        self._next_rid = 0
        self._balance_start = 0  # where the next least-loaded scan starts (ties rotate)
        self._expiry_handles: dict[Fault, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # The weight_update fault being shown as an operation in flight, and since when.
        self._weight_fault: tuple[ActiveFault, float] | None = None

    # -- engine links ------------------------------------------------------

    @property
    def engine_pid(self) -> int | None:
        """Engine 0's PID (the only engine unless ``--data-parallel-size``)."""
        return self.links[0].pid if self.links else None

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def start_engine(self) -> None:
        """Start every engine child (one per data-parallel rank) and wait until each is ready."""
        self.links = [
            EngineLink(index, self._on_step, self._on_engine_dead)
            for index in range(self.config.data_parallel_size)
        ]
        await asyncio.gather(*(link.start(self.config) for link in self.links))

    def _on_step(
        self, index: int, outputs: list[tuple[int, int, str | None]], stats: EngineStats
    ) -> None:
        self.metrics.record(stats, bool(outputs), index)
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
        """Any engine gone takes the server down, as vLLM's API server exits on EngineDeadError."""
        if self.dead:
            return
        self.dead = True
        for link in self.links:
            link.closed = True
            link.failed(EngineDead("engine exited during start-up"))
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
        engine: int | None = None,
        remote: bool = False,
    ) -> Pending:
        """Hand a request to ``engine`` (pinned by the caller) or to the least loaded one.

        vLLM's data-parallel balancer: an engine's load is the larger of the
        requests handed to it and not yet reported finished or aborted, and
        its last published running plus waiting; ties go to the engines in
        turn. An engine whose requests never finish (hung) gets no new ones.
        """
        if self.dead:
            raise EngineDead("EngineCore encountered an issue.")
        self._next_rid += 1
        rid = self._next_rid
        link = self.links[engine] if engine is not None else self._least_loaded()
        request = Pending(rid, reply, prompt_tokens)
        request.engine = link.index
        self.pending[rid] = request
        link.add((rid, prompt_tokens, max_tokens, eos_at, priority, arrival, structured, remote))
        return request

    def _least_loaded(self) -> EngineLink:
        count = len(self.links)
        order = [self.links[(self._balance_start + i) % count] for i in range(count)]
        self._balance_start = (self._balance_start + 1) % count
        return min(order, key=lambda link: link.load)  # min keeps the first of equals

    def abort(self, request: Pending) -> None:
        """The client went away: tell its engine to drop the request (vLLM aborts it)."""
        if request.done or self.pending.pop(request.rid, None) is None:
            return
        self.links[request.engine].abort(request.rid)

    def _send(self, message: tuple[Any, ...], engine: int | None = None) -> None:
        for link in self.links:
            if engine is None or link.index == engine:
                link.send(message)

    # -- faults --------------------------------------------------------------

    def set_fault(self, spec: FaultSpec) -> ActiveFault:
        """Switch a fault on; a ``long_prefill`` that cannot fit raises :class:`FaultError`."""
        check_fault_fits(spec, self.config.kv_cache_tokens)
        if spec.fault is Fault.API_WEDGE:
            self._wedge(spec)
        entry = self.faults.set(spec)
        old = self._expiry_handles.pop(spec.fault, None)
        if old is not None:
            old.cancel()
        if spec.fault in ENGINE_FAULTS:
            message = ("fault", spec.fault.value, dict(entry.params), entry.until)
            self._send(message, entry.params.get("engine"))
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
        if spec.fault is Fault.WEIGHTS_UPDATED:  # a finished transfer with its version
            self.metrics.weight_operation_started("finish")
            self.metrics.weight_operation_ended("finish", 0.0)
            self._fire("set_weight_version", str(entry.params["version"]))
        return entry

    def _wedge(self, spec: FaultSpec) -> None:
        """Deliver ``api_wedge`` to its satellite; refused without one to wedge."""
        server = int(spec.params["server"])
        if self.wedge_api is None or server >= self.config.api_server_count:
            raise FaultError(
                f"api_wedge needs server 1..N-1 of --api-server-count N "
                f"(this simulator runs {self.config.api_server_count})"
            )
        forever = 10.0**9  # a wedge without a duration lasts until the process stops
        self.wedge_api(
            server, forever if spec.duration is None else spec.duration, bool(spec.params["spin"])
        )

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
        self._show_sleep_state()
        self._show_weight_update()
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

    def _show_sleep_state(self) -> None:
        """``vllm:engine_sleep_state``, set by the front end as vLLM's AsyncLLM.sleep does."""
        self.metrics.record_sleep_state(0, 0)
        entry = self.faults.get(Fault.SLEEP)
        if entry is not None:
            self.metrics.record_sleep_state(
                1, int(entry.params["level"]), entry.params.get("engine")
            )

    def _show_weight_update(self) -> None:
        """The ``weight_update`` fault as one weight-transfer operation in flight."""
        entry = self.faults.get(Fault.WEIGHT_UPDATE)
        shown = self._weight_fault
        if shown is not None and shown[0] is entry:
            return
        if shown is not None:
            old, started = shown
            self._weight_fault = None
            self.metrics.weight_operation_ended(
                str(old.params["operation"]), time.monotonic() - started
            )
            version = old.params.get("version")
            if version is not None:
                self._fire("set_weight_version", str(version), old.params.get("engine"))
        if entry is not None:
            self._weight_fault = (entry, time.monotonic())
            self.metrics.weight_operation_started(str(entry.params["operation"]))

    # -- engine queries (vLLM's utility calls) --------------------------------

    def _links_for(self, engine: int | None) -> list[EngineLink]:
        return [link for link in self.links if engine is None or link.index == engine]

    def _fire(self, name: str, arg: Any = None, engine: int | None = None) -> None:
        """An engine query whose answer nobody awaits."""
        if self.dead:
            return
        for link in self._links_for(engine):
            future = link.call(name, arg)
            future.add_done_callback(lambda f: f.cancelled() or f.exception())

    async def engine_query(
        self, name: str, arg: Any = None, engine: int | None = None
    ) -> list[Any]:
        """Ask every engine (or one) and wait for the answers; an engine in a blocked loop
        answers only once it is free, as vLLM's utility calls wait for the engine core."""
        if self.dead:
            raise EngineDead("EngineCore encountered an issue.")
        try:
            return list(
                await asyncio.gather(*(link.call(name, arg) for link in self._links_for(engine)))
            )
        except (ConnectionError, EngineDead) as exc:
            raise EngineDead("EngineCore encountered an issue.") from exc

    async def weight_operation(self, operation: str, seconds: float = 0.0) -> None:
        """One RL weight-transfer RPC, counted in flight while the engines run it."""
        self.metrics.weight_operation_started(operation)
        started = time.monotonic()
        try:
            await self.engine_query("rpc", seconds)
        finally:
            self.metrics.weight_operation_ended(operation, time.monotonic() - started)

    # -- API-side fault readings ---------------------------------------------

    def sleep_refuses(self) -> bool:
        """``sleep`` with ``mode=503``: generation is refused at once while asleep."""
        entry = self.faults.get(Fault.SLEEP)
        return entry is not None and entry.params["mode"] == "503"

    def image_delay(self) -> float:
        """``slow_image``: seconds each image request spends in preprocessing."""
        entry = self.faults.get(Fault.SLOW_IMAGE)
        return 0.0 if entry is None else float(entry.params["seconds"])

    def should_fail_5xx(self) -> int | None:
        entry = self.faults.get(Fault.ERROR_5XX)
        if entry is None or self.random.random() >= float(entry.params["rate"]):
            return None
        return int(entry.params["status"])

    def garbage_mode(self) -> str | None:
        entry = self.faults.get(Fault.GARBAGE)
        return None if entry is None else str(entry.params["mode"])

    def _exit_now(self, code: int) -> None:
        """The ``exit`` fault: the API server dies abruptly and takes the engines with it."""
        for link in self.links:
            for pid in (link.pid, *link.worker_pids):
                if pid is not None:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGCONT)
                        os.kill(pid, signal.SIGKILL)
        sys.stdout.flush()
        os._exit(code)

    def signal_engine(self, name: str, engine: int = 0, worker: int | None = None) -> int:
        """A real signal to one engine (its data-parallel index) or one of its TP workers."""
        signals = {"stop": signal.SIGSTOP, "cont": signal.SIGCONT, "kill": signal.SIGKILL}
        if name not in signals:
            raise ValueError(f"signal must be one of {', '.join(signals)}")
        if not 0 <= engine < len(self.links):
            raise ValueError(f"engine must be within 0..{len(self.links) - 1}")
        link = self.links[engine]
        if worker is not None and not 0 <= worker < len(link.worker_pids):
            raise ValueError(f"engine {engine} has no TP worker {worker}")
        pid = link.pid if worker is None else link.worker_pids[worker]
        if pid is None:
            raise ProcessLookupError("no engine process")
        os.kill(pid, signals[name])
        return pid

    def state(self) -> dict[str, Any]:
        return {
            "api_pid": os.getpid(),
            "engine_pid": self.engine_pid,
            "engine_pids": [link.pid for link in self.links],
            "worker_pids": [link.worker_pids for link in self.links],
            "engine_alive": not self.dead,
            "model": self.config.model,
            "scheduling_policy": self.config.scheduling_policy,
            "max_num_seqs": self.config.max_num_seqs,
            "in_flight": len(self.pending),
        }

    async def shutdown_engine(self) -> None:
        await asyncio.gather(*(self._shutdown(link) for link in self.links))

    async def _shutdown(self, link: EngineLink) -> None:
        proc = link.proc
        if proc is None or proc.returncode is not None:
            return
        for pid in (proc.pid, *link.worker_pids):  # a stopped process ignores all but SIGKILL
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGCONT)
        link.send(("shutdown",))
        try:
            await asyncio.wait_for(proc.wait(), timeout=2.0)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()

    def close(self) -> None:
        self.mm_gate.set()  # release a preprocessing thread held by multimodal_hang
        self.mm_executor.shutdown(wait=False, cancel_futures=True)
        for task in [*self._tasks, *(t for link in self.links for t in link.tasks)]:
            task.cancel()
