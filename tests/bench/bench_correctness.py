"""Benchmark: the correctness canary on a real vLLM: false alarms under load, and detection.

Run: ``make bench-correctness`` or ``python -m tests.bench.bench_correctness [--quick]
[--minutes M] [--json PATH]``. Not part of ``make test`` (about 13 minutes).

A real vLLM (CPU build, the tiny random PaliGemma of the engine tier,
``--max-num-seqs 64`` so 64 requests share every batch, priority scheduling)
and sentinel in-process with the shipped defaults (correctness check every
10 s, its fingerprint in a temporary diagnostics folder):

1. ``load``: 64 concurrent streamed chat requests (64 tokens each, EOS
   ignored) for 10 minutes (``--quick``: 2), in a separate process. Every
   correctness check is compared with the fingerprint as it arrives:
   departures, how many early tokens agreed, and the largest log-probability
   move on tokens that agreed (the measurement the tolerance in
   ``sentinel.verdict.corrupt`` is chosen against). Budget: no corrupt
   verdict, no readiness sample red for corrupt output.
2. ``detect``: the weights corrupted in place through the chaos plugin
   (``corrupt_weights``: ``zero``, then ``nan``), one at a time on the idle
   server, restored in between: seconds to readiness red naming ``corrupt``.
   Budget: 60 s each.

Prints a table; exits 1 when a budget is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from chaos.vllm_engine import env as engine_env
from chaos.vllm_engine.server import VllmServer
from sentinel.canary.correctness import CORRECTNESS
from sentinel.canary.result import CanaryResult
from sentinel.config.loader import load_settings
from sentinel.daemon import Daemon
from sentinel.verdict.hangs.corrupt import compare

STREAMS = 64
DETECT_BUDGET = 60.0
SERVED = "tiny-paligemma"


class Checks:
    """Every correctness check, compared with the fingerprint in force when it arrived."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.total = 0
        self.departing = 0
        self.signs: dict[str, int] = {}
        self.min_agreed: int | None = None
        self.max_drift = 0.0
        self.failed = 0

    def __call__(self, result: CanaryResult) -> None:
        if result.kind != CORRECTNESS:
            return
        fingerprint = self.daemon.fingerprints.current()
        if not result.ok or not result.generations:
            self.failed += 1
            return
        if fingerprint is None:
            return
        self.total += 1
        departures = compare(fingerprint.generations, result.generations)
        self.departing += bool(departures)
        for d in departures:
            self.signs[d.sign] = self.signs.get(d.sign, 0) + 1
        for base, seen in zip(fingerprint.generations, result.generations, strict=False):
            pairs = zip(base.token_ids, seen.token_ids, strict=False)
            agreed = next(
                (i for i, (b, s) in enumerate(pairs) if b != s),
                min(len(base.token_ids), len(seen.token_ids)),
            )
            self.min_agreed = agreed if self.min_agreed is None else min(self.min_agreed, agreed)
            for i in range(agreed):
                drift = abs(base.logprobs[i] - seen.logprobs[i])
                if math.isfinite(drift):
                    self.max_drift = max(self.max_drift, drift)

    def summary(self) -> dict[str, Any]:
        return {
            "checks": self.total,
            "departing": self.departing,
            "signs": dict(self.signs),
            "failed": self.failed,
            "min_agreed_tokens": self.min_agreed,
            "max_logprob_drift": round(self.max_drift, 6),
        }


async def _red_for_corruption(client: httpx.AsyncClient, url: str) -> bool:
    response = await client.get(url + "/readyz")
    return response.status_code == 503 and "corrupt output" in response.json()["reason"]


async def _until(check: Any, deadline: float) -> float | None:
    start = time.monotonic()
    while time.monotonic() - start < deadline:
        if await check():
            return time.monotonic() - start
        await asyncio.sleep(0.25)  # polling with a deadline
    return None


async def run(server: VllmServer, minutes: float, workdir: Path) -> dict[str, Any]:
    settings = load_settings(
        None,
        env={},
        flags={
            "target": server.base_url,
            "listen": "127.0.0.1:0",
            "grpc_listen": "off",
            "diagnostics_dir": workdir / "diagnostics",
        },
    )
    daemon = Daemon(settings)
    checks = Checks(daemon)
    daemon.add_result_listener(checks)
    report: dict[str, Any] = {}
    async with daemon.serving() as running, httpx.AsyncClient(timeout=5) as client:
        assert running.http is not None
        url = running.http.url

        async def green() -> bool:
            return (await client.get(url + "/readyz")).status_code == 200

        async def taken() -> bool:
            return daemon.fingerprints.current() is not None

        if await _until(green, 180) is None or await _until(taken, 60) is None:
            raise SystemExit("sentinel never turned green with a fingerprint")
        load = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "chaos.load", "--target", server.base_url,
            "--concurrency", str(STREAMS), "--duration", str(minutes * 60),
            "--max-tokens", "64", "--stream", "--json",
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        red_samples = 0
        samples = 0
        try:
            while load.returncode is None:
                samples += 1
                red_samples += await _red_for_corruption(client, url)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(load.wait(), 1.0)  # sampling readiness each second
            raw, _ = await load.communicate()
            out = raw.decode()
        finally:
            if load.returncode is None:
                load.kill()
        metrics = (await client.get(url + "/metrics")).text
        verdicts = sum(
            float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("sentinel_hang_detections_total") and 'kind="corrupt"' in line
        )
        report["load"] = {
            "streams": STREAMS,
            "minutes": minutes,
            "corrupt_verdicts": verdicts,
            "readiness_samples": samples,
            "red_for_corruption": red_samples,
            **checks.summary(),
            "load": json.loads(out) if out.strip().startswith("{") else out[-500:],
        }
        report["detect"] = {}
        for mode in ("zero", "nan"):
            server.faults.set("corrupt_weights", mode=mode)
            seconds = await _until(lambda: _red_for_corruption(client, url), DETECT_BUDGET)
            server.faults.clear("corrupt_weights")
            report["detect"][mode] = None if seconds is None else round(seconds, 1)
            await _until(green, 120)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.bench_correctness")
    parser.add_argument("--quick", action="store_true", help="2 minutes of load, not 10")
    parser.add_argument("--minutes", type=float, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    minutes = args.minutes or (2.0 if args.quick else 10.0)
    env = engine_env.ensure_env()
    model = engine_env.ensure_model(env, "vision")
    workdir = Path(tempfile.mkdtemp(prefix="bench-correctness-"))
    server = VllmServer(
        env.python,
        model,
        served_model_name=SERVED,
        fault_dir=workdir / "faults",
        log_path=workdir / "vllm.log",
        extra_args=["--max-num-seqs", str(STREAMS)],
    )
    server.faults.clear_all()
    server.start()
    try:
        server.wait_ready(300)
        report = asyncio.run(run(server, minutes, workdir))
    finally:
        server.stop()
    text = json.dumps(report, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text)
    print(f"logs and fingerprints: {workdir}", file=sys.stderr)
    load = report["load"]
    missed = [
        *(["a corrupt verdict under load"] if load["corrupt_verdicts"] else []),
        *(["readiness red for corruption under load"] if load["red_for_corruption"] else []),
        *(f"corrupt_weights {m}: not red within {DETECT_BUDGET:g} s"
          for m, s in report["detect"].items() if s is None),
    ]  # fmt: skip
    for problem in missed:
        print(f"budget missed: {problem}", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
