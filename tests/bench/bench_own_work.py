"""Benchmark: sentinel's own work at full length, with shipped defaults, against the simulator.

Run: ``python -m tests.bench.bench_own_work [--part idle|sleep|decode|all] [--minutes M]
[--sleep-minutes M] [--rounds N]``. Three figures of issue 39 (not part of ``make test``):

- ``idle``: no client at all for ``--minutes`` (10) on the simulator in every exposition
  it offers (``--exposition`` 0.10, 0.20, 0.32, counters), one simulator and sidecar each,
  side by side: the real progress ``/status`` ever showed (``epoch_totals``, per counter),
  whether a real completion was ever seen, and how many canaries went out meanwhile.
  Goal: zero real progress, no real traffic.
- ``sleep``: a server with ``--sleep-idle-ttl 20`` (vLLM's proposed idle auto-sleep) and
  sentinel beside it (shipped ``auto_sleep_hold``, 60 s), no client: seconds from green to
  asleep (goal: within hold + TTL, plus a scrape), then wakes in ``--sleep-minutes`` (5).
  Goal: at most one wake.
- ``decode``: ``decode_dead`` (vLLM #45094) with 0.32's exposition, each of: the canaries
  the only traffic; one-token requests (judges, scorers) completing beside it; a small
  streamed load arriving: seconds from the fault to ``/livez`` 503. Goal: within 30 s.

- ``vllm``: the ``idle`` figure against a real vLLM 0.32 CPU build (the engine tier's
  environment and tiny text model; the multimodal canary off, as the text model takes no
  image), no client for ``--minutes``.

It reports and exits 0; 1 only when something could not be measured.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from chaos.load import LoadConfig, run_load
from sentinel.boot import boot
from sentinel.config.loader import load_settings
from sentinel.daemon import Daemon
from sentinel_sim.expositions import EXPOSITIONS
from sentinel_sim.launch import SimProcess

POLL_S = 1.0
TTL = 20.0


@contextlib.asynccontextmanager
async def _pair(*sim_args: str) -> AsyncIterator[tuple[SimProcess, str, httpx.AsyncClient]]:
    """A simulator and a sentinel beside it, shipped defaults, on loopback ports."""
    with SimProcess(scheduling_policy="priority", extra_args=sim_args, dev_mode=True) as sim:
        boot()
        flags = {
            "target": sim.base_url,
            "listen": "127.0.0.1:0",
            "grpc_listen": "127.0.0.1:0",
            "diagnostics": False,
            "diagnostics_dir": Path("/nonexistent"),
        }
        settings = load_settings(None, env={}, flags=flags)
        async with Daemon(settings).serving() as daemon, httpx.AsyncClient(timeout=5) as client:
            assert daemon.http is not None
            yield sim, daemon.http.url, client


async def _until(check: Any, deadline: float) -> float | None:
    start = time.monotonic()
    while time.monotonic() - start < deadline:
        if await check():
            return time.monotonic() - start
        await asyncio.sleep(POLL_S)
    return None


async def _green(url: str, client: httpx.AsyncClient) -> bool:
    codes = [(await client.get(url + p)).status_code for p in ("/startupz", "/readyz", "/livez")]
    return codes == [200, 200, 200]


def _real(status: Any) -> dict[str, float]:
    totals = status["evidence"]["progress"]["epoch_totals"]
    return {k: float(v["progress"]) for k, v in totals.items() if float(v["progress"])}


async def _idle(form: str, minutes: float) -> dict[str, Any]:
    async with _pair("--exposition", form) as (_, url, client):
        if await _until(lambda: _green(url, client), 120) is None:
            return {"exposition": form, "error": "never green"}
        worst: dict[str, float] = {}
        completion_seen, signals = False, []
        end = time.monotonic() + minutes * 60
        while time.monotonic() < end:
            status = (await client.get(url + "/status")).json()
            for key, value in _real(status).items():
                worst[key] = max(worst.get(key, 0.0), value)
            completion_seen |= status["evidence"]["real_completion_age"] is not None
            signals = status["evidence"]["progress"]["signals"]
            await asyncio.sleep(POLL_S)
        status = (await client.get(url + "/status")).json()
        totals = status["evidence"]["progress"]["epoch_totals"]
        own = {k: v["own"] for k, v in totals.items()}
        return {
            "exposition": form,
            "minutes": minutes,
            "real_progress": worst,
            "real_completion_seen": completion_seen,
            "own_work": own,
            "signals": signals,
        }


async def _sleep(minutes: float) -> dict[str, Any]:
    async with _pair("--sleep-idle-ttl", str(TTL), "--wake-seconds", "2") as (_, url, client):
        if await _until(lambda: _green(url, client), 120) is None:
            return {"error": "never green"}

        async def phase() -> str:
            return str((await client.get(url + "/status")).json()["lifecycle"]["phase"])

        async def asleep() -> bool:
            return await phase() == "asleep"

        took = await _until(asleep, 60 + TTL + 60)
        wakes, was_asleep = 0, True
        end = time.monotonic() + minutes * 60
        while took is not None and time.monotonic() < end:
            now_asleep = await asleep()
            wakes += was_asleep and not now_asleep
            was_asleep = now_asleep
            await asyncio.sleep(POLL_S / 2)
        status = (await client.get(url + "/status")).json()
        return {
            "asleep_after_green_s": None if took is None else round(took, 1),
            "hold_plus_ttl_s": 60 + TTL,
            "watched_min": minutes,
            "wakes": wakes,
            "real_progress": _real(status),
            "auto_sleep": status["sections"].get("auto_sleep"),
        }


async def _traffic(target: str, kind: str, stop: asyncio.Event) -> None:
    one = kind == "one-token"
    config = LoadConfig(
        target=target,
        concurrency=4 if one else 2,
        duration=10.0,
        max_tokens=1 if one else 16,
        stream=not one,
    )
    while not stop.is_set():
        with contextlib.suppress(Exception):
            await run_load(config)


async def _decode(beside: str) -> dict[str, Any]:
    async with _pair() as (sim, url, client):
        if await _until(lambda: _green(url, client), 120) is None:
            return {"beside": beside, "error": "never green"}
        stop = asyncio.Event()
        load = (
            None
            if beside == "canaries"
            else asyncio.create_task(_traffic(sim.base_url, beside, stop))
        )
        try:
            await asyncio.sleep(5.0)  # the load going, sentinel still green
            green = await _green(url, client)
            sim.control.set_fault("decode_dead")

            async def red() -> bool:
                return (await client.get(url + "/livez")).status_code == 503

            took = await _until(red, 120)
            status = (await client.get(url + "/status")).json()
        finally:
            stop.set()
            if load is not None:
                load.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await load
        return {
            "beside": beside,
            "green_before": green,
            "red_after_s": None if took is None else round(took, 1),
            "hangs": [h["reason"] for h in status["verdict"]["hangs"]],
            "real_completion_age": status["evidence"]["real_completion_age"],
        }


async def _vllm(minutes: float) -> dict[str, Any]:
    """No client against a real vLLM 0.32 (CPU) for ``minutes``: what ``/status`` called real."""
    from chaos.vllm_engine import env as engine_env
    from chaos.vllm_engine.server import VllmServer

    env = await asyncio.to_thread(engine_env.ensure_env)
    model = await asyncio.to_thread(engine_env.ensure_model, env, "text")
    work = Path(tempfile.mkdtemp(prefix="sentinel-own-work-"))
    server = VllmServer(
        env.python,
        model,
        served_model_name="tiny-text",
        fault_dir=work / "faults",
        log_path=work / "vllm.log",
    )
    server.start()
    try:
        started = await asyncio.to_thread(server.wait_ready, 300.0)
        boot()
        flags = {
            "target": server.base_url,
            "listen": "127.0.0.1:0",
            "grpc_listen": "127.0.0.1:0",
            "diagnostics": False,
            "diagnostics_dir": Path("/nonexistent"),
            "canaries": {"multimodal": {"enabled": False}},
        }
        settings = load_settings(None, env={}, flags=flags)
        async with Daemon(settings).serving() as daemon, httpx.AsyncClient(timeout=5) as client:
            assert daemon.http is not None
            url = daemon.http.url
            if await _until(lambda: _green(url, client), 300) is None:
                return {"target": "vllm 0.32", "error": "never green"}
            worst: dict[str, float] = {}
            completion_seen = False
            end = time.monotonic() + minutes * 60
            while time.monotonic() < end:
                status = (await client.get(url + "/status")).json()
                for key, value in _real(status).items():
                    worst[key] = max(worst.get(key, 0.0), value)
                completion_seen |= status["evidence"]["real_completion_age"] is not None
                await asyncio.sleep(POLL_S)
            totals = status["evidence"]["progress"]["epoch_totals"]
            return {
                "target": "vllm 0.32 (CPU)",
                "server_start_s": round(started, 1),
                "minutes": minutes,
                "real_progress": worst,
                "real_completion_seen": completion_seen,
                "own_work": {k: v["own"] for k, v in totals.items()},
                "decode": status["evidence"]["progress"]["decode"],
            }
    finally:
        server.stop()


async def main(args: argparse.Namespace) -> int:
    results: dict[str, Any] = {}
    jobs = []
    if args.part in ("idle", "all"):
        jobs += [("idle", _idle(form, args.minutes)) for form in EXPOSITIONS]
    if args.part in ("sleep", "all"):
        jobs.append(("sleep", _sleep(args.sleep_minutes)))
    found = await asyncio.gather(*(job for _, job in jobs))
    for (name, _), value in zip(jobs, found, strict=True):
        results.setdefault(name, []).append(value)
    if args.part == "vllm":
        results["vllm"] = [await _vllm(args.minutes)]
    if args.part in ("decode", "all"):
        for _ in range(args.rounds):  # one at a time: a red figure is a timing
            for beside in ("canaries", "one-token", "streams"):
                results.setdefault("decode", []).append(await _decode(beside))
    print(json.dumps(results, indent=1))
    errors = [
        r for rs in results.values() for r in rs if "error" in r or r.get("red_after_s", 0) is None
    ]
    return 1 if errors else 0


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.bench_own_work")
    parser.add_argument("--part", choices=("idle", "sleep", "decode", "vllm", "all"), default="all")
    parser.add_argument(
        "--minutes", type=float, default=10.0, help="no-client watch per exposition"
    )
    parser.add_argument("--sleep-minutes", type=float, default=5.0, help="asleep watch")
    parser.add_argument("--rounds", type=int, default=1, help="decode_dead rounds per shape")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse(sys.argv[1:]))))
