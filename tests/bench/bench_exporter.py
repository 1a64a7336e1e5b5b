"""What ``sentinel exporter`` costs: peak RSS under hostile targets, latency under fan-out.

1. Hostile: one ``python -m sentinel exporter`` (text module, 10 s timeout)
   probes every case of :mod:`tests.hostile_target` in turn (each
   ``/metrics`` misbehaviour, then a hung engine behind a live front), each
   probe sent with a 5 s scrape timeout, while the exporter's RSS is sampled
   every 20 ms with psutil. Prints each case's answer, time and RSS, and the
   peak.
2. Fan-out: ``--targets`` simulated vLLMs (one simulator each, on its own
   loopback address 127.0.0.N) and a fresh exporter; ``--probes`` probes
   (``--module``, default text) spread round-robin over the targets are all
   sent at once, each with a ``--scrape-timeout`` header (default 10 s).
   Prints the latency distribution, the maximum and how many were answered
   within their timeout.

Run with ``make bench-exporter``; figures go to docs/exporter.md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sentinel_sim.launch import SimProcess
from tests.bench.bench_hostile import RssSampler
from tests.exporter_process import ExporterProcess
from tests.hostile_target import HANG_PATH, METRICS_MODES, HostileProcess

MIB = 1024 * 1024
HOSTILE_SCRAPE_TIMEOUT = 5.0


def config(modules: dict[str, dict[str, object]]) -> dict[str, object]:
    return {"allow": {"cidrs": ["127.0.0.0/8"]}, "targets": {"max": 1000}, "modules": modules}


MODULES: dict[str, dict[str, object]] = {
    "text": {"kinds": ["text"], "timeout": 10},
    "full": {"kinds": ["text", "structured", "multimodal"], "timeout": 10},
}


def success(body: str) -> float | None:
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name == "probe_success":
                return sample.value
    return None


def hostile() -> None:
    print("== hostile targets: one exporter process, text module, 5 s scrape timeout")
    print(f"{'case':<12} {'status':>6} {'success':>7} {'seconds':>8} {'RSS MB':>7}")
    with ExporterProcess(config(MODULES)) as exporter:
        sampler = RssSampler(exporter.pid)
        sampler.start()
        time.sleep(0.2)
        idle = sampler.peak
        for case in (*METRICS_MODES, "hang"):
            with HostileProcess(metrics="ok" if case == "hang" else case) as target:
                if case == "hang":
                    httpx.post(target.base_url + HANG_PATH).raise_for_status()
                started = time.monotonic()
                response = httpx.get(
                    exporter.url + "/probe",
                    params={"target": target.base_url, "module": "text"},
                    headers={"X-Prometheus-Scrape-Timeout-Seconds": str(HOSTILE_SCRAPE_TIMEOUT)},
                    timeout=30,
                )
                took = time.monotonic() - started
                rss = sampler.process.memory_info().rss
                ok = success(response.text) if response.status_code == 200 else None
                print(
                    f"{case:<12} {response.status_code:>6} {ok!s:>7} {took:>8.2f} {rss / MIB:>7.1f}"
                )
        sampler.stop.set()
        sampler.join()
        print(f"idle RSS {idle / MIB:.1f} MB; peak RSS {sampler.peak / MIB:.1f} MB")


async def fan_out(url: str, targets: list[str], probes: int, module: str, wait: float) -> None:
    limits = httpx.Limits(max_connections=probes + 10, max_keepalive_connections=probes + 10)
    async with httpx.AsyncClient(limits=limits, timeout=wait) as http:

        async def one(index: int) -> tuple[float, int, float | None]:
            started = time.monotonic()
            try:
                response = await http.get(
                    url + "/probe",
                    params={"target": targets[index % len(targets)], "module": module},
                    headers={"X-Prometheus-Scrape-Timeout-Seconds": str(wait)},
                )
            except httpx.TimeoutException:
                return time.monotonic() - started, 0, None
            took = time.monotonic() - started
            value = success(response.text) if response.status_code == 200 else None
            return took, response.status_code, value

        started = time.monotonic()
        results = await asyncio.gather(*(one(i) for i in range(probes)))
        wall = time.monotonic() - started
    seconds = sorted(r[0] for r in results)
    within = sum(1 for took, status, _ in results if status == 200 and took <= wait)
    passed = sum(1 for _, _, value in results if value == 1.0)
    q = statistics.quantiles(seconds, n=100)
    print(
        f"{probes} probes, {len(targets)} targets, module {module}, "
        f"scrape timeout {wait:g} s, all sent at once ({wall:.2f} s wall)"
    )
    print(
        f"latency s: min {seconds[0]:.3f} p50 {q[49]:.3f} p90 {q[89]:.3f} "
        f"p99 {q[98]:.3f} max {seconds[-1]:.3f}"
    )
    print(f"answered within timeout: {within}/{probes}; probe_success 1: {passed}/{probes}")


def fan_out_bench(count: int, probes: int, module: str, timeout: float) -> None:
    print(f"== fan-out: starting {count} simulators on 127.0.0.2..127.0.0.{count + 1}")
    sims = [SimProcess(host=f"127.0.0.{i + 2}") for i in range(count)]
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda sim: sim.start(), sims))
        with ExporterProcess(config(MODULES)) as exporter:
            sampler = RssSampler(exporter.pid)
            sampler.start()
            targets = [sim.base_url for sim in sims]
            before = sampler.process.cpu_times()
            asyncio.run(fan_out(exporter.url, targets, probes, module, timeout))
            after = sampler.process.cpu_times()
            sampler.stop.set()
            sampler.join()
            cpu = (after.user + after.system) - (before.user + before.system)
            print(
                f"exporter CPU {cpu:.2f} s ({cpu / probes * 1000:.1f} ms a probe); "
                f"peak RSS during fan-out {sampler.peak / MIB:.1f} MB"
            )
    finally:
        for sim in sims:
            sim.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--targets", type=int, default=50)
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--module", choices=sorted(MODULES), default="text")
    parser.add_argument("--scrape-timeout", type=float, default=10.0)
    parser.add_argument("--skip-hostile", action="store_true")
    args = parser.parse_args()
    if not args.skip_hostile:
        hostile()
    fan_out_bench(args.targets, args.probes, args.module, args.scrape_timeout)


if __name__ == "__main__":
    main()
