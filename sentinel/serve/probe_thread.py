"""sentinel's HTTP listener on a thread of its own, so nothing else can delay a probe.

The kubelet's verdict on the inference server is ``/livez``'s answer, and its
latency is what sentinel adds to every probe. On the daemon's event loop that
latency would include whatever the loop was doing when the probe arrived: a
``/metrics`` parse, a verdict, a log line, the assembly of a diagnostics
bundle in a worker thread that holds the GIL. Here the listener runs its own
event loop in its own thread:

- the four probe endpoints (``/livez``, ``/readyz``, ``/startupz``,
  ``/healthz``) are answered in that thread from the published
  :class:`~sentinel.evaluation.health.HealthSnapshot` (an immutable object swapped in
  one assignment) and its pre-rendered bodies, touching nothing else;
- every other route (``/status``, ``/metrics``, ``/incidents``) reads daemon
  state, which belongs to the daemon's loop, so its handler runs there
  (:func:`asyncio.run_coroutine_threadsafe`) and only the response comes back;
  ``/maintenance`` (``LISTENER_PATHS``) stays here, since its request body
  belongs to this loop, and the window it sets is safe to share across threads.

A wedged daemon loop therefore no longer silences ``/livez`` (which would
restart the inference server for sentinel's fault): its loops stop beating and
``/healthz``, sentinel's own liveness probe, turns red, which restarts
sentinel's container instead. The GIL is still shared; ``cli`` shortens the
interpreter's switch interval so that a probe waits at most about a
millisecond for it behind a busy worker thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from typing import Any

from aiohttp import web

from sentinel.serve.http import LISTENER_PATHS, PROBE_PATHS, Handler, HttpServer
from sentinel.telemetry.logging import get_logger

log = get_logger("sentinel.serve")

# A route served on the daemon's loop answers within this, or 503: a wedged loop
# must not hold the listener's connections open forever.
MAIN_LOOP_TIMEOUT_S = 10.0
THREAD_NAME = "sentinel-http"


class ThreadedHttpServer(HttpServer):
    """An :class:`HttpServer` run on its own thread and event loop (same options).

    ``start`` must be awaited on the daemon's loop: that loop is where the
    non-probe routes run. ``stop`` closes the listener (as ``HttpServer.stop``
    does, in the listener's thread) and joins the thread.
    """

    # The daemon's loop, the listener's loop and thread: set by start().
    _daemon_loop: asyncio.AbstractEventLoop | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _stopping: asyncio.Event | None = None
    _thread: threading.Thread | None = None
    _stopped: concurrent.futures.Future[None] | None = None

    def _middlewares(self) -> list[Any]:
        """The guard's, then the one that sends all but the listener's routes to the daemon."""
        return [*super()._middlewares(), self._forward_non_probes]

    async def start(self) -> None:
        """Bind and serve from the listener's thread; raise what binding raised."""
        if self._thread is not None:
            raise RuntimeError("the HTTP server is already started")
        self._daemon_loop = asyncio.get_running_loop()
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._stopped = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._serve, args=(ready, self._stopped), name=THREAD_NAME, daemon=True
        )
        self._thread.start()
        try:
            await asyncio.wrap_future(ready)
        except BaseException:
            await asyncio.to_thread(self._thread.join)
            self._thread = None
            raise

    async def stop(self) -> None:
        """Close the listener (in-flight requests get the shutdown timeout) and end the thread."""
        thread, loop, stopping, stopped = self._thread, self._loop, self._stopping, self._stopped
        if thread is None or loop is None or stopping is None or stopped is None:
            return
        with contextlib.suppress(RuntimeError):  # RuntimeError: its loop already ended
            loop.call_soon_threadsafe(stopping.set)
        await asyncio.wrap_future(stopped)
        await asyncio.to_thread(thread.join)
        self._thread = None

    # -- the listener's thread -------------------------------------------------
    def _serve(
        self, ready: concurrent.futures.Future[None], stopped: concurrent.futures.Future[None]
    ) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._run(ready))
        except BaseException as exc:  # reported to start() or logged, never lost
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.error("http_listener_failed", error=repr(exc))
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()
                stopped.set_result(None)

    async def _run(self, ready: concurrent.futures.Future[None]) -> None:
        self._stopping = asyncio.Event()
        await super().start()
        ready.set_result(None)
        try:
            await self._stopping.wait()
        finally:
            await super().stop()

    @web.middleware
    async def _forward_non_probes(
        self, request: web.Request, handler: Handler
    ) -> web.StreamResponse:
        if request.path in LISTENER_PATHS:
            return await handler(request)
        return await self._on_daemon_loop(request, handler)

    async def _on_daemon_loop(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Run a non-probe route's handler on the daemon's loop; its response comes back here."""
        daemon_loop = self._daemon_loop
        if daemon_loop is None or daemon_loop.is_closed():
            return web.Response(status=503, text="sentinel is stopping\n")
        future = asyncio.run_coroutine_threadsafe(_call(handler, request), daemon_loop)
        try:
            async with asyncio.timeout(MAIN_LOOP_TIMEOUT_S):
                return await asyncio.wrap_future(future)
        except TimeoutError:
            future.cancel()
            return web.Response(
                status=503,
                text=f"sentinel's main loop did not answer within {MAIN_LOOP_TIMEOUT_S:g} s\n",
            )


async def _call(handler: Handler, request: web.Request) -> web.StreamResponse:
    return await handler(request)


__all__ = ["MAIN_LOOP_TIMEOUT_S", "PROBE_PATHS", "ThreadedHttpServer"]
