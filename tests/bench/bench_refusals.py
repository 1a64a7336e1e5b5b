"""Benchmark: a server refusing in words sentinel does not know, for 5 minutes at shipped windows.

Run: ``python -m tests.bench.bench_refusals [--hold 300] [--stream event|body]``.
Not part of ``make test``: it takes about six minutes.

Issue 39's "Done when": an unknown 503 body held unready for 5 minutes with no
liveness failure. A simulator refuses every generation request (the ``refuse``
fault: a 503 whose body no vLLM release sends; a streamed canary gets HTTP 200
and the error as an SSE event with code 503) beside an in-process sentinel
with the shipped settings (only the listen port, gRPC and diagnostics
changed; ``refusal_bound`` 600 s). ``/livez``, ``/readyz`` and ``/status`` are
polled every 0.5 s. Printed: liveness failures, seconds unready, whether every
readiness reason quoted the body, how soon readiness turned red, what
``/status`` shows of the refusal, and seconds to green again once the refusal
ends. Exits 1 when a figure misses the goal. Every process it started is stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from sentinel.boot import boot
from sentinel.config.loader import load_settings
from sentinel.daemon import Daemon
from sentinel_sim.faults import UNKNOWN_REFUSAL
from sentinel_sim.launch import SimProcess

POLL = 0.5


async def _green(client: httpx.AsyncClient, url: str, limit: float) -> float | None:
    start = time.monotonic()
    while time.monotonic() - start < limit:
        codes = [
            (await client.get(url + p)).status_code for p in ("/startupz", "/readyz", "/livez")
        ]
        if codes == [200, 200, 200]:
            return time.monotonic() - start
        await asyncio.sleep(POLL)
    return None


async def run(hold: float, stream: str) -> dict[str, Any]:
    boot()
    with SimProcess() as sim:
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
            url = daemon.http.url
            if await _green(client, url, 120) is None:
                return {"error": "sidecar never green"}
            sim.control.set_fault("refuse", stream=stream)
            start = time.monotonic()
            failures = polls = unready_polls = quoted = 0
            first_red: float | None = None
            status: dict[str, Any] = {}
            while time.monotonic() - start < hold:
                polls += 1
                failures += (await client.get(url + "/livez")).status_code != 200
                ready = await client.get(url + "/readyz")
                reason = str(ready.json().get("reason", ""))
                if ready.status_code != 200:
                    unready_polls += 1
                    first_red = time.monotonic() - start if first_red is None else first_red
                    quoted += UNKNOWN_REFUSAL in reason
                await asyncio.sleep(POLL)
            status = (await client.get(url + "/status")).json()
            sim.control.clear_fault("refuse")
            back = await _green(client, url, 120)
            return {
                "held_s": hold,
                "stream": stream,
                "refusal_bound_s": settings.refusal_bound,
                "liveness_failures": failures,
                "polls": polls,
                "unready_polls": unready_polls,
                "unready_after_s": None if first_red is None else round(first_red, 1),
                "reasons_quoting_the_body": quoted,
                "readiness_at_end": status["verdict"]["readiness"]["reason"][:200],
                "status_refusals": status.get("refusals", {}),
                "green_again_after_s": None if back is None else round(back, 1),
            }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hold", type=float, default=300.0)
    parser.add_argument("--stream", choices=("event", "body"), default="event")
    args = parser.parse_args()
    summary = asyncio.run(run(args.hold, args.stream))
    print(json.dumps(summary, indent=2))
    ok = (
        "error" not in summary
        and summary["liveness_failures"] == 0
        and summary["unready_after_s"] is not None
        and summary["unready_after_s"] <= 15.0
        and summary["reasons_quoting_the_body"] >= summary["unready_polls"] - 2
        and summary["unready_polls"] >= summary["polls"] - 30
    )
    failures, red = summary.get("liveness_failures"), summary.get("unready_after_s")
    verdict = "PASS" if ok else "FAIL"
    print(f"{verdict}: {failures} liveness failures in {args.hold:.0f} s; unready after {red} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
