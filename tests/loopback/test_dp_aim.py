"""Canaries aimed at each data-parallel engine (simulator, real sockets).

The simulator balances like vLLM: a new request goes to the least-loaded
engine, and a request stays counted on its engine until that engine reports
it finished or aborted, which a hung engine never does. So once a real
request is stuck on a hung engine, no unaimed request reaches it again, and
only canaries aimed at it (``X-data-parallel-rank``) can see it hang.

- The simulator itself: the header pins, a bad one is ignored, an engine
  that does not exist is a 400, and a hung engine holding a stuck request
  gets no new unaimed requests until it recovers.
- One engine hung with real requests stuck in it: a *partial* hang naming
  that engine (``/status``, the hang's reason, which is the Event's message,
  and the diagnostics bundle), never a whole-engine hang.
- One engine whose decode is stuck while it still prefills new arrivals
  (``prefill_no_decode`` on that engine, with clients pinned to it arriving
  and giving up): its prompt counters keep moving, yet it is a *partial* hang
  naming it, since only decode progress vouches for an engine.
- The opposite shape: one engine busy decoding slowly (scaled from 2 s per
  token in the shipped 15 s window) while the other idles: never reported.

Timings are the loopback ones (hang window 4 s for the shipped 15 s). Each
test prints what it measured (run with ``-s``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sentinel.canary.spec import CanaryKind
from sentinel_sim.launch import SimProcess
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar

pytestmark = pytest.mark.timeout(180)

RED_WITHIN = 30.0  # the bar
GREEN_WITHIN = 30.0
BUNDLE_WITHIN = 30.0
# Text and structured canaries (the multimodal one adds nothing here and costs CPU).
CANARIES: dict[str, Any] = {
    "canaries": {
        "text": {"interval": 1.0, "deadline": 2.0, "jitter": 0.0},
        "structured": {"interval": 1.0, "deadline": 2.0},
        "multimodal": {"enabled": False},
    }
}
RANK = "X-data-parallel-rank"
SLOW_TOKEN_S = 0.5  # 2 s per token in the shipped 15 s window, scaled to the 4 s one
QUIET_FOR = 16.0  # four hang windows of slow decode beside an idle engine


@pytest.fixture
def dp_sim() -> Iterator[SimProcess]:
    sim = SimProcess(data_parallel_size=2)
    sim.start()
    pids = [sim.api_pid, *sim.engine_pids]
    try:
        yield sim
    finally:
        sim.stop()
        left = [pid for pid in pids if psutil.pid_exists(pid) and _alive(pid)]
        assert left == [], f"simulator processes left running: {left}"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@contextlib.asynccontextmanager
async def _client(sim: SimProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=sim.base_url, timeout=10.0) as client:
        yield client


async def _tokens(
    client: httpx.AsyncClient, name: str = "vllm:generation_tokens_total"
) -> dict[str, float]:
    """A counter (``vllm:generation_tokens_total`` unless named) per ``engine`` label."""
    text = (await client.get("/metrics")).text
    tokens: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                engine = sample.labels.get("engine", "")
                tokens[engine] = tokens.get(engine, 0.0) + sample.value
    return tokens


def _body(max_tokens: int = 4, *, stream: bool = False) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": max_tokens,
        "stream": stream,
    }


async def _chat(
    client: httpx.AsyncClient, engine: str | None = None, *, within: float = 10.0
) -> httpx.Response:
    headers = {} if engine is None else {RANK: engine}
    return await client.post("/v1/chat/completions", json=_body(), headers=headers, timeout=within)


async def _moved(client: httpx.AsyncClient, before: dict[str, float]) -> dict[str, float]:
    """Generated tokens per engine since ``before``."""
    after = await _tokens(client)
    return {engine: after[engine] - before.get(engine, 0.0) for engine in after}


async def test_the_simulator_balances_like_vllm_and_honours_the_rank_header(
    dp_sim: SimProcess,
) -> None:
    async with _client(dp_sim) as client:
        before = await _tokens(client)
        assert (await _chat(client, "1")).status_code == 200
        moved = await _moved(client, before)
        assert moved["1"] > 0, moved
        assert moved["0"] == 0, moved

        refused = await _chat(client, "2")
        assert refused.status_code == 400
        assert "data_parallel_rank 2 is out of range [0, 2)" in refused.json()["error"]["message"]
        assert (await _chat(client, "one")).status_code == 200  # not an integer: ignored

        # Engine 1 hangs with a client's request stuck in it (the client gives up).
        dp_sim.control.set_fault("engine_hang", engine=1)
        with pytest.raises(httpx.TimeoutException):
            await _chat(client, "1", within=0.5)
        before = await _tokens(client)
        answered = [(await _chat(client)).status_code for _ in range(6)]
        assert answered == [200] * 6, "unaimed requests must all go to the working engine"
        moved = await _moved(client, before)
        assert moved["1"] == 0, moved
        assert moved["0"] > 0, moved

        # Recovered, it reports the abort and takes its share again.
        dp_sim.control.clear_fault("engine_hang")
        before = await _tokens(client)

        async def shared() -> bool:
            await _chat(client)
            return (await _moved(client, before)).get("1", 0.0) > 0

        await eventually(shared, 10.0, "unaimed requests reach engine 1 again")


async def _bundle_naming(sidecar: Sidecar, engine: int) -> dict[str, Any]:
    """The newest bundle whose ``stuck`` names ``engine``."""
    found: dict[str, Any] = {}

    async def written() -> bool:
        for record in (await sidecar.json("/status"))["incidents"]["recent"]:
            bundle = json.loads((Path(record["path"]) / "bundle.json").read_text())
            if engine in (bundle.get("stuck") or {}).get("engines", []):
                found.update(bundle)
                return True
        return False

    await eventually(written, BUNDLE_WITHIN, f"a bundle naming engine {engine} stuck", 0.5)
    return found


async def test_one_hung_engine_with_stuck_requests_is_a_partial_hang_naming_it(
    dp_sim: SimProcess, tmp_path: Path
) -> None:
    async with running_sidecar(dp_sim.base_url, diagnostics_dir=tmp_path, **CANARIES) as sidecar:
        await eventually(sidecar.green, GREEN_WITHIN, "startup, readiness and liveness 200")
        # Real requests stuck on engine 1: vLLM's balancer sends it nothing new.
        dp_sim.control.set_fault("stuck_running", engine=1, requests=2)
        started = time.monotonic()
        kinds_seen: dict[str, str] = {}

        async def red() -> bool:
            status = await sidecar.json("/status")
            kinds_seen.update((h["kind"], h["reason"]) for h in status["verdict"]["hangs"])
            return await sidecar.code("/livez") == 503

        await eventually(red, RED_WITHIN, "liveness red after engine 1 hung", 0.2)
        seconds = time.monotonic() - started
        status = await sidecar.json("/status")
        kinds_seen.update((h["kind"], h["reason"]) for h in status["verdict"]["hangs"])
        hang = next(h for h in status["verdict"]["hangs"] if h["kind"] == "partial")
        assert (hang["engine"], hang["engines"]) == (1, [1]), hang
        assert "engine 1 made no progress" in hang["reason"]  # the Event's message
        assert set(kinds_seen) == {"partial"}, kinds_seen
        # Canaries went to both engines; the ones aimed at engine 1 went unanswered.
        results = list(sidecar.daemon.ledger.records[CanaryKind.TEXT].results)
        assert {r.engine for r in results} >= {0, 1}, [r.engine for r in results]
        assert any(r.engine == 1 and not r.ok for r in results)
        assert all(r.ok for r in results if r.engine == 0 and r.started > started + 1.0)
        bundle = await _bundle_naming(sidecar, 1)
        assert bundle["stuck"]["engines"] == [1], bundle["stuck"]
        dp_sim.control.clear_fault("stuck_running")
        await eventually(sidecar.green, GREEN_WITHIN, "green again after the hang cleared")
    print(f"\nDP=2 simulator, engine 1 hung with stuck requests: partial hang in {seconds:.1f} s")


async def _arrivals(client: httpx.AsyncClient, engine: str, stop: asyncio.Event) -> int:
    """Clients pinned to ``engine``, one after another, each giving up after 0.5 s; how many."""
    sent = 0
    while not stop.is_set():
        with contextlib.suppress(httpx.TimeoutException):
            await _chat(client, engine, within=0.5)
        sent += 1
    return sent


PROMPTS = "vllm:prompt_tokens_total"


async def test_an_engine_prefilling_arrivals_without_decode_is_a_partial_hang_naming_it(
    dp_sim: SimProcess,
) -> None:
    async with running_sidecar(dp_sim.base_url, **CANARIES) as sidecar, _client(dp_sim) as client:
        await eventually(sidecar.green, GREEN_WITHIN, "startup, readiness and liveness 200")
        dp_sim.control.set_fault("prefill_no_decode", engine=1)
        prompts, tokens = await _tokens(client, PROMPTS), await _tokens(client)
        stop = asyncio.Event()
        arrivals = asyncio.create_task(_arrivals(client, "1", stop))
        started = time.monotonic()
        kinds_seen: dict[str, str] = {}

        async def red() -> bool:
            status = await sidecar.json("/status")
            kinds_seen.update((h["kind"], h["reason"]) for h in status["verdict"]["hangs"])
            return await sidecar.code("/livez") == 503

        try:
            await eventually(red, RED_WITHIN, "liveness red after engine 1's decode stuck", 0.2)
            seconds = time.monotonic() - started
            status = await sidecar.json("/status")
            # The hang may be confirmed between a poll's /status and its /livez.
            kinds_seen.update((h["kind"], h["reason"]) for h in status["verdict"]["hangs"])
        finally:
            stop.set()
            sent = await arrivals
        # The shape: engine 1 kept prefilling what arrived, and decoded nothing.
        prefilled = (await _tokens(client, PROMPTS))["1"] - prompts["1"]
        assert prefilled > 0
        assert (await _moved(client, tokens))["1"] == 0
        hang = next(h for h in status["verdict"]["hangs"] if h["kind"] == "partial")
        assert (hang["engine"], hang["engines"]) == (1, [1]), hang
        assert set(kinds_seen) == {"partial"}, kinds_seen
        engines = status["evidence"]["progress"]["engines"]
        assert engines["1"]["decode_evidence"] is True, engines
        dp_sim.control.clear_fault("prefill_no_decode")
        await eventually(sidecar.green, GREEN_WITHIN, "green again after the fault cleared")
    print(
        f"\nDP=2 simulator, engine 1 prefilling {sent} arrivals ({prefilled:.0f} prompt tokens) "
        f"without decode: partial hang in {seconds:.1f} s"
    )


async def _slow_traffic(client: httpx.AsyncClient, stop: asyncio.Event) -> int:
    """Streams pinned to engine 0, one after another, until ``stop``; how many finished."""
    finished = 0
    while not stop.is_set():
        async with client.stream(
            "POST",
            "/v1/chat/completions",
            json=_body(12, stream=True),
            headers={RANK: "0"},
            timeout=30.0,
        ) as response:
            async for _ in response.aiter_lines():
                if stop.is_set():
                    break
            else:
                finished += 1
    return finished


async def test_a_slow_busy_engine_beside_an_idle_one_is_never_reported(
    dp_sim: SimProcess,
) -> None:
    async with running_sidecar(dp_sim.base_url, **CANARIES) as sidecar, _client(dp_sim) as client:
        await eventually(sidecar.green, GREEN_WITHIN, "startup, readiness and liveness 200")
        dp_sim.control.set_fault("slow_decode", engine=0, token_s=SLOW_TOKEN_S)
        before = await _tokens(client)
        stop = asyncio.Event()
        streams = [asyncio.create_task(_slow_traffic(client, stop)) for _ in range(2)]
        started = time.monotonic()
        hangs: list[Any] = []
        try:
            while time.monotonic() - started < QUIET_FOR:
                status = await sidecar.json("/status")
                hangs += status["verdict"]["hangs"]
                assert await sidecar.code("/livez") == 200, status["verdict"]
                await asyncio.sleep(0.25)
        finally:
            stop.set()
            finished = sum(await asyncio.gather(*streams))
            dp_sim.control.clear_fault("slow_decode")
        assert hangs == [], hangs
        moved = await _moved(client, before)
        assert moved["0"] > 0, f"engine 0 must keep decoding, slowly: {moved}"
        results = list(sidecar.daemon.ledger.records[CanaryKind.TEXT].results)
        late = [r for r in results if r.started > started + 1.0]
        assert any(r.engine == 1 and r.ok for r in late), [(r.engine, r.reason) for r in late]
    print(
        f"\nDP=2 simulator, engine 0 at {SLOW_TOKEN_S} s/token beside an idle engine 1: "
        f"no hang in {QUIET_FOR:.0f} s ({finished} slow streams finished, "
        f"{sum(1 for r in late if r.engine == 0)} text canaries or controls aimed at "
        f"engine 0, {sum(1 for r in late if r.engine == 1)} at engine 1)"
    )
