"""``sentinel probe``: a one-shot black-box probe of OpenAI-compatible endpoints.

It owns the command's arguments, the fan-out over targets and the rendering
(a table for people, JSON for machines). The canaries themselves are the
daemon's: the same catalog and the same runner, so what ``probe`` reports is
what the sidecar would see.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from rich.console import Console
from rich.table import Table
from rich.text import Text

from sentinel.canary.catalog import Catalog, CatalogError, load_catalog
from sentinel.canary.kinds import KINDS
from sentinel.canary.outcome import outcome
from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.runner import CanaryRunner, ModelResolutionError
from sentinel.canary.spec import CanaryKind, CanarySpec
from sentinel.cli_flags import add_catalog_flag, add_output_flag, positive_seconds
from sentinel.config.loader import ConfigError, read_api_key
from sentinel.exitcode import ExitCode
from sentinel.target import http_url_error

RESOLVE_DEADLINE = 10.0  # seconds for /v1/models when --timeout is not given

EXIT_CODES = f"""exit codes:
  {ExitCode.OK:<3} every target healthy (kinds a server cannot do are skipped, with the reason)
  {ExitCode.UNHEALTHY:<3} a target unhealthy or unreachable, or nothing on it could be checked
      (with --strict, also a kind the server cannot do)
  {ExitCode.USAGE:<3} bad arguments or configuration: nothing was probed
  {ExitCode.INTERRUPTED:<3} interrupted (Ctrl-C)"""

# Called with each target and result as soon as the canary ends (progress lines).
Progress = Callable[[str, CanaryResult], None]


class ProbeUsageError(ValueError):
    """A usage or configuration problem: the command exits 2 with this message."""


@dataclass(frozen=True, slots=True)
class TargetReport:
    """Everything one target answered.

    ``error`` is set when the served model could not be resolved, in which case
    no canary ran. A canary the server rejects as unsupported counts as
    skipped (a text-only model asked for an image, a server giving no
    log-probabilities, is not a broken server), unless ``strict``; an
    inconclusive canary (a reasoning model that only thought) is not a failure.
    """

    url: str
    model: str | None
    results: tuple[CanaryResult, ...] = ()
    error: str | None = None
    error_reason: Reason | None = None
    strict: bool = False  # a kind the server cannot do (UNSUPPORTED) fails instead of skipping

    @property
    def healthy(self) -> bool:
        outcomes = [probe_outcome(r, strict=self.strict) for r in self.results]
        # Every kind skipped proves nothing about the server: that is no pass either.
        return self.error is None and "fail" not in outcomes and set(outcomes) != {"skipped"}


def probe_outcome(result: CanaryResult, *, strict: bool = False) -> str:
    """:func:`~sentinel.canary.outcome.outcome`, where ``--strict`` fails what it skips.

    One probe asks a server for everything the catalog has; a server without
    log-probabilities (most OpenAI-compatible proxies), images or structured
    outputs is not a broken one. The sidecar disables such a kind with a
    warning; the probe reports it skipped with its reason, and ``--strict``
    counts it a failure. The text canary is never skipped: it is the proof
    that the server generates at all.
    """
    return outcome(result, strict=strict)


def normalize_url(url: str) -> str:
    """Accept the server root or its ``/v1`` base, or ``host:port`` (``http://host:port``).

    ``host:port`` is what the exporter's ``target=`` takes, so one target string
    works for both.
    """
    if "://" not in url:
        try:
            port = urlsplit(f"http://{url}").port
        except ValueError:
            port = None
        if not port:
            raise ProbeUsageError(f"not an http(s) URL or host:port: {url!r}")
        url = f"http://{url}"
    problem = http_url_error(url)
    if problem is not None:
        raise ProbeUsageError(f"{url!r}: {problem}")
    base = url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


async def probe_targets(
    urls: Sequence[str],
    *,
    kinds: Iterable[CanaryKind] | None = None,
    timeout: float | None = None,  # noqa: ASYNC109 - a per-canary deadline, not a call timeout
    api_key: str | None = None,
    concurrency: int = 4,
    catalog: Catalog | None = None,
    client: httpx.AsyncClient | None = None,
    strict: bool = False,
    progress: Progress | None = None,
) -> list[TargetReport]:
    """Resolve each target's model and run each enabled canary of ``kinds`` once.

    On one target the text canary goes first, alone (when a path canary then
    fails, the text control says the engine is fine), then the other kinds
    together, so a hung server costs one deadline of them, not their sum.
    Targets run concurrently, at most ``concurrency`` at a time. Reports come
    back in the order of ``urls``, results in the catalog's kind order.
    """
    if concurrency < 1:
        raise ProbeUsageError("--concurrency must be at least 1")
    if timeout is not None and timeout <= 0:
        raise ProbeUsageError("--timeout must be positive")
    catalog = catalog if catalog is not None else load_catalog()
    wanted = tuple(kinds) if kinds is not None else catalog.kinds()
    missing = [k.value for k in wanted if not catalog.of_kind(k)]
    if missing:
        raise ProbeUsageError(f"no enabled canary of kind {', '.join(missing)} in the catalog")
    order = list(KINDS)
    specs = sorted(
        (s for s in catalog.enabled() if s.kind in wanted), key=lambda s: order.index(s.kind)
    )
    bases = [normalize_url(u) for u in urls]
    gate = asyncio.Semaphore(concurrency)

    async def one(http: httpx.AsyncClient, base: str) -> TargetReport:
        async with gate:
            runner = CanaryRunner(http, base, api_key=api_key)
            try:
                model = await runner.resolve_model(deadline=timeout or RESOLVE_DEADLINE)
            except ModelResolutionError as exc:
                return TargetReport(
                    base, None, error=exc.detail, error_reason=exc.reason, strict=strict
                )

            async def run(spec: CanarySpec) -> CanaryResult:
                result = await runner.run(spec, model=model, deadline=timeout or spec.deadline)
                if progress is not None:
                    progress(base, result)
                return result

            first = [await run(s) for s in specs if s.kind is CanaryKind.TEXT]
            rest = await asyncio.gather(*(run(s) for s in specs if s.kind is not CanaryKind.TEXT))
            return TargetReport(base, model, (*first, *rest), strict=strict)

    async def all_targets(http: httpx.AsyncClient) -> list[TargetReport]:
        return list(await asyncio.gather(*(one(http, b) for b in bases)))

    if client is not None:
        return await all_targets(client)
    async with httpx.AsyncClient() as http:
        return await all_targets(http)


def exit_code(reports: Iterable[TargetReport]) -> int:
    return ExitCode.OK if all(r.healthy for r in reports) else ExitCode.UNHEALTHY


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.3f} s"


def render_table(reports: Sequence[TargetReport], *, width: int = 140) -> str:
    """A plain-text table, one row per canary (or per unreachable target)."""
    table = Table(title="sentinel probe", show_lines=False)
    for column in ("target", "model", "kind", "result", "reason", "latency", "TTFT", "detail"):
        table.add_column(column, overflow="fold")
    for report in reports:
        if report.error is not None:
            reason = report.error_reason.value if report.error_reason else ""
            _add_row(table, report.url, "", "", "fail", reason, "", "", report.error)
            continue
        for r in report.results:
            _add_row(
                table,
                report.url,
                report.model or "",
                r.kind.value if r.name == r.kind.value else f"{r.kind.value} ({r.name})",
                probe_outcome(r, strict=report.strict),
                r.reason.value,
                _seconds(r.duration),
                _seconds(r.ttft),
                r.detail,
            )
    out = io.StringIO()
    Console(file=out, width=width, color_system=None, force_terminal=False).print(table)
    return out.getvalue()


def _add_row(table: Table, *cells: str) -> None:
    # Text, not str: details quote server replies, and rich would read "[...]" as markup.
    table.add_row(*(Text(cell) for cell in cells))


def report_dict(report: TargetReport) -> dict[str, Any]:
    return {
        "url": report.url,
        "model": report.model,
        "healthy": report.healthy,
        "error": report.error,
        "error_reason": report.error_reason.value if report.error_reason else None,
        "results": [
            {
                "name": r.name,
                "kind": r.kind.value,
                "outcome": probe_outcome(r, strict=report.strict),
                "reason": r.reason.value,
                "duration": r.duration,
                "ttft": r.ttft,
                "http_status": r.http_status,
                "prompt_tokens": r.prompt_tokens,
                "completion_tokens": r.completion_tokens,
                "stream": r.stream,
                "detail": r.detail,
            }
            for r in report.results
        ],
    }


def render_json(reports: Sequence[TargetReport]) -> str:
    document = {
        "healthy": all(r.healthy for r in reports),
        "targets": [report_dict(r) for r in reports],
    }
    return json.dumps(document, indent=2)


def add_probe_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EXIT_CODES
    parser.add_argument(
        "urls",
        nargs="+",
        metavar="URL",
        help="server base URL (with or without /v1), or HOST:PORT (http://HOST:PORT)",
    )
    parser.add_argument(
        "--kind",
        action="append",
        dest="kinds",
        choices=[k.value for k in KINDS],
        help="canary kind to run (repeatable; default: every enabled kind in the catalog)",
    )
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=None,
        help="deadline per canary, seconds (default: the spec's)",
    )
    add_output_flag(parser, text="a table on stdout; progress lines go to stderr")
    parser.add_argument(
        "--strict",
        action="store_true",
        help="a kind the server cannot do (no log-probabilities, images, structured outputs "
        "or endpoint) fails the run instead of being skipped",
    )
    parser.add_argument(
        "--api-key-file",
        type=Path,
        default=None,
        help="file holding the API key (also SENTINEL_API_KEY_FILE, or SENTINEL_API_KEY)",
    )
    add_catalog_flag(parser)
    parser.add_argument(
        "--concurrency", type=int, default=4, help="targets probed at once (default: 4)"
    )


def _progress_line(url: str, result: CanaryResult, *, strict: bool) -> None:
    state = probe_outcome(result, strict=strict)
    why = f" {result.reason.value}" if state != "ok" else ""
    detail = f": {result.detail}" if result.detail and state != "ok" else ""
    print(
        f"sentinel probe: {url} {result.name}: {state}{why} ({result.duration:.2f} s){detail}",
        file=sys.stderr,
        flush=True,
    )


def probe_main(args: argparse.Namespace) -> int:
    """Run the probe command; 0 all healthy, 1 any unhealthy, 2 usage or configuration error."""
    try:
        api_key = read_api_key(args.api_key_file)
        catalog = load_catalog(args.catalog)
        kinds = [CanaryKind(k) for k in args.kinds] if args.kinds else None
        reports = asyncio.run(
            probe_targets(
                args.urls,
                kinds=kinds,
                timeout=args.timeout,
                api_key=api_key,
                concurrency=args.concurrency,
                catalog=catalog,
                strict=args.strict,
                progress=lambda url, result: _progress_line(url, result, strict=args.strict),
            )
        )
    except (ProbeUsageError, CatalogError, ConfigError) as exc:
        print(f"sentinel probe: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    if args.output == "json":
        print(render_json(reports))
    else:
        sys.stdout.write(render_table(reports, width=max(Console().width, 120)))
    return exit_code(reports)
