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
import os
import sys
from pathlib import Path
from typing import Any

from sentinel.exitcode import ExitCode
from sentinel.maintenance import TokenError, read_token
from sentinel.maintenance_cli import RETRYABLE, TOKEN_FILE_ENV, add_client_options


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
    import httpx

    name = f"sentinel fingerprint {args.action}"

    def fail(code: ExitCode, message: str) -> int:
        print(f"{name}: {message}", file=sys.stderr)
        return code

    headers: dict[str, str] = {}
    body: dict[str, Any] | None = None
    if args.action == "rebaseline":
        token_file: Path | None = args.token_file
        if token_file is None and os.environ.get(TOKEN_FILE_ENV):
            token_file = Path(os.environ[TOKEN_FILE_ENV])
        if token_file is None:
            return fail(ExitCode.USAGE, f"no token: give --token-file or set {TOKEN_FILE_ENV}")
        try:
            headers["Authorization"] = f"Bearer {read_token(token_file)}"
        except TokenError as exc:
            return fail(ExitCode.USAGE, f"token file {exc}")
        body = {"reason": args.reason}
    url = str(args.url).rstrip("/")
    if not url.startswith(("http://", "https://")):
        return fail(ExitCode.USAGE, f"--url must be an http:// or https:// URL, got {url!r}")
    try:
        with httpx.Client(timeout=args.timeout, follow_redirects=False) as client:
            method = "POST" if body is not None else "GET"
            answer = client.request(method, url + "/fingerprint", json=body, headers=headers)
    except httpx.InvalidURL as exc:
        return fail(ExitCode.USAGE, f"--url {url!r}: {exc}")
    except httpx.HTTPError as exc:
        return fail(ExitCode.UNHEALTHY, f"no answer from {url}: {exc or type(exc).__name__}")
    try:
        document = answer.json()
    except ValueError:
        document = None
    if not isinstance(document, dict):
        return fail(ExitCode.UNHEALTHY, f"{url} answered {answer.status_code} without JSON")
    status = answer.status_code
    if status != 200:
        refused = 400 <= status < 500 and status not in RETRYABLE
        return fail(
            ExitCode.USAGE if refused else ExitCode.UNHEALTHY,
            f"refused ({status}): {document.get('error') or document}",
        )
    print(json.dumps(document, indent=2) if args.json else describe(document))
    return ExitCode.OK


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
        lines.append(
            f"fingerprint taken at {fingerprint.get('recorded_at')}: {fingerprint.get('why')}"
        )
    else:
        lines.append("no fingerprint yet: the next check takes it")
    for check in facts.get("checks") or []:
        departures = check.get("departures") or []
        lines.append(f"  check {check.get('reason')}: " + ("; ".join(departures) or "matches"))
    return "\n".join(lines)
