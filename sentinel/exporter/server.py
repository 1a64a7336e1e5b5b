"""The exporter's HTTP server and the ``sentinel exporter`` command.

Routes: ``/probe`` (one probe per request, see :mod:`sentinel.exporter.prober`),
``/metrics`` (the exporter's own registry), ``/-/healthy`` and ``/`` (an
index). The scrape timeout Prometheus sends in
``X-Prometheus-Scrape-Timeout-Seconds``, less :data:`TIMEOUT_OFFSET`, caps
the module's timeout, so the answer is back before Prometheus gives up.
Concurrent probes are bounded (:data:`MAX_IN_FLIGHT`); past it the answer
is 503 at once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import signal
import sys
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from sentinel.canary.catalog import Catalog
from sentinel.cli_flags import add_catalog_flag
from sentinel.config.loader import ConfigError
from sentinel.config.settings import split_host_port
from sentinel.exitcode import ExitCode
from sentinel.exporter.allowlist import Allowlist
from sentinel.exporter.config import (
    ExporterConfig,
    ModuleRuntime,
    load_config,
    prepare_modules,
    read_catalog,
)
from sentinel.exporter.exposition import render
from sentinel.exporter.own_metrics import ExporterMetrics
from sentinel.exporter.prober import Prober, Refusal
from sentinel.exporter.state import TargetStore
from sentinel.exporter.target import Resolver, TargetError, parse_target, system_resolver

log = structlog.get_logger("sentinel.exporter")

TIMEOUT_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"
TIMEOUT_OFFSET = 0.5  # seconds kept for the answer to travel back, as blackbox_exporter keeps
MAX_IN_FLIGHT = 512
SHUTDOWN_TIMEOUT = 5.0
TEXT = "text/plain"

INDEX = """sentinel exporter

/probe?target=HOST:PORT&module=NAME   probe one inference server (modules: {modules})
/metrics                              the exporter's own metrics
/-/healthy                            200 while the exporter runs
"""


@dataclass(slots=True)
class Exporter:
    """Everything the handlers read: modules, the prober and the exporter's own metrics."""

    modules: Mapping[str, ModuleRuntime]
    prober: Prober
    metrics: ExporterMetrics
    in_flight: int = 0

    @classmethod
    def build(
        cls,
        config: ExporterConfig,
        catalog: Catalog,
        *,
        resolver: Resolver = system_resolver,
    ) -> Exporter:
        modules = prepare_modules(config, catalog)
        store = TargetStore(config.targets.max, config.targets.idle_seconds)
        allowlist = Allowlist(config.allow.hosts, config.allow.cidrs)
        prober = Prober(catalog, allowlist, store, resolver=resolver)
        return cls(modules, prober, ExporterMetrics(store, modules))


EXPORTER_KEY = web.AppKey("sentinel_exporter", Exporter)


def budget_of(module: ModuleRuntime, header: str | None) -> float:
    """The probe's seconds: the module's timeout, capped by the scrape timeout less the offset.

    ValueError when the header is not a positive number.
    """
    if header is None:
        return module.timeout
    scrape = float(header)
    if not math.isfinite(scrape) or scrape <= 0:
        raise ValueError(f"{TIMEOUT_HEADER} must be a positive number, got {header!r}")
    if scrape > TIMEOUT_OFFSET * 2:
        scrape -= TIMEOUT_OFFSET
    return min(module.timeout, scrape)


async def probe_handler(request: web.Request) -> web.Response:
    exporter = request.app[EXPORTER_KEY]
    started = time.monotonic()
    name = request.query.get("module")
    module = exporter.modules.get(name) if name else None
    if module is None:
        exporter.metrics.count(None, "bad_request")
        known = ", ".join(sorted(exporter.modules))
        problem = "module parameter is missing" if not name else f"unknown module {name!r}"
        return web.Response(status=400, text=f"{problem} (modules: {known})\n")
    try:
        target = parse_target(request.query.get("target", ""))
        budget = budget_of(module, request.headers.get(TIMEOUT_HEADER))
    except (TargetError, ValueError) as exc:
        exporter.metrics.count(module.name, "bad_request")
        return web.Response(status=400, text=f"{exc}\n")
    if exporter.in_flight >= MAX_IN_FLIGHT:
        exporter.metrics.count(module.name, "overloaded")
        return web.Response(status=503, text=f"more than {MAX_IN_FLIGHT} probes in flight\n")
    exporter.in_flight += 1
    try:
        outcome = await exporter.prober.probe(target, module, budget)
    finally:
        exporter.in_flight -= 1
    if isinstance(outcome, Refusal):
        exporter.metrics.count(module.name, "refused")
        log.warning("probe_refused", target=target.base_url, reason=outcome.reason)
        return web.Response(status=403, text=f"refused: {outcome.reason}\n")
    exporter.metrics.count(module.name, "success" if outcome.success else "failure")
    body = render(outcome, time.monotonic() - started)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def metrics_handler(request: web.Request) -> web.Response:
    body = generate_latest(request.app[EXPORTER_KEY].metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def healthy_handler(request: web.Request) -> web.Response:
    return web.Response(text="Healthy\n", content_type=TEXT)


async def index_handler(request: web.Request) -> web.Response:
    modules = ", ".join(sorted(request.app[EXPORTER_KEY].modules))
    return web.Response(text=INDEX.format(modules=modules), content_type=TEXT)


def build_app(exporter: Exporter) -> web.Application:
    app = web.Application()
    app[EXPORTER_KEY] = exporter
    app.router.add_get("/probe", probe_handler)
    app.router.add_get("/metrics", metrics_handler)
    app.router.add_get("/-/healthy", healthy_handler)
    app.router.add_get("/", index_handler)
    return app


@contextlib.asynccontextmanager
async def serving(exporter: Exporter, host: str, port: int) -> AsyncIterator[str]:
    """The exporter listening on ``host:port`` (0: any free port); yields its base URL."""
    runner = web.AppRunner(
        build_app(exporter), handle_signals=False, shutdown_timeout=SHUTDOWN_TIMEOUT
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        server = site._server
        assert server is not None
        bound = server.sockets[0].getsockname()  # type: ignore[attr-defined]
        shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        yield f"http://{shown}:{bound[1]}"
    finally:
        await runner.cleanup()


async def serve_until_signal(exporter: Exporter, host: str, port: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with serving(exporter, host, port) as url:
        log.info("exporter_listening", url=url, modules=sorted(exporter.modules))
        await stop.wait()
        log.info("exporter_stopping")


def add_exporter_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, required=True, help="exporter YAML file")
    parser.add_argument("--listen", help="HTTP HOST:PORT (default: the file's, else 0.0.0.0:9116)")
    parser.add_argument(
        "--check-config", action="store_true", help="validate the file and its modules, then exit"
    )
    add_catalog_flag(parser)
    parser.add_argument("--log-format", choices=["auto", "json", "console"], default="auto")
    parser.add_argument(
        "--log-level", choices=["debug", "info", "warning", "error"], default="info"
    )


def exporter_main(args: argparse.Namespace) -> int:
    """Run the exporter until SIGTERM or SIGINT; a bad configuration raises ConfigError."""
    from sentinel.telemetry.logging import configure_logging

    config = load_config(args.config)
    try:
        host, port = split_host_port(args.listen or config.listen)
    except ValueError as exc:
        raise ConfigError(f"--listen: {exc}") from None
    exporter = Exporter.build(config, read_catalog(args.catalog))
    if args.check_config:
        names = ", ".join(f"{m.name} ({'+'.join(m.kinds)})" for m in exporter.modules.values())
        print(f"{args.config}: ok; listen {host}:{port}; modules: {names}")
        return ExitCode.OK
    configure_logging(args.log_level, renderer=args.log_format)
    try:
        asyncio.run(serve_until_signal(exporter, host, port))
    except OSError as exc:
        print(f"sentinel exporter: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return ExitCode.UNHEALTHY
    return ExitCode.OK
