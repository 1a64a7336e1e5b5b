"""The ``sentinel diagnose`` and ``sentinel doctor`` subcommands (arguments and entry points).

Owns only the command-line surface; the work is :func:`bundle.capture`,
:class:`store.IncidentStore` and :func:`checkup.run_doctor`. Settings (target,
diagnostics directory, retention, windows) come from the same sources as
``sentinel run``: ``--config``, ``SENTINEL_*`` variables, then these flags.

The parser is built for every command, ``sentinel run`` included, so the
argument functions need only the light modules (the defaults in ``cgroup``,
``procs`` and ``bundle``); the doctor and the store are imported by the
commands that use them.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys
import time
from pathlib import Path

from sentinel import __version__
from sentinel.cli_flags import add_sentinel_flag, one_line, positive_seconds, sentinel_url
from sentinel.config.loader import ConfigError, effective_config, load_settings, read_api_key
from sentinel.config.settings import Settings
from sentinel.diagnostics import cgroup, procs
from sentinel.diagnostics.bundle import DEFAULT_BUDGET_S, DiagnosticsContext, Trigger, capture
from sentinel.exitcode import ExitCode


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", help="vLLM base URL whose /metrics is read (SENTINEL_TARGET)")
    parser.add_argument("--config", type=Path, help="YAML settings file (as for sentinel run)")
    parser.add_argument(
        "--cgroup-root",
        type=Path,
        default=cgroup.DEFAULT_CGROUP_ROOT,
        help=f"cgroup v2 directory with cpu.max (default {cgroup.DEFAULT_CGROUP_ROOT})",
    )
    parser.add_argument(
        "--process-title",
        action="append",
        metavar="TITLE",
        help="process title prefix of a vLLM process (repeatable; default "
        + ", ".join(procs.DEFAULT_TITLES)
        + ")",
    )
    parser.add_argument(
        "--process-cmdline",
        action="append",
        metavar="TEXT",
        help="command-line substring of a vLLM process (repeatable; default "
        + ", ".join(repr(c) for c in procs.DEFAULT_CMDLINES)
        + ")",
    )


def add_diagnose_arguments(parser: argparse.ArgumentParser) -> None:
    _add_common(parser)
    parser.add_argument(
        "--diagnostics-dir", type=Path, help="where the bundle goes (SENTINEL_DIAGNOSTICS_DIR)"
    )
    parser.add_argument(
        "--budget",
        type=positive_seconds,
        default=DEFAULT_BUDGET_S,
        help=f"overall capture time limit in seconds (default {DEFAULT_BUDGET_S:g})",
    )
    parser.add_argument("--reason", default="requested with sentinel diagnose")


def add_doctor_arguments(parser: argparse.ArgumentParser) -> None:
    _add_common(parser)
    # A running sentinel's /status adds the canary kinds set aside for this server and
    # a server not answering.
    add_sentinel_flag(parser, optional=True)


def _settings(args: argparse.Namespace) -> Settings:
    flags = {
        "target": getattr(args, "target", None),
        "diagnostics_dir": getattr(args, "diagnostics_dir", None),
    }
    return load_settings(getattr(args, "config", None), os.environ, flags)


def _match(args: argparse.Namespace) -> procs.ProcessMatch:
    titles = tuple(args.process_title or procs.DEFAULT_TITLES)
    cmdlines = tuple(args.process_cmdline or procs.DEFAULT_CMDLINES)
    return procs.ProcessMatch(titles=titles, cmdlines=cmdlines)


def diagnose_main(args: argparse.Namespace) -> int:
    """Capture a bundle now (local processes, the target's /metrics), store it, print the path."""
    from sentinel.diagnostics.access import sample_target
    from sentinel.diagnostics.doctor import fetch_metrics
    from sentinel.diagnostics.store import IncidentStore, RetentionPolicy

    try:
        settings = _settings(args)
    except ConfigError as exc:
        print(f"sentinel diagnose: configuration error: {one_line(exc)}", file=sys.stderr)
        return ExitCode.USAGE

    async def run() -> int:
        (text, error), attributed = await asyncio.gather(
            fetch_metrics(settings.target), asyncio.to_thread(sample_target, settings.target)
        )
        scrapes = [(time.time(), text)] if text is not None else []
        match = _match(args)
        explicit = bool(args.process_title or args.process_cmdline)
        if attributed.api is not None and not explicit:
            # The target's own processes, not another server's on the same host.
            match = dataclasses.replace(match, roots=(attributed.api.pid,))
        context = DiagnosticsContext(
            trigger=Trigger("on-demand", args.reason),
            process_match=match,
            metrics_text=scrapes,
            config=effective_config(settings),
            version=__version__,
            budget_s=args.budget,
            cgroup_root=args.cgroup_root,
        )
        incident = await capture(context)
        store = IncidentStore(
            settings.diagnostics_dir,
            RetentionPolicy(settings.diagnostics_max_incidents, settings.diagnostics_max_bytes),
        )
        try:
            record = await store.write_async(incident, timeline=True)
        except OSError as exc:  # the directory given cannot be made or written
            where = settings.diagnostics_dir
            print(
                f"sentinel diagnose: cannot write the bundle under {where}: {exc}", file=sys.stderr
            )
            return ExitCode.USAGE
        if error is not None:
            print(f"note: {settings.target}/metrics not scraped: {error}", file=sys.stderr)
        print(incident.cause_line)
        print(f"captured in {incident.duration_s:.2f} s")
        print(f"{record.path}/summary.txt")
        return ExitCode.OK

    return asyncio.run(run())


def doctor_main(args: argparse.Namespace) -> int:
    """Run every check (``--sentinel``: a running sentinel's too), print the table, exit 0/1."""
    from sentinel.canary.catalog import CatalogError, apply_overrides, load_catalog
    from sentinel.diagnostics.checkup import run_doctor
    from sentinel.diagnostics.doctor import DoctorReport, ProbeTimings, render_report

    try:
        settings = _settings(args)
        specs = apply_overrides(load_catalog(settings.catalog).enabled(), settings.canaries)
        api_key = read_api_key(settings)  # the doctor sends one canary of each kind
    except (ConfigError, CatalogError) as exc:
        print(f"sentinel doctor: configuration error: {one_line(exc)}", file=sys.stderr)
        return ExitCode.USAGE

    async def run() -> DoctorReport:
        report = await run_doctor(
            settings.target,
            process_match=_match(args),
            cgroup_root=args.cgroup_root,
            timings=ProbeTimings.of(settings, specs),
            specs=specs,
            api_key=api_key,
        )
        sentinel = getattr(args, "sentinel", None)
        if sentinel is None:
            return report
        from sentinel.diagnostics.running import running_checks

        return DoctorReport((*report.checks, *await running_checks(sentinel_url(sentinel))))

    report = asyncio.run(run())
    render_report(report)
    return report.exit_code
