"""Benchmark: how long a diagnostics capture takes, and what it costs ``/livez``.

Run: ``.venv/bin/python -m tests.bench.bench_diagnostics``. It starts three
processes shaped like vLLM's (API server, EngineCore, a stopped worker), an
aiohttp app serving a trivial ``/livez`` in the same event loop as the
capture, and a load generator in a separate process sending 200 requests per
second (open loop, so a stalled loop shows as latency, not as fewer requests).
It prints the capture durations and ``/livez`` latency percentiles without and
during captures. The daemon's own endpoints are measured elsewhere.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid

from aiohttp import ClientSession, ClientTimeout, web

from sentinel.diagnostics.bundle import DiagnosticsContext, Trigger, capture
from sentinel.diagnostics.procs import ProcessMatch

RATE = 200.0
CHILD = (
    "import sys, setproctitle, threading\n"
    "if sys.argv[1]: setproctitle.setproctitle(sys.argv[1])\n"
    "threading.Event().wait()\n"
)


async def load(url: str, rate: float, duration: float) -> None:
    """Open-loop load: request i is sent at start + i / rate; prints (sent_at, latency) pairs."""
    results: list[tuple[float, float]] = []
    async with ClientSession(timeout=ClientTimeout(total=5)) as http:

        async def one(at: float) -> None:
            start = time.monotonic()
            async with http.get(url) as response:
                await response.read()
            results.append((at, time.monotonic() - start))

        start = time.monotonic()
        tasks = []
        for i in range(int(rate * duration)):
            at = start + i / rate
            delay = at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(time.time())))
        await asyncio.gather(*tasks, return_exceptions=True)
    print(json.dumps(results))


def percentiles(latencies: list[float]) -> str:
    if len(latencies) < 2:
        return "n/a"
    q = statistics.quantiles(latencies, n=100)
    return (
        f"n={len(latencies)} p50={q[49] * 1000:.2f} ms p99={q[98] * 1000:.2f} ms "
        f"max={max(latencies) * 1000:.2f} ms"
    )


def spawn_children(tag: str, titles: tuple[str, str]) -> list[subprocess.Popen[bytes]]:
    return [
        subprocess.Popen([sys.executable, "-c", CHILD, "", "vllm", "serve", tag]),
        subprocess.Popen([sys.executable, "-c", CHILD, titles[0]]),
        subprocess.Popen([sys.executable, "-c", CHILD, titles[1]]),
    ]


async def bench(
    captures: int, tag: str, titles: tuple[str, str], children: list[subprocess.Popen[bytes]]
) -> None:
    app = web.Application()

    async def livez(_request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "reason": "no hang confirmed"})

    app.router.add_get("/livez", livez)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        await asyncio.sleep(1.0)  # let the children set their titles
        os.kill(children[2].pid, signal.SIGSTOP)
        context = DiagnosticsContext(
            trigger=Trigger("bench", "benchmark"),
            process_match=ProcessMatch(titles=titles, cmdlines=(f"vllm serve {tag}",)),
            metrics_text=[(time.time(), "vllm:generation_tokens_total 1.0\n")],
        )
        baseline_s = 2.0
        duration = baseline_s + captures * 2.5 + 1.0
        loader = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.bench.bench_diagnostics",
            "--load",
            f"http://127.0.0.1:{port}/livez",
            str(RATE),
            str(duration),
            stdout=asyncio.subprocess.PIPE,
        )
        await asyncio.sleep(baseline_s)
        windows: list[tuple[float, float]] = []
        durations: list[float] = []
        for _ in range(captures):
            began = time.time()
            incident = await capture(context)
            windows.append((began, time.time()))
            durations.append(incident.duration_s)
            print(f"capture: {incident.duration_s:.2f} s  cause: {incident.cause_line}")
            await asyncio.sleep(0.5)
        stdout, _ = await loader.communicate()
    finally:
        await runner.cleanup()

    results = json.loads(stdout)
    during = [lat for at, lat in results if any(a <= at <= b for a, b in windows)]
    before = [lat for at, lat in results if at < windows[0][0]]
    print(f"capture duration: max {max(durations):.2f} s, mean {statistics.mean(durations):.2f} s")
    print(f"/livez at {RATE:.0f} req/s, no capture:     {percentiles(before)}")
    print(f"/livez at {RATE:.0f} req/s, during capture: {percentiles(during)}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--captures", type=int, default=3)
    parser.add_argument("--load", nargs=3, metavar=("URL", "RATE", "SECONDS"))
    args = parser.parse_args()
    if args.load:
        url, rate, seconds = args.load
        asyncio.run(load(url, float(rate), float(seconds)))
    else:
        tag = uuid.uuid4().hex[:8]
        titles = (f"VLLM::EngineCore_{tag}", f"VLLM::Worker_{tag}")
        children = spawn_children(tag, titles)
        try:
            asyncio.run(bench(args.captures, tag, titles, children))
        finally:
            for child in children:
                os.kill(child.pid, signal.SIGCONT)
                child.kill()
                child.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
