"""``sentinel status [--sentinel URL]``: a running sidecar's verdict, read from its ``/status``.

It owns the command's arguments, the one read and the rendering: the
``summary`` that ``/status`` opens with (liveness, readiness and startup with
their reasons, the hang or legitimate stall, why the target does not answer)
as a table for people, or the raw document with ``--output json`` (the old
spellings, a positional URL and ``--output table``, still work, each with a
note). The exit status follows liveness, the answer the kubelet restarts the
server on.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Mapping
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from sentinel.cli_flags import (
    add_output_flag,
    add_sentinel_flag,
    deprecated,
    positive_seconds,
    sentinel_url,
)
from sentinel.config.settings import Settings, split_host_port
from sentinel.diagnostics.running import fetch_status
from sentinel.exitcode import ExitCode

UNREACHABLE = 2  # the sidecar did not answer /status (argparse's usage errors exit 2 too)

EXIT_CODES = f"""exit codes:
  {ExitCode.OK:<3} the sidecar answered and liveness passes
  {ExitCode.UNHEALTHY:<3} the sidecar answered and liveness fails (a confirmed hang)
  {UNREACHABLE:<3} the sidecar is unreachable or its /status unreadable (one line says why),
      or bad arguments"""


def default_url() -> str:
    """sentinel's own HTTP listener on this host, at the port ``listen`` defaults to."""
    _, port = split_host_port(Settings().listen)
    return f"http://127.0.0.1:{port}"


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EXIT_CODES
    add_sentinel_flag(parser)
    # The old spelling, `sentinel status URL`: hidden, still read (status_main notes it).
    parser.add_argument("url", nargs="?", type=sentinel_url, help=argparse.SUPPRESS)
    add_output_flag(parser, text="the summary as a table for people")
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=3.0,
        help="seconds to wait for /status (default 3)",
    )


def normalise(url: str) -> str:
    """``HOST:PORT`` means ``http://HOST:PORT``; a trailing slash or ``/status`` is dropped."""
    return sentinel_url(url)


def status_main(args: argparse.Namespace, out: TextIO | None = None) -> int:
    given = getattr(args, "url", None)
    if given is not None:
        deprecated("sentinel status", "a positional URL", "--sentinel URL")
    try:
        url = normalise(given if given is not None else args.sentinel)
    except argparse.ArgumentTypeError as exc:
        print(f"sentinel status: --sentinel {exc}", file=sys.stderr)
        return ExitCode.USAGE
    document, error = asyncio.run(fetch_status(url, timeout_s=args.timeout))
    stream = out or sys.stdout
    if document is None:
        print(f"sentinel status: no sidecar answering at {url}: {error}", file=sys.stderr)
        return UNREACHABLE
    if args.output == "json":
        stream.write(json.dumps(document, indent=2) + "\n")
    else:
        render(document, stream)
    return ExitCode.OK if live(document) else ExitCode.UNHEALTHY


def live(document: Mapping[str, Any]) -> bool:
    """Liveness from the summary (or, from a sidecar without one, the top-level answer)."""
    summary = _mapping(document.get("summary"))
    if "liveness" in summary:
        return _mapping(summary["liveness"]).get("ok") is True
    return _mapping(document.get("liveness")).get("status") == "ok"


def summary_rows(document: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """(what, state, reason, since) per line of the table: pure, for tests and the table."""
    summary = _mapping(document.get("summary"))
    rows: list[tuple[str, str, str, str]] = []
    for probe in ("liveness", "readiness", "startup"):
        answer = _mapping(summary.get(probe)) or _legacy(document, probe)
        state = "ok" if answer.get("ok") else "FAIL"
        rows.append((probe, state, str(answer.get("reason", "")), _since(answer)))
    hang = _mapping(summary.get("hang"))
    if hang:
        more = f" (+{hang['more']} more)" if hang.get("more") else ""
        what = f"{hang.get('kind')} ({hang.get('action')}){more}"
        rows.append(("hang", what, str(hang.get("reason", "")), _since(hang)))
    stall = _mapping(summary.get("stall"))
    if stall:
        rows.append(
            ("stall", str(stall.get("phase")), str(stall.get("reason") or ""), _since(stall))
        )
    if summary.get("unreachable"):
        since = _since({"age": summary.get("unreachable_for")})
        rows.append(("target", "unreachable", str(summary["unreachable"]), since))
    return rows


def render(document: Mapping[str, Any], stream: TextIO) -> None:
    summary = _mapping(document.get("summary"))
    console = Console(file=stream, highlight=False, soft_wrap=False, width=120)
    target = summary.get("target") or document.get("target")
    title = f"sentinel {document.get('version', '?')} -> {target}"
    model = summary.get("model") or document.get("model")
    enforce = summary.get("enforce", document.get("enforce"))
    caption = f"model {model or 'not resolved'}; enforce {str(enforce).lower()}"
    if summary.get("at"):
        caption += f"; at {summary['at']}"
    table = Table(title=title, caption=caption, title_justify="left", caption_justify="left")
    for column in ("", "state", "reason", "since"):
        table.add_column(column, overflow="fold")
    for what, state, reason, since in summary_rows(document):
        style = "green" if state == "ok" else "red" if state in ("FAIL", "unreachable") else ""
        table.add_row(what, Text(state, style=style), reason, since)
    console.print(table)


def _since(entry: Mapping[str, Any]) -> str:
    age, since = entry.get("age"), entry.get("since")
    if not isinstance(age, int | float):
        return ""
    return f"{_ago(float(age))} ago ({since})" if isinstance(since, str) else f"{_ago(age)} ago"


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _legacy(document: Mapping[str, Any], probe: str) -> dict[str, Any]:
    """A sidecar before the summary: its top-level answer (status ok/fail, reason)."""
    answer = _mapping(document.get(probe))
    return {"ok": answer.get("status") == "ok", "reason": answer.get("reason", "")}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
