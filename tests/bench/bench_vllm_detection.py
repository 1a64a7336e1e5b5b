"""Benchmark: sentinel's shipped defaults against one real vLLM 0.32 server (CPU build).

Run: ``make bench-vllm`` or ``python -m tests.bench.bench_vllm_detection [--rounds N]
[--slow-window S] [--json PATH]``. One server (the tiny text model, priority
scheduling, pinned off the last CPU) and one in-process sentinel daemon with its
shipped settings serve every figure, in this order:

1. ``engine_hang``: the chaos plugin blocks the engine loop (``/health`` stays
   200); seconds from the fault file to ``/livez`` 503, ``--rounds`` times
   (3 by default), the fault cleared and sentinel green again between rounds.
   The median is the figure; the goal is 15 s or less.
2. ``slow_decode``: the plugin sleeps 2 s after every engine step (decode near
   0.5 token/s per request, measured) under light load for ``--slow-window``
   seconds (180 by default); ``/livez`` is polled every 0.5 s and must never
   fail: a slow server that is making progress is not hung.
3. ``sigstop``: SIGSTOP of ``VLLM::EngineCore``; seconds to ``/livez`` 503
   (the issue's bar: 30 s), SIGCONT after.

The pieces are the compatibility matrix's (:mod:`chaos.vllm_engine.matrix`):
the same server start, sentinel, fault switching and measurement, so the
benchmark and ``make compat`` judge the same thing. The process exits 1 when a
goal is missed. The server is always stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chaos.vllm_engine import env as engine_env
from chaos.vllm_engine.matrix import (
    DETECT_LIMIT,
    Windows,
    _detect,
    _eventually,
    _sentinel,
    _slow_decode,
)
from chaos.vllm_engine.server import ENGINE_TITLE, VllmServer

#: Issue 10's goal for the median engine-hang detection on real vLLM.
MEDIAN_GOAL = 15.0


async def run(rounds: int, windows: Windows) -> dict[str, Any]:
    """Every figure against one server; the report."""
    env = await asyncio.to_thread(engine_env.ensure_env)
    model = await asyncio.to_thread(engine_env.ensure_model, env, "text")
    work = Path(tempfile.mkdtemp(prefix="sentinel-bench-vllm-"))
    server = VllmServer(
        env.python,
        model,
        served_model_name="tiny-text",
        fault_dir=work / "faults",
        log_path=work / "vllm.log",
    )
    report: dict[str, Any] = {"log": str(server.log_path)}
    try:
        await asyncio.to_thread(server.start)
        report["server_start_s"] = round(
            await asyncio.to_thread(server.wait_ready, windows.start), 1
        )
        print(f"[bench-vllm] server ready after {report['server_start_s']} s", flush=True)
        async with _sentinel(server.base_url) as sentinel:
            report["green_after_start_s"] = await _eventually(sentinel.green, windows.green)
            hangs = []
            for index in range(rounds):
                result = await _detect(
                    sentinel,
                    windows,
                    lambda: server.faults.set("engine_hang"),
                    lambda: server.faults.clear("engine_hang"),
                )
                print(f"[bench-vllm] engine_hang {index + 1}: {result}", flush=True)
                hangs.append(result)
            detected = [h["seconds"] for h in hangs if h["seconds"] is not None]
            report["engine_hang"] = {
                "rounds": hangs,
                "seconds": detected,
                "median_s": statistics.median(detected) if len(detected) == rounds else None,
            }
            report["slow_decode"] = await _slow_decode(sentinel, server, windows)
            print(f"[bench-vllm] slow_decode: {report['slow_decode']}", flush=True)
            report["sigstop"] = await _detect(
                sentinel,
                windows,
                lambda: server.signal(ENGINE_TITLE, signal.SIGSTOP),
                server.resume_all,
            )
            print(f"[bench-vllm] sigstop: {report['sigstop']}", flush=True)
    finally:
        await asyncio.to_thread(server.stop)
    return report


def judge(report: dict[str, Any]) -> list[str]:
    """The goals missed (empty when every one is met)."""
    missed = []
    median = report.get("engine_hang", {}).get("median_s")
    if median is None or median > MEDIAN_GOAL:
        missed.append(f"engine_hang median {median} s (goal <= {MEDIAN_GOAL:.0f} s)")
    slow = report.get("slow_decode", {})
    if slow.get("livez_failures") != 0 or slow.get("green_after_s") is None:
        missed.append(f"slow_decode: {slow.get('livez_failures')} liveness failures")
    seconds = report.get("sigstop", {}).get("seconds")
    if seconds is None or seconds > DETECT_LIMIT:
        missed.append(f"sigstop detection {seconds} s (bar {DETECT_LIMIT:.0f} s)")
    return missed


def summary(report: dict[str, Any]) -> str:
    hang = report.get("engine_hang", {})
    slow = report.get("slow_decode", {})
    lines = [
        f"vLLM start to first answer: {report.get('server_start_s')} s",
        "engine_hang detection (s): "
        + ", ".join(str(s) for s in hang.get("seconds", []))
        + f"; median {hang.get('median_s')} (goal <= {MEDIAN_GOAL:.0f})",
        f"slow_decode: {slow.get('livez_failures')} liveness failures of "
        f"{slow.get('livez_polls')} polls over {slow.get('window_s')} s at "
        f"{slow.get('decode_tokens_per_s_per_request')} token/s per request",
        f"sigstop of {ENGINE_TITLE}: detected after {report.get('sigstop', {}).get('seconds')} s",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="sentinel's detection on real vLLM.")
    parser.add_argument("--rounds", type=int, default=3, help="engine hangs (default 3)")
    parser.add_argument("--slow-window", type=float, default=180.0, help="seconds slowed")
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    args = parser.parse_args(argv)
    report = asyncio.run(run(args.rounds, Windows(slow_window=args.slow_window)))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(summary(report))
    missed = judge(report)
    for line in missed:
        print(f"MISSED: {line}", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
