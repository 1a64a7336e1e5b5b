"""The ``sentinel`` command: run, status, probe, demo, check-config, diagnose, doctor, ....

Exit codes: 0 success (healthy), 1 unhealthy or a runtime failure, 2 a usage
or configuration error (argparse's own convention for bad usage).

:func:`main` runs :func:`~sentinel.boot.boot` before anything else, so this
module imports only the standard library and leaf modules at import time; the
rest (settings, HTTP, logging) is imported where it is used, after the boot.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sentinel import __version__
from sentinel.boot import boot
from sentinel.exitcode import ExitCode

if TYPE_CHECKING:
    from sentinel.config.settings import Settings


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    from sentinel.cli_flags import add_catalog_flag
    from sentinel.config.settings import Settings

    defaults = Settings()
    parser.add_argument("--target", help=f"inference server base URL (default {defaults.target})")
    parser.add_argument("--listen", help=f"HTTP HOST:PORT (default {defaults.listen})")
    parser.add_argument(
        "--grpc-listen", help=f"gRPC health HOST:PORT (default {defaults.grpc_listen})"
    )
    add_catalog_flag(parser)
    parser.add_argument("--config", type=Path, help="YAML settings file")
    parser.add_argument(
        "--enforce",
        type=_bool,
        help="true: a confirmed hang fails liveness; false: observe-only (default true)",
    )
    parser.add_argument("--api-key-file", type=Path, help="file holding the target's API key")
    parser.add_argument(
        "--maintenance-token-file",
        type=Path,
        help="file holding the bearer token of /maintenance (default: the hook is off)",
    )
    parser.add_argument(
        "--diagnostics-dir",
        type=Path,
        help=f"incident bundles (default {defaults.diagnostics_dir})",
    )
    parser.add_argument("--model", help="model name to address (default: from /v1/models)")
    parser.add_argument("--log-format", choices=["auto", "json", "console"])
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    _add_setting_flags(parser.add_argument_group("every other setting (docs/configuration.md)"))


# The settings whose flags are written out above, with their own help; every
# other setting gets a flag generated from its declaration (_add_setting_flags).
RUN_FLAGS = (
    "target",
    "listen",
    "grpc_listen",
    "catalog",
    "enforce",
    "api_key_file",
    "maintenance_token_file",
    "diagnostics_dir",
    "model",
    "log_format",
    "log_level",
)


def _add_setting_flags(group: argparse._ArgumentGroup) -> None:
    """A flag for each remaining setting: its help, unit and span, from its one declaration.

    Values are passed on as text, as an environment variable's are, so the
    settings model checks them and its error names the flag; a nested
    section (``--canaries``, ``--restart-budget``) takes one YAML mapping.
    """
    from sentinel.config.loader import STRUCTURED
    from sentinel.config.settings import Settings
    from sentinel.knob import help_of, span_of

    for name, field in Settings.model_fields.items():
        if name in RUN_FLAGS:
            continue
        span = span_of(Settings, name)
        default = field.get_default(call_default_factory=True)
        shown = getattr(default, "value", default)
        words = [_in_help(help_of(Settings, name), field.annotation).replace("%", "%%")]
        if span is not None:
            words.append(f"({span})")
        if name not in STRUCTURED and shown is not None:
            words.append(f"(default {str(shown).lower() if isinstance(shown, bool) else shown})")
        group.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            type=_bool if field.annotation is bool else str,
            metavar="YAML" if name in STRUCTURED else name.split("_")[-1].upper(),
            help=" ".join(words),
        )


def _in_help(text: str, annotation: Any) -> str:
    """A nested section's help names its keys: docs/configuration.md's "see below" is not here."""
    import typing

    from pydantic import BaseModel

    models = [
        kind
        for kind in (annotation, *typing.get_args(annotation))
        if isinstance(kind, type) and issubclass(kind, BaseModel)
    ]
    if not models:
        return text
    keys = ", ".join(models[0].model_fields)
    return text.replace("see below", f"keys: {keys}; docs/configuration.md")


def run_flags(args: argparse.Namespace) -> dict[str, Any]:
    from sentinel.config.settings import Settings

    return {name: getattr(args, name, None) for name in Settings.model_fields}


def settings_from_args(args: argparse.Namespace) -> Settings:
    from sentinel.config.loader import load_settings

    return load_settings(getattr(args, "config", None), os.environ, run_flags(args))


def build_parser(*, only_run: bool = False) -> argparse.ArgumentParser:
    """Every command's parser; ``only_run``: the daemon's alone, so a sidecar keeps none of
    the other commands' modules resident."""
    from sentinel.cli_flags import OneLineParser
    from sentinel.config.loader import env_name

    parser = OneLineParser(
        prog="sentinel",
        description="Health-checking sidecar for LLM inference servers: "
        "is this server still producing tokens?",
        epilog=f"Every run option is also read from {env_name('<option>')} "
        "environment variables (e.g. SENTINEL_TARGET, SENTINEL_API_KEY_FILE).",
    )
    parser.add_argument("--version", action="version", version=f"sentinel {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="the sidecar daemon")
    _add_run_arguments(run)
    if only_run:
        return parser
    from sentinel.commands.status import add_status_arguments

    add_status_arguments(sub.add_parser("status", help="a running sidecar's verdict and why"))
    from sentinel.commands.probe import add_probe_arguments

    probe = sub.add_parser("probe", help="one-shot canary probe of OpenAI-compatible endpoints")
    add_probe_arguments(probe)

    demo = sub.add_parser("demo", help="simulated vLLM + sentinel + a silent hang, with a timeline")
    demo.add_argument(
        "--fast",
        action="store_true",
        help="shortened timings (the default uses the shipped defaults)",
    )
    demo.add_argument("--diagnostics-dir", type=Path, help="where the incident bundle goes")

    from sentinel.commands.check_config import add_check_config_arguments

    add_check_config_arguments(
        sub.add_parser(
            "check-config", help="validate a settings file and print what it makes effective"
        )
    )

    from sentinel.diagnostics.commands import add_diagnose_arguments, add_doctor_arguments

    add_diagnose_arguments(sub.add_parser("diagnose", help="capture a diagnostics bundle now"))
    add_doctor_arguments(sub.add_parser("doctor", help="check the pod's setup for pitfalls"))
    from sentinel.maintenance.cli import add_maintenance_arguments

    add_maintenance_arguments(
        sub.add_parser("maintenance", help="set, clear or show a running sentinel's maintenance")
    )
    from sentinel.fingerprint.cli import add_fingerprint_arguments

    add_fingerprint_arguments(
        sub.add_parser("fingerprint", help="show or re-take a running sentinel's fingerprint")
    )
    from sentinel.exporter.server import add_exporter_arguments

    add_exporter_arguments(
        sub.add_parser("exporter", help="probe many endpoints on demand (/probe?target=&module=)")
    )
    from sentinel.inject.arguments import add_inject_arguments

    add_inject_arguments(
        sub.add_parser(
            "inject", help="add sentinel to every vLLM pod of a YAML stream (or --check)"
        )
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    boot()
    from sentinel.config.loader import ConfigError

    given = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(only_run=given[:1] == ["run"]).parse_args(given)
    command: str = args.command
    try:
        if command == "run":
            return _run(args)
        if command == "status":
            from sentinel.commands.status import status_main

            return status_main(args)
        if command == "probe":
            from sentinel.commands.probe import probe_main

            return probe_main(args)
        if command == "demo":
            from sentinel.commands.demo import demo_main

            return demo_main(args)
        if command == "check-config":
            from sentinel.commands.check_config import check_config

            return check_config(args.file, with_env=args.env)
        if command == "diagnose":
            from sentinel.diagnostics.commands import diagnose_main

            return diagnose_main(args)
        if command == "doctor":
            from sentinel.diagnostics.commands import doctor_main

            return doctor_main(args)
        if command == "maintenance":
            from sentinel.maintenance.cli import maintenance_main

            return maintenance_main(args)
        if command == "fingerprint":
            from sentinel.fingerprint.cli import fingerprint_main

            return fingerprint_main(args)
        if command == "exporter":
            from sentinel.exporter.server import exporter_main

            return exporter_main(args)
        if command == "inject":
            from sentinel.inject.command import inject_main

            return inject_main(args)
    except ConfigError as exc:
        # One line: a kubelet's "last state" and most log viewers show only the last line.
        problem = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        print(f"sentinel {command}: configuration error: {problem}", file=sys.stderr)
        return ExitCode.USAGE
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    raise AssertionError(f"unhandled command {command}")


def _configure_logging(settings: Settings) -> None:
    from sentinel.telemetry.logging import configure_logging
    from sentinel.telemetry.redact import structlog_processor

    configure_logging(
        settings.log_level, renderer=settings.log_format, redactors=[structlog_processor]
    )


def _run(args: argparse.Namespace) -> int:
    from sentinel.canary.catalog import CatalogError
    from sentinel.commands.listeners import ListenAddresses
    from sentinel.config.loader import ConfigError

    settings = settings_from_args(args)
    listeners = ListenAddresses(settings, run_flags(args), getattr(args, "config", None))
    # One line, before anything starts or logs: a kubelet's "last state" shows the last line.
    unbindable = listeners.check()
    if unbindable is not None:
        print(unbindable, file=sys.stderr)
        return ExitCode.UNHEALTHY
    _configure_logging(settings)
    try:
        from sentinel.daemon import Daemon

        daemon = Daemon(settings)
    except CatalogError as exc:  # the catalog, or a config override naming no canary in it
        raise ConfigError(str(exc)) from None
    _bound_memory_growth()
    _freeze_the_start()
    return asyncio.run(_serve(daemon, listeners.bind_failure))


# Threads for blocking reads (/proc, metrics parsing, bundle sections). Each
# thread that allocates gets its own glibc malloc arena, and an arena's freed
# memory mostly stays resident: a few threads and a cap on arenas keep the
# resident size flat after start instead of creeping with every new worker.
WORKER_THREADS = 4
GIL_SWITCH_INTERVAL_S = 0.001
MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # glibc's mallopt parameter number


def _libc() -> Any:
    """glibc, for its allocator's knobs (None elsewhere: each knob is then a no-op)."""
    import ctypes
    import ctypes.util

    try:
        return ctypes.CDLL(ctypes.util.find_library("c"))
    except (OSError, TypeError):
        return None


def _bound_memory_growth() -> None:
    """Cap glibc's malloc arenas (a no-op on other C libraries) before any thread starts."""
    with contextlib.suppress(AttributeError, TypeError):
        _libc().mallopt(_M_ARENA_MAX, MALLOC_ARENAS)


def _freeze_the_start() -> None:
    """Move every object the start made (modules, the catalog, the daemon) out of the
    collector's sight: a full collection otherwise walks them all and holds the GIL
    for 50-70 ms, and a probe on the listener's thread waits that long
    (``make bench-footprint``, fresh connections with the target hung)."""
    import gc

    gc.collect()
    gc.freeze()
    # What the start freed (config parsing, the catalog's validation) goes back to the
    # system instead of staying resident between live objects.
    with contextlib.suppress(AttributeError, TypeError):
        _libc().malloc_trim(0)


async def _serve(daemon: Any, bind_failure: Callable[[BaseException], str | None]) -> int:
    from concurrent.futures import ThreadPoolExecutor

    # A probe is answered on the HTTP listener's own thread (serve.probe_thread);
    # behind a worker thread busy with CPU work (a /metrics parse, a bundle being
    # assembled) it waits for the GIL up to the switch interval, 5 ms by default.
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.set_default_executor(
        ThreadPoolExecutor(max_workers=WORKER_THREADS, thread_name_prefix="sentinel")
    )
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    failures: list[Exception] = []
    try:
        await daemon.run(stop)
    except* Exception as group:
        failures.extend(group.exceptions)
    lines = [line for line in map(bind_failure, failures) if line is not None]
    if lines and len(lines) == len(failures):  # a listener lost its address after the check
        print(lines[0], file=sys.stderr)
        return ExitCode.UNHEALTHY
    if failures:
        from sentinel.telemetry.logging import get_logger

        for exc in failures:
            get_logger("sentinel").error("sentinel_failed", error=repr(exc), exc_info=exc)
        return ExitCode.UNHEALTHY
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
