"""Legitimate stalls against the simulator: 90 s of stall, not one liveness failure.

Each working-server state of docs/design.md ("Work is more than tokens",
"Lifecycle states are not hangs", "A long engine step", "Late answers") is
held for :data:`STALL` seconds beside its own sentinel, all at once (one
simulator each, so the suite pays for the stall once), while ``/livez`` is
polled; then the same clothes on a hung server must turn red. The windows
are the loopback ones (hang window 4 s), far shorter than shipped, so a
stall that survives them survives the shipped ones; where a case needs the
shipped canary deadlines (a queue of real image or saturating load), it
says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from chaos.load import LoadConfig, run_load
from sentinel_sim.launch import SimProcess
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar

pytestmark = pytest.mark.timeout(420)

STALL = 90.0
GREEN_WITHIN = 45.0
RED_WITHIN = 25.0  # 45 s at the shipped 15 s window, scaled like tests/loopback/test_hang_shapes.py

# The shipped canary deadlines and windows, for cases whose canaries queue
# behind real load (a scaled 2 s deadline would be the test's own arithmetic).
SHIPPED: dict[str, Any] = {
    "scrape_interval": 2.0,
    "hang_window": 15.0,
    "no_evidence_window": 30.0,
    "canaries": {
        "text": {"interval": 5.0, "deadline": 8.0},
        "structured": {"interval": 10.0, "deadline": 10.0},
        "multimodal": {"interval": 10.0, "deadline": 10.0},
    },
}

Action = Callable[[SimProcess, httpx.AsyncClient], Awaitable[None]]


async def _nothing(sim: SimProcess, client: httpx.AsyncClient) -> None:
    return None


def _fault(name: str, **params: Any) -> Action:
    async def act(sim: SimProcess, client: httpx.AsyncClient) -> None:
        await asyncio.to_thread(sim.control.set_fault, name, **params)

    return act


def _clear(name: str) -> Action:
    async def act(sim: SimProcess, client: httpx.AsyncClient) -> None:
        await asyncio.to_thread(sim.control.clear_fault, name)

    return act


def _post(path: str) -> Action:
    async def act(sim: SimProcess, client: httpx.AsyncClient) -> None:
        response = await client.post(sim.base_url + path)
        assert response.status_code == 200, f"POST {path}: {response.status_code}"

    return act


@dataclass
class Case:
    name: str
    enter: Action
    leave: Action = _nothing
    sim: dict[str, Any] = field(default_factory=dict)
    sidecar: dict[str, Any] = field(default_factory=dict)
    load: LoadConfig | None = None
    phase: str | None = None  # the lifecycle phase /status must show during the stall


@dataclass
class Seen:
    failures: int = 0
    polls: int = 0
    phases: set[str] = field(default_factory=set)
    reasons: set[str] = field(default_factory=set)


@contextlib.asynccontextmanager
async def _served(case: Case) -> AsyncIterator[tuple[SimProcess, Sidecar]]:
    async with (
        SimProcess(**case.sim) as sim,
        running_sidecar(sim.base_url, **case.sidecar) as sidecar,
    ):
        yield sim, sidecar


async def _load_until(stop: asyncio.Event, config: LoadConfig) -> None:
    while not stop.is_set():
        await run_load(config)


async def _hold(case: Case) -> Seen:
    """Green first, then the stall for STALL seconds while /livez is polled."""
    seen = Seen()
    async with _served(case) as (sim, sidecar), httpx.AsyncClient(timeout=10.0) as client:
        await eventually(sidecar.green, GREEN_WITHIN, f"{case.name}: green before the stall")
        stop = asyncio.Event()
        load = None
        if case.load is not None:
            config = dataclasses.replace(case.load, target=sim.base_url)
            load = asyncio.create_task(_load_until(stop, config))
        try:
            await case.enter(sim, client)
            end = time.monotonic() + STALL
            while time.monotonic() < end:
                seen.polls += 1
                if await sidecar.code("/livez") != 200:
                    seen.failures += 1
                status = await sidecar.json("/status")
                seen.phases.add(str(status["lifecycle"]["phase"]))
                seen.reasons.update(str(h["reason"]) for h in status["verdict"]["hangs"])
                await asyncio.sleep(0.5)  # the polling interval, not a wait for a state
            await case.leave(sim, client)
        finally:
            stop.set()
            if load is not None:
                load.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await load
    return seen


GREEN = [
    Case(
        "long-prefill",
        # 200k tokens at 2,000 tokens/s in chunks of 2,048 (one step a second):
        # 100 s of prefill, every waiting request (the priority canary too)
        # behind it, no counter moving.
        _fault("long_prefill", tokens=200_000, prefill_tps=2000),
        _clear("long_prefill"),
        sim={
            "kv_cache_tokens": 262_144,
            "scheduling_policy": "priority",
            "max_num_batched_tokens": 2048,
        },
    ),
    Case(
        "sleep", _post("/sleep?level=1"), _post("/wake_up"), sim={"dev_mode": True}, phase="asleep"
    ),
    Case(
        "pause-keep",
        _post("/pause?mode=keep"),
        _post("/resume"),
        sim={"dev_mode": True},
        phase="paused",
    ),
    Case("weight-update", _fault("weight_update"), _clear("weight_update"), phase="paused"),
    Case(
        "compile-step",
        _fault("compile_step", seconds=STALL, compiler="ptxas"),
        _clear("compile_step"),
    ),
    Case(
        "slow-image",
        # real image requests preprocessed one at a time, 3 s each: a multimodal
        # canary waits its turn behind them while they complete
        _fault("slow_image", seconds=3.0),
        _clear("slow_image"),
        sidecar=SHIPPED,
        load=LoadConfig(target="", concurrency=3, duration=30.0, mix={"multimodal": 1.0}),
    ),
    Case(
        "metrics-401-saturated-fcfs",
        # no progress evidence at all while FCFS canaries queue behind 32 streams:
        # the late answers are the only evidence of life
        _fault("metrics_401"),
        _clear("metrics_401"),
        sim={"scheduling_policy": "fcfs", "max_num_seqs": 4, "decode_tps": 20.0},
        sidecar=SHIPPED,
        load=LoadConfig(target="", concurrency=16, duration=30.0, max_tokens=24),
    ),
    Case("reasoning-parser", _nothing, sim={"reasoning_parser": "deepseek_r1"}),
]


async def test_every_legitimate_stall_holds_90s_without_a_liveness_failure() -> None:
    seen = await asyncio.gather(*(_hold(case) for case in GREEN))
    report = {case.name: s for case, s in zip(GREEN, seen, strict=True)}
    for name, s in report.items():
        print(f"{name}: {s.failures} liveness failures in {s.polls} polls; phases {s.phases}")
    assert {name: s.failures for name, s in report.items()} == dict.fromkeys(report, 0), {
        name: sorted(s.reasons) for name, s in report.items() if s.failures
    }
    for case in GREEN:
        if case.phase is not None:
            assert case.phase in report[case.name].phases, case.name
    assert all(s.polls > STALL / 2 for s in report.values())


# -- the same clothes on a hung server -------------------------------------------


async def _red(case: Case, then: Action) -> tuple[float, list[str]]:
    """Enter the legitimate state, then hang it: /livez must turn red within RED_WITHIN."""
    async with _served(case) as (sim, sidecar), httpx.AsyncClient(timeout=10.0) as client:
        await eventually(sidecar.green, GREEN_WITHIN, f"{case.name}: green first")
        await case.enter(sim, client)
        await case.leave(sim, client)
        await then(sim, client)

        async def red() -> bool:
            return await sidecar.code("/livez") == 503

        took = await eventually(red, RED_WITHIN, f"{case.name}: /livez 503")
        status = await sidecar.json("/status")
        return took, [str(h["kind"]) for h in status["verdict"]["hangs"]]


RED = [
    (
        Case(
            "hang-right-after-wake-up",
            _post("/sleep?level=1"),
            _post("/wake_up"),
            sim={"dev_mode": True},
        ),
        _fault("engine_hang"),
    ),
    (Case("spinning-engine-no-compiler", _nothing), _fault("engine_hang", spin=True)),
    (
        Case("in-process-compile-no-child", _nothing),
        _fault("compile_step", seconds=120.0, compiler="none"),
    ),
    (
        Case(
            "long-prefill-then-hung",
            _fault("long_prefill", tokens=200_000, prefill_tps=2000),
            sim={"kv_cache_tokens": 262_144},
        ),
        _fault("stuck_running", requests=1),
    ),
]


async def test_a_hung_server_in_the_same_clothes_turns_red() -> None:
    results = await asyncio.gather(*(_red(case, then) for case, then in RED))
    for (case, _), (took, kinds) in zip(RED, results, strict=True):
        print(f"{case.name}: red after {took:.1f}s, {kinds}")
        assert "engine" in kinds or "dead" in kinds, f"{case.name}: {kinds}"
