"""The HTTP view: kubelet probe endpoints, ``/status`` and ``/metrics``.

Owns sentinel's HTTP listener. Every handler answers from
:meth:`HealthState.snapshot` (or, for ``/healthz``, the in-memory heartbeats)
and awaits nothing else, so ``/livez`` stays fast while the inference server
is hung and the kubelet's 3 s probe timeout is never what fails it.

The daemon starts and stops it through :class:`HttpServer`; other components
add routes (diagnostics adds ``/incidents``) with ``extra_routes``.

Nothing that connects may take the listener down, since the kubelet's
liveness probe of the inference server points here. :class:`ConnectionGuard`
holds the open connections under a cap set well below the process's
file-descriptor limit (so ``accept()`` never meets EMFILE in the first place),
sheds the *oldest* connection when a new one arrives at the cap (a probe is
always the newest, and sends its request at once), closes a connection that
has not sent a complete request head within a short header timeout, and idle
keep-alive connections are reaped after seconds, not aiohttp's hour. Should
EMFILE still happen, asyncio's accept loop logs it and pauses accepting for a
second; it never raises into the daemon.
"""

from __future__ import annotations

import asyncio
import resource
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from sentinel.evaluation.health import HealthState
from sentinel.fingerprint.endpoint import FINGERPRINT_PATH
from sentinel.maintenance.endpoint import (
    MAINTENANCE_KEY,
    MAINTENANCE_PATH,
    MaintenanceHook,
    maintenance_routes,
)
from sentinel.serve.answers import AnswerBodies, held
from sentinel.serve.status_view import index_json, status_json
from sentinel.telemetry.redact import redact_document

STATE_KEY = web.AppKey("sentinel_health_state", HealthState)
REGISTRY_KEY = web.AppKey("sentinel_registry", CollectorRegistry)
CLOCK_KEY: web.AppKey[Callable[[], float]] = web.AppKey("sentinel_clock")  # monotonic
STARTED_KEY = web.AppKey("sentinel_started", float)  # on it: answers before are "since start"
HOLD_KEY = web.AppKey("sentinel_probe_hold", float)  # seconds a settling "not yet" is held
DEFAULT_SHUTDOWN_TIMEOUT = 5.0
# Answered from the published snapshot alone; every other route reads daemon state.
PROBE_PATHS = frozenset({"/livez", "/readyz", "/startupz", "/healthz"})
# Served on the listener's own thread too: the probes, and /maintenance, whose
# request body belongs to the listener's event loop (serve.maintenance).
# Routes that read their request body run on the listener's own loop (the body
# belongs to it); the state they touch is thread-safe.
LISTENER_PATHS = PROBE_PATHS | {MAINTENANCE_PATH, FINGERPRINT_PATH}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """What one client may hold of sentinel's HTTP listener.

    The kubelet opens a fresh connection per probe and Prometheus keeps one
    per scrape target, so a few dozen connections is normal; ``max_connections``
    leaves two orders of magnitude above that. ``keepalive_timeout`` is shorter
    than any scrape interval worth keeping a connection for, and
    ``header_timeout`` is generous for a request head of a few hundred bytes.
    """

    max_connections: int = 256
    keepalive_timeout: float = 15.0
    header_timeout: float = 5.0
    backlog: int = 128

    def effective_cap(self) -> int:
        """The cap, lowered to fit the process's file-descriptor limit.

        Besides the connections, the process needs descriptors for the
        connections asyncio accepts in one burst before any is handed over
        (``backlog``), its HTTP clients, the gRPC server, logs and diagnostics;
        a quarter of the soft limit for connections leaves the rest for them.
        """
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return self.max_connections
        return max(8, min(self.max_connections, soft // 4))


class ConnectionGuard:
    """The listener's protocol factory: aiohttp's handlers, capped and timed.

    Each accepted connection gets aiohttp's own request handler; the guard
    only decides which connections to close. It sheds the oldest open
    connections when a new one would exceed the cap (their clients can
    reconnect; a silent one loses nothing), and arms one timer per connection
    that closes it unless a request head arrived within ``header_timeout``.
    Keep-alive idleness after a request is aiohttp's ``keepalive_timeout``.
    """

    def __init__(self, server: web.Server, limits: ServerLimits) -> None:
        self._server = server
        self._limits = limits
        self._cap = limits.effective_cap()
        # Connections whose header timer has not fired and that sent no request head yet.
        self._waiting_for_head: set[RequestHandler] = set()
        self.shed = 0
        self.timed_out = 0

    @property
    def cap(self) -> int:
        return self._cap

    def open_connections(self) -> list[RequestHandler]:
        """Open connections, oldest first (closed ones may linger in aiohttp's list)."""
        return [h for h in self._server.connections if h.transport is not None]

    def __call__(self) -> RequestHandler:
        open_now = self.open_connections()
        excess = len(open_now) + 1 - self._cap
        for handler in open_now[: max(0, excess)]:
            handler.force_close()
            self.shed += 1
        handler = self._server()
        self._waiting_for_head.add(handler)
        loop = asyncio.get_running_loop()
        loop.call_later(self._limits.header_timeout, self._check_head, handler)
        return handler

    def _check_head(self, handler: RequestHandler) -> None:
        if handler not in self._waiting_for_head:
            return
        self._waiting_for_head.discard(handler)
        if handler.transport is not None:
            handler.force_close()
            self.timed_out += 1

    async def middleware(
        self,
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        """Marks the connection as having sent a request head before the handler runs."""
        self._waiting_for_head.discard(request.protocol)
        return await handler(request)


class _GuardedSite(web.BaseSite):
    """aiohttp's TCP site, accepting through a :class:`ConnectionGuard`."""

    def __init__(
        self, runner: web.BaseRunner, host: str, port: int, guard: ConnectionGuard, backlog: int
    ) -> None:
        super().__init__(runner, backlog=backlog)
        self._host = host
        self._port = port
        self._guard = guard

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._guard, self._host, self._port, backlog=self._backlog, reuse_address=True
        )


BODIES_KEY = web.AppKey("sentinel_answer_bodies", AnswerBodies)


async def _livez(request: web.Request) -> web.Response:
    app = request.app
    return app[BODIES_KEY].response("livez", app[STATE_KEY].snapshot().liveness)


async def _readyz(request: web.Request) -> web.Response:
    app = request.app
    answer = await held(app[STATE_KEY], lambda snapshot: snapshot.readiness, app[HOLD_KEY])
    return app[BODIES_KEY].response("readyz", answer)


async def _startupz(request: web.Request) -> web.Response:
    app = request.app
    answer = await held(app[STATE_KEY], lambda snapshot: snapshot.startup, app[HOLD_KEY])
    return app[BODIES_KEY].response("startupz", answer)


async def _healthz(request: web.Request) -> web.Response:
    app = request.app
    return app[BODIES_KEY].response("healthz", app[STATE_KEY].sidecar_health())


async def _status(request: web.Request) -> web.Response:
    # /status quotes the target URL, process titles and reasons: it passes the one redactor.
    app = request.app
    hook = app.get(MAINTENANCE_KEY)
    document = status_json(
        app[STATE_KEY].snapshot(),
        now=app[CLOCK_KEY](),
        wall_now=time.time(),
        started=app[STARTED_KEY],
        maintenance=None if hook is None else hook.status,
    )
    return web.json_response(redact_document(document))


async def _index(request: web.Request) -> web.Response:
    return web.json_response(index_json(request.app.router.routes()))


async def _metrics(request: web.Request) -> web.Response:
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    body = encoder(request.app[REGISTRY_KEY])
    # content_type carries parameters (version, charset); aiohttp wants them in the header.
    return web.Response(body=body, headers={"Content-Type": content_type})


def build_app(
    state: HealthState,
    registry: CollectorRegistry,
    *,
    extra_routes: Sequence[web.AbstractRouteDef] = (),
    middlewares: Sequence[Any] = (),
    maintenance: MaintenanceHook | None = None,
    clock: Callable[[], float] = time.monotonic,
    probe_hold: float = 0.0,
) -> web.Application:
    """The aiohttp application with sentinel's endpoints and any extra routes.

    With ``maintenance``, ``/maintenance`` is served and ``/status`` shows the window.
    ``clock`` is the one the verdict's times are on (``/status`` dates them by it).
    """
    app = web.Application(middlewares=list(middlewares))
    app[STATE_KEY] = state
    app[REGISTRY_KEY] = registry
    app[CLOCK_KEY], app[STARTED_KEY] = clock, clock()
    app[BODIES_KEY] = AnswerBodies()
    app[HOLD_KEY] = probe_hold
    app.add_routes(
        [
            web.get("/", _index),
            web.get("/livez", _livez),
            web.get("/readyz", _readyz),
            web.get("/startupz", _startupz),
            web.get("/healthz", _healthz),
            web.get("/status", _status),
            web.get("/metrics", _metrics),
        ]
    )
    if maintenance is not None:
        app[MAINTENANCE_KEY] = maintenance
        app.add_routes(maintenance_routes())
    app.add_routes(extra_routes)
    return app


class HttpServer:
    """Runs :func:`build_app` on ``host:port`` (port 0 picks a free one).

    ``start`` returns once the socket is bound; ``port`` is then the real
    port. ``stop`` closes the listener and waits at most ``shutdown_timeout``
    for in-flight requests. ``limits`` bound what clients may hold open.
    ``maintenance`` serves ``/maintenance`` (see :func:`build_app`). A subclass
    that runs it elsewhere (:class:`~sentinel.serve.probe_thread.ThreadedHttpServer`)
    adds its middlewares through :meth:`_middlewares`.
    """

    def __init__(
        self,
        state: HealthState,
        registry: CollectorRegistry,
        host: str,
        port: int,
        *,
        extra_routes: Sequence[web.AbstractRouteDef] = (),
        shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
        access_log: bool = False,
        limits: ServerLimits | None = None,
        maintenance: MaintenanceHook | None = None,
        clock: Callable[[], float] = time.monotonic,
        probe_hold: float = 0.0,
    ) -> None:
        self._limits = limits or ServerLimits()
        self._guard: ConnectionGuard | None = None
        self._app = build_app(
            state,
            registry,
            extra_routes=extra_routes,
            middlewares=self._middlewares(),
            maintenance=maintenance,
            clock=clock,
            probe_hold=probe_hold,
        )
        self._host = host
        self._port = port
        # Probe traffic (3 endpoints every few seconds) drowns real events in an
        # access log, so it is off unless asked for.
        runner_options: dict[str, Any] = {} if access_log else {"access_log": None}
        self._runner = web.AppRunner(
            self._app,
            shutdown_timeout=shutdown_timeout,
            keepalive_timeout=self._limits.keepalive_timeout,
            **runner_options,
        )
        self._bound: tuple[str, int] | None = None

    def _middlewares(self) -> list[Any]:
        """The app's middlewares, outermost first: the connection guard's bookkeeping."""
        return [self._mark_served]

    @web.middleware
    async def _mark_served(
        self,
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        if self._guard is None:
            return await handler(request)
        return await self._guard.middleware(request, handler)

    @property
    def guard(self) -> ConnectionGuard:
        if self._guard is None:
            raise RuntimeError("the HTTP server is not started")
        return self._guard

    @property
    def app(self) -> web.Application:
        return self._app

    @property
    def port(self) -> int:
        if self._bound is None:
            raise RuntimeError("the HTTP server is not started")
        return self._bound[1]

    @property
    def url(self) -> str:
        if self._bound is None:
            raise RuntimeError("the HTTP server is not started")
        host = self._bound[0]
        return (
            f"http://[{host}]:{self._bound[1]}"
            if ":" in host
            else f"http://{host}:{self._bound[1]}"
        )

    async def start(self) -> None:
        await self._runner.setup()
        server = self._runner.server
        assert server is not None, "setup() creates the server"
        self._guard = ConnectionGuard(server, self._limits)
        site = _GuardedSite(self._runner, self._host, self._port, self._guard, self._limits.backlog)
        try:
            await site.start()
        except BaseException:
            await self._runner.cleanup()
            raise
        address = self._runner.addresses[0]
        self._bound = (str(address[0]), int(address[1]))

    async def stop(self) -> None:
        await self._runner.cleanup()
        self._bound = None
