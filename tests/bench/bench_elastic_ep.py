"""Benchmark: elastic EP scales in vLLM 0.33's form at full length, against the simulator.

Run: ``python -m tests.bench.bench_elastic_ep [--scale 175] [--failed-after 60]``.

Issue 39's "done when": a scale of 0.33's form lasting 175 s (the scale route's
default drain timeout, 120 s, plus a 55 s commit) held with no liveness
failure; a commit that failed (``phase: failed``, the gate left up) red within
30 s of the failure; a scale that never ends red at its bound. The three run
side by side, each a simulator (``--elastic-ep-release 0.33``, the default)
and an in-process sentinel with the loopback harness's short canary and hang
windows (stricter than shipped: a 4 s hang window) and the shipped elastic EP
settings: ``scale_bound`` 240 s, ``scale_failed_grace`` 10 s, the status route
asked every ``lifecycle_interval`` (5 s) while the gate is up. Printed: the
liveness failures and readiness reasons of the held scale, when the failed
commit turned red after its failure, and when the endless scale turned red.
Takes about four and a half minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence

from sentinel_sim.launch import SimProcess
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar

GREEN_WITHIN = 60.0


async def _watch_until(sidecar: Sidecar, end: float) -> tuple[int, int, set[str], set[int]]:
    polls = failures = 0
    reasons: set[str] = set()
    epochs: set[int] = set()
    while time.monotonic() < end:
        polls += 1
        failures += await sidecar.code("/livez") != 200
        status = await sidecar.json("/status")
        reasons.add(str(status["verdict"]["readiness"]["reason"])[:90])
        epochs.add(int(status["server"]["epoch"]))
        await asyncio.sleep(1.0)
    return polls, failures, reasons, epochs


async def held(scale: float) -> str:
    async with SimProcess() as sim, running_sidecar(sim.base_url) as sidecar:
        await eventually(sidecar.green, GREEN_WITHIN, "green before the scale")

        async def counted() -> bool:  # so the scale-up's reset to 0 is a drop sentinel sees
            totals = (await sidecar.json("/status"))["evidence"]["progress"]["epoch_totals"]
            return float(totals.get("completions", {}).get("delta", 0.0)) >= 3.0

        await eventually(counted, GREEN_WITHIN, "completions counted before the scale")
        await asyncio.to_thread(sim.control.set_fault, "elastic_scale", duration=scale, size=2)
        polls, failures, reasons, epochs = await _watch_until(sidecar, time.monotonic() + scale)
        back = await eventually(sidecar.green, GREEN_WITHIN, "green after the scale")
        epochs.add(int((await sidecar.json("/status"))["server"]["epoch"]))
    kinds = sorted({r.split(":")[0].split(" for ")[0] for r in reasons})
    return (
        f"0.33 scale of {scale:.0f}s: {failures} liveness failures in {polls} polls; "
        f"readiness {kinds}; epochs {sorted(epochs)}; green again {back:.1f}s after"
    )


async def _red(sidecar: Sidecar, deadline: float) -> tuple[float, str]:
    async def red() -> bool:
        return await sidecar.code("/livez") == 503

    took = await eventually(red, deadline, "/livez 503", interval=0.5)
    status = await sidecar.json("/status")
    return took, "; ".join(str(h["reason"])[:140] for h in status["verdict"]["hangs"])


async def failed(after: float) -> str:
    async with SimProcess() as sim, running_sidecar(sim.base_url) as sidecar:
        await eventually(sidecar.green, GREEN_WITHIN, "green before the scale")
        await asyncio.to_thread(
            sim.control.set_fault, "elastic_scale", duration=after, commit="fail"
        )
        took, why = await _red(sidecar, after + 120.0)
    return f"failed commit: red {took - after:.1f}s after phase failed ({why})"


async def endless() -> str:
    async with SimProcess() as sim, running_sidecar(sim.base_url) as sidecar:
        await eventually(sidecar.green, GREEN_WITHIN, "green before the scale")
        await asyncio.to_thread(sim.control.set_fault, "elastic_scale")
        took, why = await _red(sidecar, 400.0)
    return f"never-ending scale: red {took:.1f}s after it began ({why})"


async def bench(scale: float, after: float) -> list[str]:
    return list(await asyncio.gather(held(scale), failed(after), endless()))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=175.0, help="the held scale's length (s)")
    parser.add_argument(
        "--failed-after", type=float, default=60.0, help="when the failing commit fails (s)"
    )
    args = parser.parse_args(argv)
    for line in asyncio.run(bench(args.scale, args.failed_after)):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
