"""The pool's restart budget over the wire: the real Kubernetes client against a fake API server.

First the Lease adapter alone (schema-valid writes, 409 on a stale
resourceVersion, 404, 403 and an outage meaning "alone"); then four sidecars
of one pool, each guarding a simulator whose engine hangs silently, sharing
one restart slot: at every poll at most one liveness fails, each held pod is
unready naming the budget with an Event posted, and when the restarted
server comes back (its simulator healed) its slot expires a scaled window
later and the next pod takes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sentinel.config.loader import load_settings
from sentinel.daemon import Daemon
from sentinel.fleet.budget import LeaseConflict, LeaseMissing, Mode, Wish, take_slot
from sentinel.fleet.lease import LeaseSlots, PoolBudget
from sentinel.telemetry.events import EventReporter, PodIdentity, host_connect
from sentinel_sim.launch import SimProcess
from tests.k8s_fake_api import FakeApiServer, fake_api_server
from tests.loopback.sidecar import FAST, eventually

pytestmark = pytest.mark.timeout(180)

NAMESPACE = "inference"
POOL = "llama"
SLOTS = ("llama-restart-0",)
# The shipped 300 s, scaled: a restart counts this long after its last renewal. It
# must outlast sentinel's own stalls on a loaded box (seconds, with four sidecars
# in one process), or a holder's claim lapses while its liveness still fails.
WINDOW = 6.0
NOW = 1_800_000_000.0


def slots(api: FakeApiServer) -> LeaseSlots:
    return LeaseSlots(host_connect(api.base_url), NAMESPACE, request_timeout=2.0)


async def test_taking_a_slot_writes_a_schema_valid_lease_with_the_version_read() -> None:
    async with fake_api_server(NAMESPACE, SLOTS) as api:
        leases = slots(api)
        try:
            before = await asyncio.to_thread(leases.read, SLOTS[0])
            attempt = await asyncio.to_thread(take_slot, leases, SLOTS, "vllm-a", lambda: NOW, 2.5)
        finally:
            leases.close()
    assert attempt.lease is not None
    assert api.invalid == []
    body = api.writes[0]
    assert body["metadata"]["resourceVersion"] == before.version
    assert body["metadata"]["labels"] == {"app.kubernetes.io/name": "sentinel"}  # kept
    spec = body["spec"]
    assert spec["holderIdentity"] == "vllm-a"
    assert spec["leaseDurationSeconds"] == 3
    assert spec["renewTime"].startswith("2027-01-15T08:00:00")
    assert api.holders() == {SLOTS[0]: "vllm-a"}
    assert attempt.lease.version != before.version
    assert attempt.lease.renewed == NOW


async def test_a_stale_version_is_a_conflict_and_an_unknown_name_missing() -> None:
    async with fake_api_server(NAMESPACE, SLOTS) as api:
        leases = slots(api)
        try:
            stale = await asyncio.to_thread(leases.read, SLOTS[0])
            first = await asyncio.to_thread(take_slot, leases, SLOTS, "vllm-b", lambda: NOW, 2.0)
            assert first.lease is not None
            with pytest.raises(LeaseConflict):
                await asyncio.to_thread(leases.write, stale)
            with pytest.raises(LeaseMissing):
                await asyncio.to_thread(leases.read, "llama-restart-9")
            held = await asyncio.to_thread(take_slot, leases, SLOTS, "vllm-a", lambda: NOW, 2.0)
        finally:
            leases.close()
    assert api.conflicts == 1
    assert held.lease is None
    assert [lease.holder for lease in held.held] == ["vllm-b"]


@pytest.mark.parametrize(("refusal", "says"), [("forbidden", "403"), ("down", "503")])
async def test_rbac_refused_or_api_down_means_acting_alone(refusal: str, says: str) -> None:
    async with fake_api_server(NAMESPACE, SLOTS) as api:
        setattr(api, refusal, True)
        pod = PodIdentity("vllm-a", NAMESPACE)
        config = load_settings(env={}, flags={"restart_budget": budget_config()}).restart_budget
        pool = PoolBudget(config, pool=POOL, pod=pod, leases=slots(api))
        try:
            pool.observe(Wish(wanted=True, failing=False, epoch=0, started=True))
            await pool.step()
        finally:
            pool.close()
    assert pool.mode is Mode.ALONE
    assert pool.gate().open
    assert says in str(pool.status()["why"])


def test_creating_a_lease_is_refused_as_rbac_would() -> None:
    async def create() -> int:
        async with fake_api_server(NAMESPACE) as api, httpx.AsyncClient() as client:
            url = f"{api.base_url}/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
            return (await client.post(url, json={"metadata": {"name": "x"}})).status_code

    assert asyncio.run(create()) == 403


# -- four sidecars, one slot -------------------------------------------------------


def budget_config() -> dict[str, Any]:
    return {
        "enabled": True,
        "pool": POOL,
        "slots": len(SLOTS),
        "window": WINDOW,
        "retry_interval": 0.25,
        "request_timeout": 2.0,
    }


@contextlib.asynccontextmanager
async def pool_sidecar(api: FakeApiServer, sim: SimProcess, name: str) -> AsyncIterator[str]:
    """A sidecar named ``name`` of pool ``llama`` guarding ``sim``; yields its HTTP URL."""
    flags = {
        **FAST,
        "target": sim.base_url,
        "diagnostics": False,
        "diagnostics_dir": Path("/nonexistent"),
        "restart_budget": budget_config(),
    }
    settings = load_settings(None, env={}, flags=flags)
    pod = PodIdentity(name, NAMESPACE)
    budget = PoolBudget(
        settings.restart_budget,
        pool=POOL,
        pod=pod,
        leases=slots(api),
        events=EventReporter.for_host(pod, api.base_url),
    )
    async with Daemon(settings, budget=budget).serving() as daemon:
        assert daemon.http is not None
        yield daemon.http.url


async def codes(client: httpx.AsyncClient, urls: dict[str, str], path: str) -> dict[str, int]:
    answers = await asyncio.gather(*(client.get(url + path) for url in urls.values()))
    return {name: answer.status_code for name, answer in zip(urls, answers, strict=True)}


async def test_four_sidecars_with_one_slot_restart_one_at_a_time() -> None:
    names = [f"vllm-{i}" for i in range(4)]
    with contextlib.ExitStack() as sims_stack:
        sims = {name: sims_stack.enter_context(SimProcess()) for name in names}
        async with contextlib.AsyncExitStack() as stack:
            api = await stack.enter_async_context(fake_api_server(NAMESPACE, SLOTS))
            urls = {
                name: await stack.enter_async_context(pool_sidecar(api, sims[name], name))
                for name in names
            }
            client = await stack.enter_async_context(httpx.AsyncClient(timeout=3.0))

            async def all_green() -> bool:
                answers = [await codes(client, urls, p) for p in ("/startupz", "/readyz", "/livez")]
                return all(code == 200 for answer in answers for code in answer.values())

            await eventually(all_green, 40, "four sidecars started and green")
            for sim in sims.values():
                await asyncio.to_thread(sim.control.set_fault, "engine_hang")
            restarted = await restart_one_at_a_time(client, urls, sims, api, needed=3)
    assert len(set(restarted)) == 3, restarted
    assert api.invalid == []


async def restart_one_at_a_time(
    client: httpx.AsyncClient,
    urls: dict[str, str],
    sims: dict[str, SimProcess],
    api: FakeApiServer,
    *,
    needed: int,
) -> list[str]:
    """Poll every liveness; heal each pod that fails it (its restart) until ``needed`` did."""
    restarted: list[str] = []
    checked_held = False
    deadline = time.monotonic() + 90
    while len(restarted) < needed:
        assert time.monotonic() < deadline, f"only {restarted} restarted"
        live = await codes(client, urls, "/livez")
        failing = [name for name, code in live.items() if code != 200]
        assert len(failing) <= 1, f"{failing} fail liveness at once"
        if failing and failing[0] not in restarted:
            red = failing[0]
            restarted.append(red)
            if not checked_held:
                await check_the_others_are_held(client, urls, red, api)
                checked_held = True
            await asyncio.to_thread(sims[red].control.clear_fault, "engine_hang")
        await asyncio.sleep(0.1)  # the polling interval, not a wait for a state
    return restarted


async def check_the_others_are_held(
    client: httpx.AsyncClient, urls: dict[str, str], holder: str, api: FakeApiServer
) -> None:
    """Every other pod: unready naming the budget and the holder, /status and an Event."""
    others = [name for name in urls if name != holder]
    seen: dict[str, Any] = {}

    async def held_everywhere() -> bool:
        for name in others:
            seen[name] = (await client.get(urls[name] + "/status")).json()["restart_budget"]
        seen["events"] = sorted(e["involvedObject"]["name"] for e in api.events)
        held = all(seen[n]["held_by_budget"] and seen[n]["held_by_others"] for n in others)
        return held and set(seen["events"]) >= set(others)

    try:
        await eventually(held_everywhere, 20, "every other pod held by the budget, with an Event")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen: {seen}") from None
    for name in others:
        ready = (await client.get(urls[name] + "/readyz")).json()
        assert ready["status"] == "fail"
        named = f"restart budget of pool {POOL} exhausted: 1 of 1 slots held by {holder}"
        assert named in ready["reason"]
        assert (await client.get(urls[name] + "/livez")).status_code == 200
    assert set(api.reasons()) == {"RestartBudgetExhausted"}
    assert len(api.events) == len(others)  # once per episode
