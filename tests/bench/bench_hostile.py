"""What a hostile target costs sentinel: peak RSS and ``/livez`` p99, per case.

For every case of :mod:`tests.hostile_target` a fresh ``python -m sentinel
run`` (shipped defaults, text canary only, diagnostics off) is pointed at a
fresh hostile target; after a warm-up long enough for several scrapes and
polls to hit the misbehaviour, 200 sequential ``/livez`` GETs are timed while
sentinel's RSS is sampled with psutil. Goal: peak RSS <= 150 MB and p99 <=
10 ms in every case. Run with ``make bench-hostile``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil
import yaml

from chaos.ports import free_port
from tests.hostile_target import HostileProcess

RSS_GOAL_MB = 150.0
P99_GOAL_MS = 10.0
GETS = 200

CASES = {
    "baseline": ("ok", "ok"),
    "metrics endless 20 MB/s": ("endless", "ok"),
    "metrics 500 MB": ("huge", "ok"),
    "metrics 2M series": ("series", "ok"),
    "metrics one 50 MB line": ("longline", "ok"),
    "metrics 1 byte/s": ("trickle", "ok"),
    "metrics corrupt gzip": ("badgzip", "ok"),
    "metrics invalid UTF-8": ("badutf8", "ok"),
    "health endless 20 MB/s": ("ok", "endless"),
    "health 500 MB": ("ok", "huge"),
    "health 1 byte/s": ("ok", "trickle"),
    "health 404": ("ok", "404"),
    "health 302": ("ok", "302"),
    "health 401": ("ok", "401"),
}


class RssSampler(threading.Thread):
    """Peak resident set size of one process, sampled every 20 ms."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.process = psutil.Process(pid)
        self.peak = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.peak = max(self.peak, self.process.memory_info().rss)
            except psutil.Error:
                return
            self.stop.wait(0.02)


def _wait_listening(url: str, deadline: float) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            if httpx.get(url, timeout=1.0).status_code in (200, 503):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"sentinel not listening at {url} within {deadline:g}s")


def run_case(metrics: str, health: str, warmup: float, config: Path) -> tuple[float, float, int]:
    """(peak RSS MB, /livez p99 ms, /livez failures) for one case."""
    port, grpc_port = free_port(), free_port()
    with (
        HostileProcess(metrics=metrics, health=health) as target,
        tempfile.TemporaryDirectory() as tmp,
    ):
        sentinel = subprocess.Popen(
            [
                *(sys.executable, "-m", "sentinel", "run", "--target", target.base_url),
                *("--listen", f"127.0.0.1:{port}", "--grpc-listen", f"127.0.0.1:{grpc_port}"),
                *("--config", str(config), "--diagnostics-dir", tmp, "--log-level", "error"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        sampler = RssSampler(sentinel.pid)
        sampler.start()
        try:
            url = f"http://127.0.0.1:{port}/livez"
            _wait_listening(url, 30)
            time.sleep(warmup)  # a benchmark's soak: several scrapes and polls hit the case
            latencies: list[float] = []
            failures = 0
            with httpx.Client(timeout=2.0) as client:
                for _ in range(GETS):
                    started = time.perf_counter()
                    try:
                        ok = client.get(url).status_code == 200
                    except httpx.HTTPError:
                        ok = False
                    latencies.append(time.perf_counter() - started)
                    failures += not ok
            if sentinel.poll() is not None:
                raise RuntimeError(f"sentinel exited with {sentinel.returncode}")
        finally:
            sampler.stop.set()
            sentinel.terminate()
            try:
                sentinel.wait(timeout=15)
            except subprocess.TimeoutExpired:
                sentinel.kill()
                sentinel.wait()
            sampler.join()
    p99 = statistics.quantiles(latencies, n=100)[98] * 1000
    return sampler.peak / 1e6, p99, failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds before the GETs")
    parser.add_argument("--only", help="run only cases whose name contains this")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "sentinel.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "diagnostics": False,
                    "canaries": {
                        "structured": {"enabled": False},
                        "multimodal": {"enabled": False},
                    },
                }
            )
        )
        print(f"{'case':28} {'peak RSS MB':>12} {'/livez p99 ms':>14} {'fails':>6}  goal")
        worst_ok = True
        for name, (metrics, health) in CASES.items():
            if args.only and args.only not in name:
                continue
            rss, p99, fails = run_case(metrics, health, args.warmup, config)
            ok = rss <= RSS_GOAL_MB and p99 <= P99_GOAL_MS and fails == 0
            worst_ok &= ok
            print(f"{name:28} {rss:12.1f} {p99:14.2f} {fails:6d}  {'met' if ok else 'MISSED'}")
            sys.stdout.flush()
    print(
        f"goal (RSS <= {RSS_GOAL_MB:g} MB, p99 <= {P99_GOAL_MS:g} ms): "
        f"{'met in every case' if worst_ok else 'missed'}"
    )


if __name__ == "__main__":
    main()
