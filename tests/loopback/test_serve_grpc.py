"""The gRPC health view over a real socket, with a real health client (Check and Watch)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sentinel.evaluation.health import HealthState, ProbeAnswer
from sentinel.serve.grpc import GrpcHealthServer

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
DEADLINE = 5.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def state(clock: Clock) -> HealthState:
    return HealthState(clock=clock)


@pytest.fixture
async def server(state: HealthState) -> AsyncIterator[GrpcHealthServer]:
    health = GrpcHealthServer(state, "127.0.0.1:0", tick=0.05)
    await health.start()
    publisher = asyncio.create_task(health.publish())
    try:
        yield health
    finally:
        publisher.cancel()
        with pytest.raises(asyncio.CancelledError):
            await publisher
        await health.stop(grace=0.5)


@pytest.fixture
async def stub(server: GrpcHealthServer) -> AsyncIterator[Any]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        yield health_pb2_grpc.HealthStub(channel)


async def check(stub: Any, service: str) -> Any:
    response = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=DEADLINE)
    return response.status


async def eventually(stub: Any, service: str, status: Any) -> None:
    """Poll Check until it answers ``status``, failing after the deadline."""
    loop = asyncio.get_running_loop()
    end = loop.time() + DEADLINE
    last = None
    while loop.time() < end:
        last = await check(stub, service)
        if last == status:
            return
        await asyncio.sleep(0.02)
    pytest.fail(f"service {service!r} stayed {last} instead of {status}")


async def test_initial_statuses_are_set_before_serving(stub: Any) -> None:
    assert await check(stub, "") == SERVING
    assert await check(stub, "liveness") == SERVING
    assert await check(stub, "readiness") == NOT_SERVING
    assert await check(stub, "startup") == NOT_SERVING


async def test_unknown_service_is_not_found(stub: Any) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await check(stub, "nope")
    assert info.value.code() is grpc.StatusCode.NOT_FOUND


async def test_first_answer_is_the_snapshot_not_a_default(state: HealthState) -> None:
    """A probe racing start() must never see liveness unknown or readiness SERVING."""
    await state.publish(
        replace(state.snapshot(), liveness=ProbeAnswer(False, "engine hang confirmed"))
    )
    health = GrpcHealthServer(state, "127.0.0.1:0")
    await health.start()  # no publisher task running at all
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{health.port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            assert await check(stub, "liveness") == NOT_SERVING
            assert await check(stub, "readiness") == NOT_SERVING
    finally:
        await health.stop(grace=0.5)


async def test_check_follows_published_snapshots(state: HealthState, stub: Any) -> None:
    await state.publish(
        replace(
            state.snapshot(),
            startup=ProbeAnswer(True, "every canary kind succeeded"),
            readiness=ProbeAnswer(True, "ready"),
        )
    )
    await eventually(stub, "startup", SERVING)
    await eventually(stub, "readiness", SERVING)

    await state.publish(
        replace(
            state.snapshot(),
            liveness=ProbeAnswer(False, "engine hang confirmed"),
            readiness=ProbeAnswer(False, "liveness fails"),
        )
    )
    await eventually(stub, "liveness", NOT_SERVING)
    await eventually(stub, "readiness", NOT_SERVING)
    assert await check(stub, "startup") == SERVING


async def test_watch_streams_every_service(state: HealthState, stub: Any) -> None:
    services = ("", "liveness", "readiness", "startup")
    calls = {s: stub.Watch(health_pb2.HealthCheckRequest(service=s)) for s in services}
    try:
        first = {
            s: (await asyncio.wait_for(call.read(), DEADLINE)).status for s, call in calls.items()
        }
        assert first == {
            "": SERVING,
            "liveness": SERVING,
            "readiness": NOT_SERVING,
            "startup": NOT_SERVING,
        }
        await state.publish(
            replace(
                state.snapshot(),
                liveness=ProbeAnswer(False, "engine hang confirmed"),
                startup=ProbeAnswer(True, "every canary kind succeeded"),
            )
        )
        liveness = await asyncio.wait_for(calls["liveness"].read(), DEADLINE)
        startup = await asyncio.wait_for(calls["startup"].read(), DEADLINE)
        assert liveness.status == NOT_SERVING
        assert startup.status == SERVING
    finally:
        for call in calls.values():
            call.cancel()


async def test_sidecar_service_fails_when_heartbeats_go_stale_without_a_publish(
    state: HealthState, clock: Clock, stub: Any
) -> None:
    state.beat("scheduler", max_gap=3.0)
    await eventually(stub, "", SERVING)
    clock.now += 10.0  # nothing published: only the publisher's tick can notice
    await eventually(stub, "", NOT_SERVING)
    state.beat("scheduler", max_gap=3.0)
    await eventually(stub, "", SERVING)


async def test_stop_marks_not_serving_then_closes(state: HealthState) -> None:
    health = GrpcHealthServer(state, "127.0.0.1:0")
    await health.start()
    port = health.port
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            watch = stub.Watch(health_pb2.HealthCheckRequest(service="liveness"))
            assert (await asyncio.wait_for(watch.read(), DEADLINE)).status == SERVING
            stopping = asyncio.create_task(health.stop(grace=0.5))
            assert (await asyncio.wait_for(watch.read(), DEADLINE)).status == NOT_SERVING
            await asyncio.wait_for(stopping, DEADLINE)
            watch.cancel()
    finally:
        await health.stop(grace=0.5)  # idempotent; closes the port if an assertion failed
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1.0)
        assert info.value.code() is grpc.StatusCode.UNAVAILABLE
