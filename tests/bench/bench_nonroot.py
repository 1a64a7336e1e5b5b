"""Benchmark: detection in the shipped pod's shape (sentinel as uid 10001, server as root).

Run: ``make bench-nonroot`` or ``python -m tests.bench.bench_nonroot [--rounds N]
[--json PATH]`` as root. For each shape, sentinel as uid 10001 with no
capabilities (the base manifest) and sentinel as root (the server's own uid,
for comparison), against a simulated vLLM running as root with its port on its
command line, with tests/nonroot's shortened settings (dead grace 1.5 s,
process sampling 0.5 s, evaluation 0.25 s, listener-down grace 3 s):

1. ``sigstop_engine``: SIGSTOP of ``VLLM::EngineCore``; seconds to ``/livez``
   503, ``--rounds`` times (5 by default), SIGCONT and green again between
   rounds. The figure is the p95 (nearest rank: of 5 rounds, the slowest);
   the bound is the dead grace plus the sampling intervals plus 1 s.
2. ``sigstop_api``: SIGSTOP of the API server; seconds to ``/livez`` 503 (once).
3. ``listener_closed``: the listener closes for good while the process lives;
   seconds to ``/livez`` 503 (once); the bound is the listener-down grace + 15 s.

It prints one table and exits 1 when a bound is missed. Every process is stopped.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chaos.ports import free_port
from sentinel_sim.launch import SimProcess
from tests.nonroot.shape import (
    SETTINGS,
    SHIPPED,
    NonRootSentinel,
    nonroot_sentinel,
    poll,
    private_mounts_allowed,
)

DEAD_BOUND = SETTINGS["dead_grace"] + SETTINGS["process_interval"] + SETTINGS["eval_interval"] + 1
LISTENER_BOUND = SETTINGS["listener_grace"] + 15.0
SHAPES: dict[str, tuple[str, ...] | None] = {"uid 10001": SHIPPED, "root": None}


def p95(values: list[float]) -> float:
    """The nearest-rank 95th percentile."""
    ordered = sorted(values)
    return ordered[max(math.ceil(0.95 * len(ordered)) - 1, 0)]


def red_after(sidecar: NonRootSentinel, fault: Callable[[], object], deadline: float) -> float:
    fault()
    return poll(lambda: sidecar.get("/livez").status_code == 503, deadline, "/livez red")


def attributed(sidecar: NonRootSentinel, sim: SimProcess) -> str:
    def ready() -> bool:
        processes = (sidecar.status().get("evidence") or {}).get("processes") or {}
        engines = [p["pid"] for p in processes.get("engines") or []]
        return (processes.get("api") or {}).get("pid") == sim.api_pid and sim.engine_pid in engines

    poll(ready, 20.0, "attribution")
    return str(sidecar.attribution().get("by"))


def one_shape(options: tuple[str, ...] | None, rounds: int, read_only: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    port = free_port()
    with (
        SimProcess(scheduling_policy="priority", extra_args=["--port", str(port)]) as sim,
        nonroot_sentinel(
            sim.base_url, read_only=read_only, writable=[], port=free_port(), options=options
        ) as sidecar,
    ):
        out["attribution"] = attributed(sidecar, sim)
        times = []
        for _ in range(rounds):
            try:
                times.append(
                    red_after(
                        sidecar, lambda: os.kill(sim.engine_pid, signal.SIGSTOP), DEAD_BOUND + 10
                    )
                )
            finally:
                os.kill(sim.engine_pid, signal.SIGCONT)
            poll(lambda: sidecar.get("/livez").status_code == 200, 60.0, "/livez green again")
        out["sigstop_engine"] = times
        try:
            out["sigstop_api"] = red_after(
                sidecar, lambda: os.kill(sim.api_pid, signal.SIGSTOP), 60.0
            )
        finally:
            os.kill(sim.api_pid, signal.SIGCONT)
        poll(lambda: sidecar.get("/livez").status_code == 200, 60.0, "/livez green again")
        out["listener_closed"] = red_after(
            sidecar, lambda: sim.control.set_fault("listener_closed"), LISTENER_BOUND + 10
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("run as root: sentinel is started as uid 10001 beside a root server", file=sys.stderr)
        return 2
    read_only = not private_mounts_allowed()
    report = {
        shape: one_shape(options, args.rounds, read_only) for shape, options in SHAPES.items()
    }
    missed = False
    print(f"read-only root (private mount namespace): {read_only}")
    print(
        f"{'sentinel as':<10} {'attributed by':<16} {'SIGSTOP engine p95 (runs)':<40} "
        f"{'SIGSTOP API':<12} listener closed"
    )
    for shape, figures in report.items():
        engine = figures["sigstop_engine"]
        runs = ", ".join(f"{t:.2f}" for t in engine)
        print(
            f"{shape:<10} {figures['attribution']:<16} "
            f"{p95(engine):.2f} s ({runs}){'':<4} {figures['sigstop_api']:.2f} s{'':<6} "
            f"{figures['listener_closed']:.2f} s"
        )
        missed |= p95(engine) > DEAD_BOUND or figures["listener_closed"] > LISTENER_BOUND
    print(f"bounds: SIGSTOP {DEAD_BOUND:g} s, listener closed {LISTENER_BOUND:g} s")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
