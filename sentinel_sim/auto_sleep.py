"""Idle auto-sleep, as vLLM's proposed ``--sleep-idle-ttl`` (PR #47703) behaves.

After ``sleep_idle_ttl`` seconds with no inference request in flight or
arriving, the API process puts the engine to sleep through the same machinery
as ``POST /sleep`` (the ``sleep`` fault: the scheduler paused, the sleep
gauge set for ``sleep_idle_level``). The next inference request wakes it and
is held in the API process until the wake completes (``wake_seconds``), then
served; health probes and ``/metrics`` never touch the timer. A sleep entered
by ``POST /sleep`` or the control port is never woken by a request, as the
proposal keeps manual sleeps for RLHF flows. The requests held for the wake
wait in the API process's middleware, not in the engine, so no request gauge
counts them. The wake itself is an engine utility call (vLLM's
``wake_up``), so while it runs the engine answers no other query:
``/is_sleeping`` waits behind it, and the sleep gauge turns awake only when it
returns. The broken twin is the ``wake_hang`` fault: the wake never returns,
the requests held wait for good, and ``/is_sleeping`` answers nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Protocol

from sentinel_sim.config import SimConfig
from sentinel_sim.faults import Fault, FaultSpec, FaultTable
from sentinel_sim.metrics import VllmMetrics

WAKE_HUNG_S = 3600.0  # the wake_hang fault: the engine's wake call never returns in a test


class Server(Protocol):
    """What the idle timer needs of the simulated server (sentinel_sim.server.SimServer)."""

    config: SimConfig
    faults: FaultTable
    metrics: VllmMetrics

    def set_fault(self, spec: FaultSpec) -> Any: ...

    def clear_fault(self, fault: Fault | None) -> None: ...

    async def engine_query(self, name: str, arg: Any = None) -> list[Any]: ...


class IdleSleep:
    """The idle timer and the wake on request; inert without ``sleep_idle_ttl``."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.ttl = server.config.sleep_idle_ttl
        self._busy = 0  # inference requests in flight (the timer runs only at 0)
        self._timer: asyncio.TimerHandle | None = None
        self._asleep = False  # asleep by the idle timer (a manual sleep is not ours)
        self._woken = asyncio.Event()
        self._waking: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Arm the timer once the server serves."""
        self._arm()

    def _arm(self) -> None:
        if self.ttl is None:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(self.ttl, self._fall_asleep)

    def _fall_asleep(self) -> None:
        self._timer = None
        if self._busy or self._asleep or self.server.faults.get(Fault.SLEEP) is not None:
            return
        level = self.server.config.sleep_idle_level
        self.server.set_fault(FaultSpec.build(Fault.SLEEP.value, {"level": level, "pause": "keep"}))
        self._asleep = True
        self._woken.clear()

    @contextlib.asynccontextmanager
    async def request(self) -> AsyncIterator[None]:
        """One inference request: it holds the engine awake, and wakes it first if asleep."""
        if self.ttl is None:
            yield
            return
        self._busy += 1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        try:
            if self._asleep:
                await self._wait_for_wake()
            yield
        finally:
            self._busy -= 1
            if self._busy == 0:
                self._arm()

    async def _wait_for_wake(self) -> None:
        if self._waking is None:
            self._waking = asyncio.get_running_loop().create_task(self._wake())
        await self._woken.wait()

    async def _wake(self) -> None:
        # The engine is busy waking (weights back on the device); the broken twin's
        # wake never returns, and the engine's loop answers nothing meanwhile.
        hung = self.server.faults.get(Fault.WAKE_HANG) is not None
        try:
            await self.server.engine_query(
                "rpc", WAKE_HUNG_S if hung else self.server.config.wake_seconds
            )
            if self.server.faults.get(Fault.SLEEP) is not None:
                self.server.clear_fault(Fault.SLEEP)
            self._asleep = False
            self._woken.set()
        finally:
            self._waking = None
