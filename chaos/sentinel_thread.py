"""sentinel's daemon on an event loop of its own, in a thread of the runner's process.

The probers, the sampler and the naive canary run on the runner's loop, so a
stall inside sentinel shows as slow ``/livez`` answers (as the kubelet would
see it) and cannot delay the other baselines' probes. Canary results cross
over through the daemon's result listener, never by reading its ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable

from sentinel.canary.result import CanaryResult
from sentinel.config.settings import Settings
from sentinel.daemon import Daemon


class SentinelStartError(RuntimeError):
    """sentinel did not come up (its settings, a port, or its first steps failed)."""


class SentinelThread:
    """Runs one :class:`Daemon` until :meth:`stop`; ``on_result`` sees every canary result.

    ``on_result`` is called on sentinel's thread, so it must be thread-safe and
    quick (see :class:`chaos.records.ResultInbox`).
    """

    def __init__(
        self, settings: Settings, on_result: Callable[[CanaryResult], None] | None = None
    ) -> None:
        self.settings = settings
        self.daemon: Daemon | None = None
        self._on_result = on_result
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="sentinel", daemon=True)

    def _main(self) -> None:
        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self.daemon = Daemon(self.settings)
            if self._on_result is not None:
                self.daemon.add_result_listener(self._on_result)
            task = asyncio.create_task(self.daemon.run(self._stop))
            started = asyncio.create_task(self.daemon.started.wait())
            await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
            self._started.set()
            await task

        try:
            asyncio.run(serve())
        except BaseException as exc:
            self._error = exc
        finally:
            self._started.set()

    async def start(self, within: float = 15.0) -> Daemon:
        self._thread.start()
        if not await asyncio.to_thread(self._started.wait, within):
            raise SentinelStartError(f"sentinel did not start within {within}s")
        if self._error is not None or self.daemon is None or self.daemon.http is None:
            raise SentinelStartError(f"sentinel did not start: {self._error!r}")
        return self.daemon

    async def stop(self, within: float = 30.0) -> None:
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # its loop has already ended
                self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread.is_alive():
            await asyncio.to_thread(self._thread.join, within)
