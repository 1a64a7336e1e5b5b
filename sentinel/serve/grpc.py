"""The gRPC view: ``grpc.health.v1.Health`` for Kubernetes gRPC probes.

Owns sentinel's gRPC listener and the publisher that keeps the health
servicer's statuses equal to the :class:`HealthState` snapshot. Services:

- ``""``: sentinel itself, SERVING while its own loops tick (the gRPC twin of
  ``/healthz``);
- ``liveness``, ``readiness``, ``startup``: mirror the snapshot's answers.

grpcio-health-checking's servicer starts with ``""`` SERVING and every other
service unknown, so :meth:`GrpcHealthServer.start` sets all four from the
current snapshot *before* the server accepts a call: a probe can never see a
default that sentinel did not decide.

The listener is optional (``grpc_listen: off``): only the gRPC-probe variant
of the manifests needs it, and a port nobody probes is only attack surface.
What a client may hold is bounded the way the HTTP listener is: a cap on
connections, a short handshake timeout (a client that connects and sends
nothing is closed), idle connections closed after seconds, and a cap on calls
in flight (``Watch`` streams included).
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

# grpc-stubs describe only the threaded servicer; the asyncio one ships as
# ``health.aio`` in grpcio-health-checking itself.
from grpc_health.v1.health import aio as health_aio  # type: ignore[attr-defined]

from sentinel.evaluation.health import HealthSnapshot, HealthState, ProbeAnswer

SIDECAR_SERVICE = ""
DEFAULT_TICK = 1.0
DEFAULT_GRACE = 2.0
MAX_CONNECTIONS = 128
MAX_CONCURRENT_RPCS = 256
# gRPC core channel arguments; unknown ones are ignored by older cores, so each is safe to pass.
SERVER_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_allowed_incoming_connections", MAX_CONNECTIONS),
    ("grpc.server_handshake_timeout_ms", 5_000),
    ("grpc.max_connection_idle_ms", 30_000),
    ("grpc.max_concurrent_streams", 16),
    ("grpc.max_receive_message_length", 4096),
)

SERVING: Any = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING: Any = health_pb2.HealthCheckResponse.NOT_SERVING


def _status(answer: ProbeAnswer) -> Any:
    return SERVING if answer.ok else NOT_SERVING


def desired_statuses(snapshot: HealthSnapshot, sidecar: ProbeAnswer) -> dict[str, Any]:
    """The serving status of every service for one snapshot and sidecar answer."""
    return {
        SIDECAR_SERVICE: _status(sidecar),
        "liveness": _status(snapshot.liveness),
        "readiness": _status(snapshot.readiness),
        "startup": _status(snapshot.startup),
    }


class GrpcHealthServer:
    """The health server on ``address`` (``host:port``; port 0 picks a free one; None: none).

    Lifecycle, for the daemon's TaskGroup: ``await start()`` (binds, sets every
    status, starts serving), run ``publish()`` as a task until cancelled, then
    ``await stop()`` (all NOT_SERVING, then a bounded grace for open calls,
    which also ends every ``Watch`` stream). Without an address every step is
    a no-op (``publish`` returns at once) and ``enabled`` is False.
    """

    def __init__(
        self,
        state: HealthState,
        address: str | None,
        *,
        tick: float = DEFAULT_TICK,
    ) -> None:
        self._state = state
        self._address = address
        self._tick = tick
        self._servicer: Any = health_aio.HealthServicer()
        self._server: grpc.aio.Server | None = None
        self._port: int | None = None
        self._published: dict[str, Any] = {}

    @property
    def enabled(self) -> bool:
        return self._address is not None

    @property
    def port(self) -> int:
        """The bound port; only while started with an address (see :attr:`enabled`)."""
        if self._port is None:
            raise RuntimeError("the gRPC server is not started")
        return self._port

    async def start(self) -> None:
        if self._address is None:
            return
        server = grpc.aio.server(
            options=SERVER_OPTIONS, maximum_concurrent_rpcs=MAX_CONCURRENT_RPCS
        )
        health_pb2_grpc.add_HealthServicer_to_server(self._servicer, server)
        port = server.add_insecure_port(self._address)
        if port == 0:
            raise OSError(f"cannot bind gRPC health server to {self._address}")
        await self._apply(self._state.snapshot())
        await server.start()
        self._server = server
        self._port = port

    async def publish(self) -> None:
        """Follow the health state until cancelled.

        Wakes on every published snapshot, and at least every ``tick`` seconds
        so ``""`` turns NOT_SERVING when heartbeats go stale with nothing
        published (a wedged writer publishes nothing).
        """
        if self._address is None:
            return
        seen = self._state.snapshot().version
        while True:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a
            # cancellation that arrives as the wait completes (a snapshot
            # published right before the daemon cancels this loop), and the
            # loop would then outlive shutdown.
            try:
                async with asyncio.timeout(self._tick):
                    snapshot = await self._state.wait_changed(seen)
            except TimeoutError:
                snapshot = self._state.snapshot()
            seen = snapshot.version
            await self._apply(snapshot)

    async def _apply(self, snapshot: HealthSnapshot) -> None:
        desired = desired_statuses(snapshot, self._state.sidecar_health())
        for service, status in desired.items():
            # Only changes are set: every set wakes all Watch streams of the service.
            if self._published.get(service) != status:
                await self._servicer.set(service, status)
                self._published[service] = status

    async def stop(self, grace: float = DEFAULT_GRACE) -> None:
        """Mark every service NOT_SERVING, then stop within ``grace`` seconds."""
        await self._servicer.enter_graceful_shutdown()
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)
        self._port = None
