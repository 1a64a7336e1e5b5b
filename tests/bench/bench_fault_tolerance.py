"""Benchmark: vLLM fault tolerance at full length, sentinel at its shipped windows.

Run: ``python -m tests.bench.bench_fault_tolerance [--release 0.33|0.34] [--hold 60]
[--timeout 120]``. Not part of ``make test``: it takes about four minutes.

Issue 39's "Done when": a fault-tolerance rank ``unhealthy`` then ``healthy``
after 60 s held (0 liveness failures, readiness red with the status named),
the same rank ``dead`` red within 10 s, ``unhealthy`` past its window red. A
simulator (``--enable-fault-tolerance``, ``engine_recovery_timeout_sec``
``--timeout``, the release form given) and an in-process sentinel with the
shipped settings (only the listen port, gRPC and diagnostics changed) are
started per phase; ``/livez`` and ``/readyz`` are polled every 0.25 s.

1. ``hold``: unhealthy for ``--hold`` s, then healthy: liveness failures,
   seconds unready, the readiness reason seen, seconds to ready again.
2. ``dead``: the rank reports ``dead``: seconds to liveness red, and the reason.
3. ``late``: unhealthy and its timeout never fires (a rank vLLM did not give up
   on): seconds to liveness red (the window is the timeout plus the 10 s grace).

Prints one line per phase and a JSON summary; exits 0 (1 when a phase could not
be measured). Every process it started is stopped on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from sentinel.boot import boot
from sentinel.config.loader import load_settings
from sentinel.daemon import Daemon
from sentinel_sim.fault_tolerance import fault_tolerance_calls, set_engine_status
from sentinel_sim.launch import SimProcess

POLL = 0.25


class Watch:
    """The sidecar's answers, polled: liveness failures and readiness as they come."""

    def __init__(self, client: httpx.AsyncClient, url: str) -> None:
        self.client, self.url = client, url
        self.live_failures = 0
        self.unready_s = 0.0
        self.reasons: dict[str, int] = {}
        self.live_reason = ""

    async def answers(self) -> tuple[bool, bool]:
        live = await self.client.get(self.url + "/livez")
        ready = await self.client.get(self.url + "/readyz")
        if live.status_code != 200:
            self.live_reason = str(live.json().get("reason", ""))
        reason = str(ready.json().get("reason", ""))[:160]
        if ready.status_code != 200:
            self.reasons[reason] = self.reasons.get(reason, 0) + 1
        return live.status_code == 200, ready.status_code == 200

    async def until(self, done: Callable[[bool, bool], bool], limit: float) -> float | None:
        """Poll until ``done(live, ready)``; the seconds it took (None: not within ``limit``)."""
        start = time.monotonic()
        while time.monotonic() - start < limit:
            live, ready = await self.answers()
            self.live_failures += not live
            self.unready_s += POLL if not ready else 0.0
            if done(live, ready):
                return time.monotonic() - start
            await asyncio.sleep(POLL)
        return None


async def _phase(
    args: argparse.Namespace, run: Callable[[SimProcess, Watch], Awaitable[dict[str, Any]]]
) -> dict[str, Any]:
    config = json.dumps({"engine_recovery_timeout_sec": args.timeout})
    extra = ["--enable-fault-tolerance", "--fault-tolerance-config", config]
    extra += ["--fault-tolerance-release", args.release]
    with SimProcess(extra_args=extra) as sim:
        flags = {
            "target": sim.base_url,
            "listen": "127.0.0.1:0",
            "grpc_listen": "off",
            "diagnostics": False,
            "diagnostics_dir": Path("/nonexistent"),
        }
        settings = load_settings(None, env={}, flags=flags)
        async with Daemon(settings).serving() as daemon, httpx.AsyncClient(timeout=5) as client:
            assert daemon.http is not None
            watch = Watch(client, daemon.http.url)
            if await watch.until(lambda live, ready: live and ready, 120) is None:
                return {"error": "sidecar never green"}
            watch.live_failures, watch.unready_s, watch.reasons = 0, 0.0, {}
            result = await run(sim, watch)
            result["apply_calls_by_sentinel"] = fault_tolerance_calls(sim.control_url)["apply"]
            return result


async def hold(sim: SimProcess, watch: Watch, seconds: float) -> dict[str, Any]:
    set_engine_status(sim.control_url, 0, "unhealthy")
    await watch.until(lambda live, ready: False, seconds)
    set_engine_status(sim.control_url, 0, "healthy")
    back = await watch.until(lambda live, ready: live and ready, 120)
    named = any("engine 0 unhealthy" in r for r in watch.reasons)
    return {
        "held_s": seconds,
        "liveness_failures": watch.live_failures,
        "unready_s": round(watch.unready_s, 1),
        "readiness_named_the_status": named,
        "reasons": sorted(watch.reasons, key=watch.reasons.__getitem__, reverse=True)[:3],
        "ready_again_after_healthy_s": None if back is None else round(back, 1),
    }


async def dead(sim: SimProcess, watch: Watch) -> dict[str, Any]:
    set_engine_status(sim.control_url, 0, "dead")
    red = await watch.until(lambda live, ready: not live, 60)
    return {"red_after_s": None if red is None else round(red, 1), "reason": watch.live_reason}


async def late(sim: SimProcess, watch: Watch, recovery: float) -> dict[str, Any]:
    set_engine_status(sim.control_url, 0, "unhealthy", stuck=True)
    red = await watch.until(lambda live, ready: not live, recovery + 60)
    return {
        "window_s": recovery + 10.0,
        "red_after_s": None if red is None else round(red, 1),
        "reason": watch.live_reason,
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    boot()
    summary: dict[str, Any] = {"release": args.release, "recovery_timeout_s": args.timeout}
    phases: dict[str, Callable[[SimProcess, Watch], Awaitable[dict[str, Any]]]] = {
        "hold": lambda sim, watch: hold(sim, watch, args.hold),
        "dead": dead,
        "late": lambda sim, watch: late(sim, watch, args.timeout),
    }
    for name, run in phases.items():
        print(f"[{name}] ...", file=sys.stderr, flush=True)
        summary[name] = await _phase(args, run)
        print(f"{name}: {json.dumps(summary[name])}", flush=True)
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", choices=("0.33", "0.34"), default="0.33")
    parser.add_argument("--hold", type=float, default=60.0)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    summary = asyncio.run(main_async(args))
    print(json.dumps(summary, indent=2))
    failed = any("error" in v for v in summary.values() if isinstance(v, dict))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
