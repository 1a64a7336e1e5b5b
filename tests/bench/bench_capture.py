"""A diagnostics bundle captured while the target serves a 60 MB ``/metrics``.

A fresh ``python -m sentinel run`` (text canary only, diagnostics on) watches
the hostile target in its ``large`` mode: a valid exposition of 60 MB. Once
sentinel is green the target's canaries hang (``POST /hostile/hang``), which
opens an incident and captures a bundle. A client thread sends ``/livez`` GETs
back to back over one keep-alive connection the whole time; the ones sent
between ``incident_opened`` and ``diagnostics_written`` (sentinel's own log)
are the capture's. Printed per case: the incident folder's size (bundle, summary, index) against
the bundle cap, the
capture's duration, ``/livez`` p50/p99/max during it, and peak RSS.

Two cases: the shipped scrape caps (the 60 MB answer is abandoned at
``metrics_max_bytes``, 8 MiB) and caps raised so every scrape reads it whole.
Goal (issue 11): the bundle under ``diagnostics_bundle_max_bytes`` and
``/livez`` p99 at most 10 ms during the capture. Run: ``make bench-hostile``
(after the hostile cases) or ``python -m tests.bench.bench_capture``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

from chaos.ports import free_port
from tests.bench.bench_hostile import RssSampler
from tests.hostile_target import HANG_PATH, HostileProcess

P99_GOAL_MS = 10.0
BUNDLE_CAP = 32 * 1024 * 1024  # sentinel's shipped diagnostics_bundle_max_bytes
GREEN_DEADLINE_S = 60.0
CAPTURE_DEADLINE_S = 90.0

CASES: dict[str, dict[str, Any]] = {
    "capture, 60 MB /metrics, shipped caps": {},
    "capture, 60 MB /metrics read whole": {
        "metrics_max_bytes": 64 * 1024 * 1024,
        "metrics_max_lines": 2_000_000,
    },
}


@dataclass
class CaptureFigures:
    bundle_bytes: int
    capture_s: float
    gets: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    peak_rss_mb: float

    @property
    def met(self) -> bool:
        return self.bundle_bytes <= BUNDLE_CAP and self.p99_ms <= P99_GOAL_MS


class LivezLoop(threading.Thread):
    """Back-to-back ``/livez`` GETs: (monotonic send time, latency s, status)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.records: list[tuple[float, float, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=2.0) as client:
            while not self.stop.is_set():
                sent = time.monotonic()
                try:
                    status = client.get(self.url).status_code
                except httpx.HTTPError:
                    status = 0
                self.records.append((sent, time.monotonic() - sent, status))


def _events(log: Path) -> dict[str, float]:
    """Monotonic time of the first log event of each name."""
    offset = time.time() - time.monotonic()
    found: dict[str, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
            stamp = datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00"))
        except (ValueError, KeyError, TypeError):
            continue
        found.setdefault(str(event.get("event")), stamp.timestamp() - offset)
    return found


def _poll(check: Any, deadline_s: float, what: str) -> Any:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise RuntimeError(f"{what} not seen within {deadline_s:g} s")


def _green(url: str) -> bool:
    try:
        return all(
            httpx.get(url + p, timeout=1.0).status_code == 200 for p in ("/startupz", "/livez")
        )
    except httpx.HTTPError:
        return False


def run_capture(overrides: dict[str, Any]) -> CaptureFigures:
    port = free_port()
    with HostileProcess(metrics="large") as target, tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        config = work / "sentinel.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "canaries": {
                        "structured": {"enabled": False},
                        "multimodal": {"enabled": False},
                    },
                    **overrides,
                }
            )
        )
        log = work / "sentinel.log"
        with open(log, "wb") as out:
            sentinel = subprocess.Popen(
                [
                    *(sys.executable, "-m", "sentinel", "run", "--target", target.base_url),
                    *("--listen", f"127.0.0.1:{port}", "--grpc-listen", "off"),
                    *("--config", str(config), "--diagnostics-dir", str(work / "diagnostics")),
                    *("--log-format", "json"),
                ],
                stdout=out,
                stderr=out,
                env={k: v for k, v in os.environ.items() if not k.startswith("SENTINEL_")},
            )
        sampler = RssSampler(sentinel.pid)
        sampler.start()
        base = f"http://127.0.0.1:{port}"
        loop = LivezLoop(base + "/livez")
        try:
            _poll(lambda: _green(base), GREEN_DEADLINE_S, "sentinel green")
            loop.start()
            httpx.post(target.base_url + HANG_PATH, timeout=5.0)
            events = _poll(
                lambda: (e := _events(log)) and "diagnostics_written" in e and e,
                CAPTURE_DEADLINE_S,
                "diagnostics_written in the log",
            )
            # Written (and renamed into place) before the event is logged.
            bundle_bytes = sum(
                f.stat().st_size for f in (work / "diagnostics").glob("*/*") if f.is_file()
            )
            if sentinel.poll() is not None:
                raise RuntimeError(f"sentinel exited with {sentinel.returncode}")
        finally:
            loop.stop.set()
            sampler.stop.set()
            sentinel.terminate()
            try:
                sentinel.wait(timeout=15)
            except subprocess.TimeoutExpired:
                sentinel.kill()
                sentinel.wait()
            if loop.is_alive():
                loop.join(5.0)
            sampler.join()
        opened, written = events["incident_opened"], events["diagnostics_written"]
        during = [lat for sent, lat, _ in loop.records if opened <= sent <= written]
        if len(during) < 10:
            raise RuntimeError(f"only {len(during)} /livez GETs fell inside the capture")
        during_ms = [x * 1000 for x in during]
        return CaptureFigures(
            bundle_bytes=bundle_bytes,
            capture_s=written - opened,
            gets=len(during),
            p50_ms=statistics.median(during_ms),
            p99_ms=statistics.quantiles(during_ms, n=100)[98],
            max_ms=max(during_ms),
            peak_rss_mb=sampler.peak / 1e6,
        )


def run_all(only: str | None = None) -> bool:
    print(
        f"{'case':40} {'bundle MB':>9} {'capture s':>9} {'GETs':>5} "
        f"{'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'RSS MB':>7}  goal"
    )
    all_met = True
    for name, overrides in CASES.items():
        if only and only not in name:
            continue
        f = run_capture(overrides)
        all_met &= f.met
        print(
            f"{name:40} {f.bundle_bytes / 1e6:9.2f} {f.capture_s:9.2f} {f.gets:5d} "
            f"{f.p50_ms:7.2f} {f.p99_ms:7.2f} {f.max_ms:7.2f} {f.peak_rss_mb:7.1f}  "
            f"{'met' if f.met else 'MISSED'}"
        )
        sys.stdout.flush()
    print(
        f"goal (bundle <= {BUNDLE_CAP / 1e6:.1f} MB, /livez p99 <= {P99_GOAL_MS:g} ms "
        f"during the capture): {'met in every case' if all_met else 'missed'}"
    )
    return all_met


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", help="run only cases whose name contains this")
    args = parser.parse_args()
    sys.exit(0 if run_all(args.only) else 1)


if __name__ == "__main__":
    main()
