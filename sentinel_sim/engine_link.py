"""The API process's end of one engine child: its process, its socket and its start-up.

One per data-parallel engine (one in all by default). It starts
``python -m sentinel_sim.engine`` with the engine's rank, batches the
requests and aborts meant for it into one message per event-loop turn, and
hands each published step to the server with the engine's index, so the
server keeps each engine's metrics apart (vLLM's ``engine`` label).

It also keeps what vLLM's data-parallel balancer knows of the engine: the
requests handed to it that it has not yet reported finished or aborted (a
hung engine reports none, so they stay counted), and its last published
``running + waiting``.

Engine queries (vLLM's utility calls: ``is_paused``, ``is_sleeping``, the
weight version, a weight-transfer RPC) go through :meth:`EngineLink.call`;
the engine answers them between steps, so an engine whose loop is blocked
answers none until it is free again, as on vLLM.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from collections.abc import Callable
from typing import Any

from sentinel_sim import ipc
from sentinel_sim.config import SimConfig
from sentinel_sim.scheduler import EngineStats

StepHandler = Callable[[int, list[tuple[int, int, str | None]], EngineStats], None]


class EngineLink:
    """One engine child as the API process sees it."""

    def __init__(self, index: int, on_step: StepHandler, on_dead: Callable[[], None]) -> None:
        self.index = index
        self.pid: int | None = None
        self.worker_pids: list[int] = []
        self.proc: asyncio.subprocess.Process | None = None
        self._on_step = on_step
        self._on_dead = on_dead
        self._writer: asyncio.StreamWriter | None = None
        self._adds: list[tuple[Any, ...]] = []
        self._aborts: list[int] = []
        self._flush_scheduled = False
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.tasks: list[asyncio.Task[None]] = []
        self.closed = False  # the server is dead: nothing more is written
        self.in_flight: set[int] = set()  # handed to the engine, not yet reported done
        self.queued = 0  # running + waiting in the engine's last published stats
        self._calls: dict[int, asyncio.Future[Any]] = {}
        self._next_call = 0

    async def start(self, config: SimConfig) -> None:
        parent, child = socket.socketpair()
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "sentinel_sim.engine",
            "--ipc-fd",
            str(child.fileno()),
            "--scheduling-policy",
            config.scheduling_policy,
            "--max-num-seqs",
            str(config.max_num_seqs),
            "--data-parallel-rank",
            str(self.index),
            "--config",
            json.dumps(config.engine_json()),
            pass_fds=(child.fileno(),),
            stdin=asyncio.subprocess.DEVNULL,
        )
        child.close()
        self.pid = self.proc.pid
        reader, self._writer = await asyncio.open_connection(sock=parent)
        loop = asyncio.get_running_loop()
        self.tasks = [
            loop.create_task(self._read(reader)),
            loop.create_task(self._watch(self.proc)),
        ]
        await self._ready

    def failed(self, error: BaseException) -> None:
        """The server died (while this engine was starting, or later): fail what waits on it."""
        if not self._ready.done():
            self._ready.set_exception(error)
        calls, self._calls = self._calls, {}
        for future in calls.values():
            if not future.done():
                future.set_exception(error)

    def call(self, name: str, arg: Any = None) -> asyncio.Future[Any]:
        """Ask the engine ``name`` (a utility call); the future resolves with its answer."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.closed:
            future.set_exception(ConnectionError("the engine is gone"))
            return future
        self._next_call += 1
        self._calls[self._next_call] = future
        self.send(("utility", self._next_call, name, arg))
        return future

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                header = await reader.readexactly(ipc.HEADER_SIZE)
                message = ipc.decode(await reader.readexactly(ipc.frame_length(header)))
                if message[0] == "step":
                    stats: EngineStats = message[2]
                    if stats.scheduler:
                        self.queued = stats.running + stats.waiting
                    for rid, _, finish in message[1]:
                        if finish is not None:
                            self.in_flight.discard(rid)
                    self._on_step(self.index, message[1], stats)
                elif message[0] == "aborted":
                    self.in_flight.difference_update(message[1])
                elif message[0] == "utility":
                    future = self._calls.pop(int(message[1]), None)
                    if future is not None and not future.done():
                        future.set_result(message[2])
                elif message[0] == "ready" and not self._ready.done():
                    self.worker_pids = list(message[2]) if len(message) > 2 else []
                    self._ready.set_result(None)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        self._on_dead()

    async def _watch(self, proc: asyncio.subprocess.Process) -> None:
        await proc.wait()
        self._on_dead()

    @property
    def load(self) -> int:
        """The balancer's score: the larger of our own count and the engine's."""
        return max(len(self.in_flight), self.queued)

    def add(self, request: tuple[Any, ...]) -> None:
        self.in_flight.add(int(request[0]))
        self._adds.append(request)
        self._schedule_flush()

    def abort(self, rid: int) -> None:
        self._aborts.append(rid)
        self._schedule_flush()

    def send(self, message: tuple[Any, ...]) -> None:
        if self._writer is not None and not self.closed:
            self._writer.write(ipc.encode(message))

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._adds:
            self.send(("add", self._adds))
            self._adds = []
        if self._aborts:
            self.send(("abort", self._aborts))
            self._aborts = []
