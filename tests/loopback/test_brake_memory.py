"""The brake's memory over the wire: the real Kubernetes client against a fake API server.

First the Lease adapter alone (a schema-valid write that keeps the Lease's
labels; 403, an outage, a missing Lease and a hostile annotation each making
the memory unavailable, said in ``/status``); then the case it exists for: a
group recreated with its sidecar (a LeaderWorkerSet's
``RecreateGroupOnPodRestart``). A sidecar whose Lease remembers two restarts
for an engine hang asks for the third and writes it before it goes; the next
sidecar, a new process beside a new server, starts with the three, and the
same hang again holds the brake with "a restart does not fix this" instead of
a fourth restart. A different cause remembered brakes by the count alone, as
without the memory: nothing names a cause no restart was asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sentinel.config.loader import load_settings
from sentinel.daemon import Daemon
from sentinel.fleet.brake import ANNOTATION, Remembered, decode, encode
from sentinel.fleet.brake_memory import BrakeLeases, BrakeMemory
from sentinel.telemetry.events import host_connect
from sentinel.verdict import VerdictState
from sentinel_sim.launch import SimProcess
from tests.k8s_fake_api import FakeApiServer, fake_api_server
from tests.loopback.sidecar import FAST, eventually

pytestmark = pytest.mark.timeout(120)

NAMESPACE = "inference"
POD = "vllm-0"  # a LeaderWorkerSet's leader: <name>-<group index>, the same after recreation
LEASE = "sentinel-brake-vllm-0"
HOUR = 3600.0


def annotate(api: FakeApiServer, value: str) -> None:
    api.leases[LEASE]["metadata"]["annotations"] = {ANNOTATION: value}


def remembered(api: FakeApiServer) -> Remembered:
    annotations = api.leases[LEASE]["metadata"].get("annotations") or {}
    return decode(annotations.get(ANNOTATION), time.time(), HOUR)


def brake_memory(api: FakeApiServer) -> BrakeMemory:
    leases = BrakeLeases(host_connect(api.base_url), NAMESPACE, request_timeout=2.0)
    return BrakeMemory(window=HOUR, pod=POD, leases=leases)


# -- the adapter ------------------------------------------------------------------


async def test_the_memory_is_written_schema_valid_with_the_lease_labels_kept() -> None:
    async with fake_api_server(NAMESPACE, [LEASE]) as api:
        brake = brake_memory(api)
        try:
            state = await brake.seed(VerdictState(), 100.0)
            brake.observe(VerdictState(epoch=1, restarts=(40.0,), causes=("engine",)), 100.0)
            await brake.step()
        finally:
            brake.close()
    assert state == VerdictState()  # nothing remembered yet
    assert api.invalid == []
    body = api.writes[-1]
    assert body["metadata"]["labels"] == {"app.kubernetes.io/name": "sentinel"}
    assert body["spec"]["holderIdentity"] == POD
    assert [cause for _, cause in remembered(api).restarts] == ["engine"]
    assert brake.status(brake.section(0.0), 0.0) is not None


@pytest.mark.parametrize(
    ("refusal", "says"),
    [
        ("forbidden", "403"),
        ("down", "503"),
        ("missing", f"no Lease {LEASE}"),
        ("hostile", "malformed"),
    ],
)
async def test_an_unusable_lease_is_said_and_nothing_is_written(refusal: str, says: str) -> None:
    async with fake_api_server(NAMESPACE, [] if refusal == "missing" else [LEASE]) as api:
        if refusal == "hostile":
            annotate(api, json.dumps({"v": 1, "restarts": [{"at": "\x00", "cause": "engine"}]}))
        elif refusal != "missing":
            setattr(api, refusal, True)
        brake = brake_memory(api)
        try:
            assert await brake.seed(VerdictState(), 0.0) == VerdictState()
            brake.observe(VerdictState(epoch=1, restarts=(1.0,), causes=("engine",)), 2.0)
            api.forbidden = api.down = False
            await brake.step()
        finally:
            brake.close()
    shown = brake.status(brake.section(0.0), 0.0)
    assert shown is not None
    assert shown["state"] == "unavailable"
    assert says in str(shown["why"])
    assert api.writes == []


# -- a recreated group ---------------------------------------------------------------


@contextlib.asynccontextmanager
async def sidecar(api: FakeApiServer, sim: SimProcess) -> AsyncIterator[tuple[str, Daemon]]:
    """The leader's sidecar guarding ``sim``, its memory in the fake's Lease; yields its URL."""
    flags = {
        **FAST,
        "target": sim.base_url,
        "diagnostics": False,
        "diagnostics_dir": Path("/nonexistent"),
    }
    settings = load_settings(None, env={}, flags=flags)
    async with Daemon(settings, brake=brake_memory(api)).serving() as daemon:
        assert daemon.http is not None
        yield daemon.http.url, daemon


async def answers(client: httpx.AsyncClient, url: str) -> dict[str, Any]:
    got = {p: await client.get(url + p) for p in ("/startupz", "/readyz", "/livez")}
    return {p: (r.status_code, r.json().get("reason", "")) for p, r in got.items()}


async def green(client: httpx.AsyncClient, url: str) -> bool:
    return all(code == 200 for code, _ in (await answers(client, url)).values())


async def test_a_recreated_group_keeps_the_brake_and_a_repeat_hang_is_escalated() -> None:
    now = time.time()
    earlier = Remembered(((now - 900.0, "engine"), (now - 450.0, "engine")))
    async with (
        fake_api_server(NAMESPACE, [LEASE]) as api,
        httpx.AsyncClient(timeout=3.0) as client,
    ):
        annotate(api, encode(earlier))
        # The group's second life of three: its hang asks for the third restart.
        with SimProcess() as sim:
            async with sidecar(api, sim) as (url, _):
                await eventually(lambda: green(client, url), 30, "the first sidecar green")
                await asyncio.to_thread(sim.control.set_fault, "engine_hang")

                async def written() -> bool:
                    return len(remembered(api).restarts) == 3

                await eventually(written, 20, "the asked-for restart written to the Lease")
                assert (await client.get(url + "/livez")).status_code == 503
        assert [cause for _, cause in remembered(api).restarts] == ["engine"] * 3
        # Recreated: a new server and a new sidecar process, the same pod name.
        with SimProcess() as sim:
            async with sidecar(api, sim) as (url, daemon):
                await eventually(lambda: green(client, url), 30, "the recreated group green")
                status = (await client.get(url + "/status")).json()
                memory = status["sections"]["brake_memory"]
                assert memory["state"] == "kept", memory
                assert len(memory["recalled_restarts"]) == 3
                assert len(daemon.evaluator.verdict_state.restarts) == 3
                await asyncio.to_thread(sim.control.set_fault, "engine_hang")

                async def escalated() -> bool:
                    return "does not fix" in (await answers(client, url))["/readyz"][1]

                await eventually(escalated, 20, "the brake holding: a restart does not fix this")
                seen = await answers(client, url)

                async def kept() -> bool:  # the escalation is kept too, off the verdict
                    return remembered(api).ineffective == "engine"

                await eventually(kept, 5, "the escalation written to the Lease")
    assert seen["/livez"][0] == 200  # no fourth restart
    assert seen["/readyz"][0] == 503
    reason = seen["/readyz"][1]
    assert "restart-loop brake engaged" in reason
    assert "a restart does not fix this: engine came back after each of the last 3" in reason
    assert len(remembered(api).restarts) == 3  # the held restart is none
    assert api.invalid == []


async def test_a_different_cause_remembered_brakes_by_the_count_alone() -> None:
    now = time.time()
    others = Remembered(tuple((now - 300.0 * i, "dead rank 1") for i in (3, 2, 1)))
    async with (
        fake_api_server(NAMESPACE, [LEASE]) as api,
        httpx.AsyncClient(timeout=3.0) as client,
    ):
        annotate(api, encode(others))
        with SimProcess() as sim:
            async with sidecar(api, sim) as (url, _):
                await eventually(lambda: green(client, url), 30, "the recreated sidecar green")
                await asyncio.to_thread(sim.control.set_fault, "engine_hang")

                async def braked() -> bool:
                    return "brake engaged" in (await answers(client, url))["/readyz"][1]

                await eventually(braked, 20, "the brake holding by its count")
                seen = await answers(client, url)
    assert seen["/livez"][0] == 200
    assert "does not fix" not in seen["/readyz"][1]  # the cause count starts again
    assert remembered(api).ineffective == ""
