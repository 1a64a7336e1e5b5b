"""Benchmark: seconds from a hang to sentinel's ``/livez`` 503, per hang shape, with shipped
defaults, against the simulator and against a real vLLM 0.32 CPU build.

Run: ``make bench-detection`` (simulator), ``make bench-detection-vllm`` (real vLLM), or
``python -m tests.bench.bench_detection [--rounds N] [--target sim|vllm|both]
[--json PATH] [--only SHAPE ...]``. The shapes:

- ``idle``: an engine hang on an idle server (simulator ``engine_hang``; the chaos
  plugin's ``engine_hang``).
- ``stuck_request``: an engine hang with one request in the batch and every counter
  frozen (simulator ``stuck_running`` with ``requests: 1``; on vLLM one long streamed
  request, ``ignore_eos``, then ``engine_hang`` once its first token arrived).
- ``decode_stall``: decode stops after the first token while a small streamed load
  (``python -m chaos.load --stream``, open loop, its own process) keeps arriving
  (simulator ``stall_after_first``; the plugin's ``stream_stall`` with ``after: 1``).
- ``sigstop``: SIGSTOP of ``VLLM::EngineCore`` (SIGCONT always, in ``finally``).

Each round has a fresh sidecar. On the simulator it also has a fresh simulator; on
vLLM one server serves every round (a start costs about a minute on two cores): the
fault is cleared and sentinel green and a completion answered before the next round.
The fault falls a random 0-5 s (the text canary's interval) after the sidecar is green,
so the figure is not flattered by a fault that lands just before a canary. Goals
(issue 32): median <= 10 s for ``idle`` and ``stuck_request``, <= 5 s for ``sigstop``.

Unlike ``bench_sentinel`` (exit 1 on a missed budget) this one reports: it exits 0
whether the goals are met or not, and 1 only when a round could not be measured.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import math
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from chaos.vllm_engine import env as engine_env
from chaos.vllm_engine.matrix import _eventually, _sentinel
from chaos.vllm_engine.server import ENGINE_TITLE, VllmServer
from sentinel.telemetry.logging import configure_logging
from sentinel_sim.control import AsyncSimControl
from sentinel_sim.launch import SimProcess
from tests.bench.bench_sentinel import (
    OBSERVE_DEADLINE_S,
    BenchError,
    _loadavg,
    running_sidecar,
    wait_green,
    wait_until,
)

SHAPES = ("idle", "stuck_request", "decode_stall", "sigstop")
ROUNDS = {"sim": 5, "vllm": 3}
#: shape -> the median it should reach (issue 32); shapes without one are reported only.
GOALS = {"idle": 10.0, "stuck_request": 10.0, "sigstop": 5.0}
SIM_FAULTS: dict[str, tuple[str, dict[str, Any]]] = {
    "idle": ("engine_hang", {}),
    "stuck_request": ("stuck_running", {"requests": 1}),
    "decode_stall": ("stall_after_first", {}),
}
VLLM_FAULTS: dict[str, tuple[str, dict[str, Any]]] = {
    "idle": ("engine_hang", {}),
    "stuck_request": ("engine_hang", {}),
    "decode_stall": ("stream_stall", {"after": 1}),
}
PHASE_S = 5.0  # the text canary's interval: the fault lands at a random point of it
VLLM_START_S = 300.0
VLLM_GREEN_S = 240.0
STUCK_MAX_TOKENS = 1900  # the tiny model's context is 2048 tokens


def _say(message: str) -> None:
    print(f"[bench-detection {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _utc() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


async def _phase() -> float:
    """Sleep a random share of the canary interval (the fault's phase, not a wait for a state)."""
    seconds = random.uniform(0.0, PHASE_S)
    await asyncio.sleep(seconds)
    return round(seconds, 2)


@contextlib.asynccontextmanager
async def streamed_load(target: str) -> AsyncIterator[None]:
    """``python -m chaos.load --stream``, open loop at 1 request/s, for the block."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "chaos.load",
        *("--target", target, "--rate", "1", "--concurrency", "4", "--duration", "900"),
        *("--max-tokens", "32", "--timeout", "120", "--stream", "--json"),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()


# -- the simulator: a fresh simulator and sidecar per round ------------------------------


async def sim_round(shape: str, workdir: Path) -> dict[str, Any]:
    async with contextlib.AsyncExitStack() as stack:
        sim = await stack.enter_async_context(SimProcess(scheduling_policy="priority"))
        control = await stack.enter_async_context(AsyncSimControl(sim.control_url))
        if shape == "decode_stall":
            await stack.enter_async_context(streamed_load(sim.base_url))
        sidecar = await stack.enter_async_context(running_sidecar(sim.base_url, workdir))
        green_s = await wait_green(sidecar)
        engine_pid = sim.engine_pid
        phase_s = await _phase()

        async def red() -> bool:
            return await sidecar.code("/livez") == 503

        injected = time.monotonic()
        try:
            if shape == "sigstop":
                os.kill(engine_pid, signal.SIGSTOP)
            else:
                name, params = SIM_FAULTS[shape]
                await control.set_fault(name, **params)
            seconds = await wait_until(red, injected, OBSERVE_DEADLINE_S)
            hangs = (await sidecar.json("/status"))["verdict"]["hangs"]
        finally:
            if shape == "sigstop":
                with contextlib.suppress(ProcessLookupError):
                    os.kill(engine_pid, signal.SIGCONT)
    return {
        "livez_503_s": None if seconds is None else round(seconds, 2),
        "phase_s": phase_s,
        "green_after_start_s": round(green_s, 1),
        "hangs": hangs,
    }


# -- real vLLM: one server, a fresh sidecar per round --------------------------------------


@contextlib.asynccontextmanager
async def stuck_request(server: VllmServer) -> AsyncIterator[dict[str, Any]]:
    """One long streamed request, yielded once its first token came; cancelled on exit."""
    seen: dict[str, Any] = {"tokens": 0, "finished": False}
    first = asyncio.Event()
    body = {
        "model": server.served_model_name,
        "messages": [{"role": "user", "content": "Count to ten thousand."}],
        "max_tokens": STUCK_MAX_TOKENS,
        "ignore_eos": True,
        "stream": True,
    }

    async def read() -> None:
        timeout = httpx.Timeout(10.0, read=None)
        async with (
            httpx.AsyncClient(base_url=server.base_url, timeout=timeout) as client,
            client.stream("POST", "/v1/chat/completions", json=body) as response,
        ):
            async for line in response.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                choices = json.loads(line[6:]).get("choices") or [{}]
                if (choices[0].get("delta") or {}).get("content"):
                    seen["tokens"] += 1
                    first.set()
        seen["finished"] = True

    task = asyncio.create_task(read(), name="stuck-request")
    try:
        waiter = asyncio.create_task(first.wait())
        await asyncio.wait({task, waiter}, timeout=60, return_when="FIRST_COMPLETED")
        waiter.cancel()
        if not first.is_set():
            if task.done():
                task.result()  # raises the request's error
            raise BenchError("the stuck request got no token within 60 s")
        yield seen
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _answers(server: VllmServer) -> bool:
    def once() -> bool:
        with httpx.Client(base_url=server.base_url, timeout=10.0) as client:
            return server.complete(client) is not None

    return await asyncio.to_thread(once)


async def vllm_round(shape: str, server: VllmServer) -> dict[str, Any]:
    async with _sentinel(server.base_url) as sentinel:
        async with contextlib.AsyncExitStack() as stack:
            if shape == "decode_stall":
                await stack.enter_async_context(streamed_load(server.base_url))
            green_s = await _eventually(sentinel.green, VLLM_GREEN_S)
            if green_s is None:
                raise BenchError(f"sidecar not green within {VLLM_GREEN_S:.0f} s")
            phase_s = await _phase()
            stuck = None
            if shape == "stuck_request":
                stuck = await stack.enter_async_context(stuck_request(server))

            async def red() -> bool:
                with contextlib.suppress(httpx.HTTPError):
                    return await sentinel.red()
                return False

            injected = time.monotonic()
            try:
                if shape == "sigstop":
                    server.signal(ENGINE_TITLE, signal.SIGSTOP)
                else:
                    name, params = VLLM_FAULTS[shape]
                    server.faults.set(name, **params)
                seconds = await wait_until(red, injected, OBSERVE_DEADLINE_S)
                hangs = (await sentinel.status())["verdict"]["hangs"]
            finally:
                server.faults.clear_all()
                server.resume_all()
            result: dict[str, Any] = {
                "livez_503_s": None if seconds is None else round(seconds, 2),
                "phase_s": phase_s,
                "green_after_start_s": green_s,
                "hangs": hangs,
            }
            if stuck is not None:
                result["stuck_request"] = dict(stuck)  # finished: True would void the shape
        # The stuck request and the load have ended: the server is judged recovered when
        # this sidecar is green again and a completion is answered.
        result["green_after_clear_s"] = await _eventually(sentinel.green, VLLM_GREEN_S)
    answered = await wait_until(lambda: _answers(server), time.monotonic(), VLLM_GREEN_S, 1.0)
    if result["green_after_clear_s"] is None or answered is None:
        raise BenchError(f"vLLM not green and answering after the fault: {result}")
    return result


# -- driver ------------------------------------------------------------------------------


def _stats(rounds: Sequence[dict[str, Any]], shape: str) -> dict[str, Any]:
    values = [r.get("livez_503_s") for r in rounds if "error" not in r]
    as_inf = [math.inf if v is None else float(v) for v in values]
    median = statistics.median(as_inf) if as_inf else None
    goal = GOALS.get(shape)
    return {
        "values_s": values,
        "median_s": median,
        "worst_s": max(as_inf) if as_inf else None,
        "goal_median_s": goal,
        "met": None if goal is None or median is None else median <= goal,
        "errors": [r["error"] for r in rounds if "error" in r],
    }


async def bench_target(target: str, shapes: Sequence[str], rounds: int, workdir: Path) -> Any:
    report: dict[str, Any] = {"started": _utc(), "load_average_start": _loadavg(), "shapes": {}}
    server: VllmServer | None = None
    try:
        if target == "vllm":
            env = await asyncio.to_thread(engine_env.ensure_env)
            model = await asyncio.to_thread(engine_env.ensure_model, env, "text")
            server = VllmServer(
                env.python,
                model,
                served_model_name="tiny-text",
                fault_dir=workdir / "faults",
                log_path=workdir / "vllm.log",
            )
            server.start()
            start_s = await asyncio.to_thread(server.wait_ready, VLLM_START_S)
            report["server_start_s"] = round(start_s, 1)
            report["note"] = (
                "one vLLM server for every round (started once); fresh sidecar per round; "
                "between rounds the fault is cleared and sentinel green and a completion "
                "answered"
            )
            _say(f"vLLM ready after {start_s:.0f} s; log {server.log_path}")
        for shape in shapes:
            results: list[dict[str, Any]] = []
            for number in range(1, rounds + 1):
                try:
                    if server is None:
                        result = await sim_round(shape, workdir)
                    else:
                        result = await vllm_round(shape, server)
                except Exception as exc:  # one round's failure must not hide the others
                    result = {"error": f"{type(exc).__name__}: {exc}"}
                result["load_average"] = _loadavg()
                results.append(result)
                _say(f"{target} {shape} round {number}/{rounds}: {json.dumps(result)}")
            report["shapes"][shape] = {"rounds": results, **_stats(results, shape)}
    finally:
        if server is not None:
            server.stop()  # synchronous: it runs even while the loop is being cancelled
    report["finished"] = _utc()
    report["load_average_end"] = _loadavg()
    return report


def _s(value: float | None) -> str:
    return "-" if value is None else "not reached" if math.isinf(value) else f"{value:.1f} s"


def render(reports: dict[str, Any], console: Console) -> None:
    table = Table(title="sentinel (shipped defaults): seconds from the fault to /livez 503")
    for column in ("target", "shape", "n", "median", "worst", "all (s)", "goal", "met"):
        table.add_column(column, justify="right" if column in ("n", "median", "worst") else "left")
    for target, report in reports.items():
        for shape, figure in report["shapes"].items():
            goal = figure["goal_median_s"]
            met = {None: "-", True: "yes", False: "NO"}[figure["met"]]
            values = ", ".join("-" if v is None else f"{v:.1f}" for v in figure["values_s"])
            if figure["errors"]:
                values += f" ({len(figure['errors'])} broke)"
            table.add_row(
                target,
                shape,
                str(len(figure["values_s"])),
                _s(figure["median_s"]),
                _s(figure["worst_s"]),
                values,
                "reported" if goal is None else f"median <= {goal:.0f} s",
                met,
            )
    console.print(table)
    for target, report in reports.items():
        console.print(
            f"{target}: {report['started']} to {report['finished']}, load average "
            f"{report['load_average_start']} -> {report['load_average_end']} "
            f"({os.cpu_count()} cpus)" + (f"; {report['note']}" if "note" in report else "")
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.bench_detection")
    parser.add_argument("--rounds", type=int, help="rounds per shape (default 5 sim, 3 vLLM)")
    parser.add_argument("--target", choices=("sim", "vllm", "both"), default="sim")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write every round as JSON")
    parser.add_argument("--only", nargs="+", choices=SHAPES, metavar="SHAPE", help=str(SHAPES))
    args = parser.parse_args(argv)
    shapes = [s for s in SHAPES if not args.only or s in args.only]
    targets = ("sim", "vllm") if args.target == "both" else (args.target,)
    workdir = Path(tempfile.mkdtemp(prefix="sentinel-bench-detection-"))
    _say(f"daemon log, vLLM log and diagnostics in {workdir}")
    reports: dict[str, Any] = {}
    with (workdir / "sentinel.log").open("a", encoding="utf-8") as log:
        configure_logging("info", renderer="json", stream=log)
        for target in targets:
            rounds = args.rounds or ROUNDS[target]
            _say(f"{target}: {rounds} rounds of {', '.join(shapes)}; load {_loadavg()}")
            reports[target] = asyncio.run(bench_target(target, shapes, rounds, workdir))
    render(reports, Console(width=160))
    if args.json is not None:
        args.json.write_text(json.dumps(reports, indent=2) + "\n", encoding="utf-8")
    broke = any(f["errors"] for r in reports.values() for f in r["shapes"].values())
    return 1 if broke else 0


if __name__ == "__main__":
    sys.exit(main())
