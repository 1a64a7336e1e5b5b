"""Capacity of the simulated vLLM on this machine, with the load generator beside it.

Later benchmarks measure sentinel against the simulator; this one shows the
simulator is not their bottleneck. Two phases, each against a fresh simulator:

1. **Held connections**: 1,000 concurrent streaming requests (256 decoding at
   5 tokens/s, the rest queued, as on a saturated vLLM), held for a few
   seconds. It samples the ESTABLISHED sockets on the OpenAI port (psutil) and
   times ``/health`` meanwhile. The requests end by client timeout, i.e. aborts.
2. **Short requests**: closed loop, 64 workers, ``max_tokens`` 1, non-streaming;
   completed requests per second and latency percentiles.

Run: ``make bench-sim`` or ``python -m tests.bench.bench_sim_capacity [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import httpx
import psutil
from rich.console import Console
from rich.table import Table

from chaos.load import LoadConfig, percentiles, run_load
from sentinel_sim.launch import SimProcess

TARGET_CONNECTIONS = 1000
TARGET_RPS = 1000.0


def _established(api_pid: int, port: int) -> int:
    connections = psutil.Process(api_pid).net_connections(kind="tcp")
    return sum(
        1 for c in connections if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == port
    )


async def held_connections(connections: int, hold_s: float) -> dict[str, Any]:
    async with SimProcess(max_num_seqs=256, decode_tps=5.0) as sim:
        load = LoadConfig(
            target=sim.base_url,
            model=sim.model,
            concurrency=connections,
            max_requests=connections,
            duration=hold_s + 30,
            max_tokens=1000,
            stream=True,
            timeout=hold_s,
        )
        task = asyncio.create_task(run_load(load))
        held: list[int] = []
        health: list[float] = []
        start = time.monotonic()
        async with httpx.AsyncClient(base_url=sim.base_url, timeout=10) as client:
            while time.monotonic() - start < hold_s - 0.5:
                held.append(await asyncio.to_thread(_established, sim.api_pid, sim.port))
                began = time.monotonic()
                assert (await client.get("/health")).status_code == 200
                health.append(time.monotonic() - began)
                await asyncio.sleep(0.25)  # sampling interval
            metrics = (await client.get("/metrics")).text
        result = await task
    running = waiting = 0.0
    for line in metrics.splitlines():
        if line.startswith("vllm:num_requests_running{"):
            running = float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm:num_requests_waiting{"):
            waiting = float(line.rsplit(" ", 1)[1])
    return {
        "requested": connections,
        "max_established": max(held) if held else 0,
        "running_at_end": running,
        "waiting_at_end": waiting,
        "health_latency_s": percentiles(health),
        "ended_by": result.summary()["errors"],
    }


async def short_requests(duration: float, concurrency: int) -> dict[str, Any]:
    async with SimProcess(max_num_seqs=256) as sim:
        await run_load(LoadConfig(target=sim.base_url, duration=1.0, concurrency=8, max_tokens=1))
        load = LoadConfig(
            target=sim.base_url,
            model=sim.model,
            concurrency=concurrency,
            duration=duration,
            max_tokens=1,
        )
        summary = (await run_load(load)).summary()
    return summary


async def run(hold_s: float, duration: float, concurrency: int) -> dict[str, Any]:
    connections = await held_connections(TARGET_CONNECTIONS, hold_s)
    short = await short_requests(duration, concurrency)
    return {
        "cpu_count": psutil.cpu_count(),
        "connections": connections,
        "short_requests": short,
        "meets_targets": {
            "connections": connections["max_established"] > TARGET_CONNECTIONS
            and connections["running_at_end"] + connections["waiting_at_end"] >= TARGET_CONNECTIONS,
            "requests_per_s": short["requests_per_s"] >= TARGET_RPS,
        },
    }


def render(report: dict[str, Any]) -> None:
    table = Table(title=f"simulator capacity ({report['cpu_count']} CPUs, load generator local)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    conn = report["connections"]
    table.add_row("connections requested", str(conn["requested"]))
    table.add_row("sockets ESTABLISHED, max (+1: the sampler)", str(conn["max_established"]))
    table.add_row("running / waiting while held", f"{conn['running_at_end']:.0f} / "
                  f"{conn['waiting_at_end']:.0f}")  # fmt: skip
    for pct, value in conn["health_latency_s"].items():
        table.add_row(f"/health latency {pct} while held", f"{value:.4f} s")
    short = report["short_requests"]
    table.add_row("short requests completed", str(short["completed"]))
    table.add_row("short requests per second", str(short["requests_per_s"]))
    for pct, value in short["latency_s"].items():
        table.add_row(f"short request latency {pct}", f"{value:.4f} s")
    table.add_row("errors", json.dumps(short["errors"]) or "none")
    for name, ok in report["meets_targets"].items():
        table.add_row(f"target {name}", "met" if ok else "NOT met")
    Console().print(table)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hold", type=float, default=6.0, help="seconds to hold connections")
    parser.add_argument("--duration", type=float, default=8.0, help="short-request phase, s")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = asyncio.run(run(args.hold, args.duration, args.concurrency))
    if args.json:
        print(json.dumps(report))
    else:
        render(report)
    return 0 if all(report["meets_targets"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
