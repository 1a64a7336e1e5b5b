"""The HTTP view: kubelet probe endpoints, ``/status`` and ``/metrics``.

Owns sentinel's HTTP listener. Every handler answers from
:meth:`HealthState.snapshot` (or, for ``/healthz``, the in-memory heartbeats)
and awaits nothing else, so ``/livez`` stays fast while the inference server
is hung and the kubelet's 3 s probe timeout is never what fails it.

The daemon starts and stops it through :class:`HttpServer`; other components
add routes (diagnostics adds ``/incidents``) with ``extra_routes``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from sentinel.health import HealthSnapshot, HealthState, ProbeAnswer

STATE_KEY = web.AppKey("sentinel_health_state", HealthState)
REGISTRY_KEY = web.AppKey("sentinel_registry", CollectorRegistry)
DEFAULT_SHUTDOWN_TIMEOUT = 5.0


def answer_json(answer: ProbeAnswer) -> dict[str, Any]:
    return {"status": "ok" if answer.ok else "fail", "reason": answer.reason, "since": answer.since}


def _answer_response(answer: ProbeAnswer) -> web.Response:
    return web.json_response(answer_json(answer), status=200 if answer.ok else 503)


def status_json(snapshot: HealthSnapshot) -> dict[str, Any]:
    """The ``/status`` document: the daemon's status mapping plus the three answers."""
    return {
        **snapshot.status,
        "liveness": answer_json(snapshot.liveness),
        "readiness": answer_json(snapshot.readiness),
        "startup": answer_json(snapshot.startup),
        "enforce": snapshot.enforce,
        "priority_effective": snapshot.priority_effective,
        "progress_at": snapshot.progress_at,
        "version": snapshot.version,
    }


async def _livez(request: web.Request) -> web.Response:
    return _answer_response(request.app[STATE_KEY].snapshot().liveness)


async def _readyz(request: web.Request) -> web.Response:
    return _answer_response(request.app[STATE_KEY].snapshot().readiness)


async def _startupz(request: web.Request) -> web.Response:
    return _answer_response(request.app[STATE_KEY].snapshot().startup)


async def _healthz(request: web.Request) -> web.Response:
    return _answer_response(request.app[STATE_KEY].sidecar_health())


async def _status(request: web.Request) -> web.Response:
    return web.json_response(status_json(request.app[STATE_KEY].snapshot()))


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
) -> web.Application:
    """The aiohttp application with sentinel's endpoints and any extra routes."""
    app = web.Application()
    app[STATE_KEY] = state
    app[REGISTRY_KEY] = registry
    app.add_routes(
        [
            web.get("/livez", _livez),
            web.get("/readyz", _readyz),
            web.get("/startupz", _startupz),
            web.get("/healthz", _healthz),
            web.get("/status", _status),
            web.get("/metrics", _metrics),
        ]
    )
    app.add_routes(extra_routes)
    return app


class HttpServer:
    """Runs :func:`build_app` on ``host:port`` (port 0 picks a free one).

    ``start`` returns once the socket is bound; ``port`` is then the real
    port. ``stop`` closes the listener and waits at most ``shutdown_timeout``
    for in-flight requests.
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
    ) -> None:
        self._app = build_app(state, registry, extra_routes=extra_routes)
        self._host = host
        self._port = port
        # Probe traffic (3 endpoints every few seconds) drowns real events in an
        # access log, so it is off unless asked for.
        runner_options: dict[str, Any] = {} if access_log else {"access_log": None}
        self._runner = web.AppRunner(self._app, shutdown_timeout=shutdown_timeout, **runner_options)
        self._bound: tuple[str, int] | None = None

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
        site = web.TCPSite(self._runner, self._host, self._port)
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
