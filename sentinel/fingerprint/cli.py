"""``sentinel fingerprint show|rebaseline``: the correctness fingerprint of a running sentinel.

``show`` prints the model and weight version served, the fingerprint in force
and how the recent checks compare (``GET /fingerprint``, no token needed).
``rebaseline`` asks for a new fingerprint, taken by the next correctness check
(``POST /fingerprint``), with the maintenance hook's bearer token (from
``--token-file``, default ``$SENTINEL_MAINTENANCE_TOKEN_FILE``): the operator's
word that the weights changed on purpose (a new checkpoint under the same
name, a weight update the server did not declare).

Exit status as ``sentinel maintenance``: 0 done; 2 refused (a bad argument or
token, 400/401/404); 1 no usable answer (unreachable, 5xx, a timeout).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sentinel.exitcode import ExitCode
from sentinel.maintenance.cli import (
    TOKEN_FILE_ENV,
    ClientError,
    add_client_options,
    ask_sentinel,
    client_token,
)


def add_fingerprint_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("show", help="the fingerprint in force and the recent checks")
    again = actions.add_parser("rebaseline", help="the next check takes a new fingerprint")
    again.add_argument("--reason", default="operator's command", help="why (logged)")
    again.add_argument(
        "--token-file",
        type=Path,
        help=f"file holding the maintenance bearer token (default: ${TOKEN_FILE_ENV})",
    )
    for action in actions.choices.values():
        add_client_options(action)


def fingerprint_main(args: argparse.Namespace) -> int:
    """One request to ``/fingerprint``; prints what it says and returns the exit status."""
    rebaseline = args.action == "rebaseline"
    try:
        document = ask_sentinel(
            str(args.sentinel),
            "/fingerprint",
            method="POST" if rebaseline else "GET",
            timeout=args.timeout,
            body={"reason": args.reason} if rebaseline else None,
            token=client_token(args.token_file) if rebaseline else None,
        )
    except ClientError as exc:
        print(f"sentinel fingerprint {args.action}: {exc.message}", file=sys.stderr)
        return exc.code
    print(json.dumps(document, indent=2) if args.output == "json" else describe(document))
    return ExitCode.OK


def taken_at(recorded_at: Any, now: float) -> str:
    """An epoch as an operator reads it: ISO time in UTC and how long ago; else the raw value."""
    if isinstance(recorded_at, bool) or not isinstance(recorded_at, int | float):
        return f"at {recorded_at!r}"
    try:
        when = datetime.fromtimestamp(recorded_at, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return f"at {recorded_at!r}"
    age = max(0.0, now - recorded_at)
    ago = (
        f"{age:.0f} s"
        if age < 120
        else f"{age / 60:.0f} min"
        if age < 7200
        else f"{age / 3600:.1f} h"
    )
    return f"at {when.isoformat(timespec='seconds').replace('+00:00', 'Z')} ({ago} ago)"


def describe(document: dict[str, Any]) -> str:
    """A few lines for a person: what is served, the fingerprint, the last checks."""
    facts = document.get("correctness")
    if not isinstance(facts, dict):
        return "no correctness check runs"
    lines = []
    if document.get("rebaseline"):
        lines.append("re-baseline requested: the next check takes a new fingerprint")
    lines.append(f"model {facts.get('model')!r}, weights {facts.get('weights')!r}")
    fingerprint = facts.get("fingerprint")
    if facts.get("pending"):
        lines.append(f"a new fingerprint is due: {facts['pending']}")
    elif isinstance(fingerprint, dict):
        taken = taken_at(fingerprint.get("recorded_at"), time.time())
        lines.append(f"fingerprint taken {taken}: {fingerprint.get('why')}")
    else:
        lines.append("no fingerprint yet: the next check takes it")
    for check in facts.get("checks") or []:
        departures = check.get("departures") or []
        lines.append(f"  check {check.get('reason')}: " + ("; ".join(departures) or "matches"))
    return "\n".join(lines)
