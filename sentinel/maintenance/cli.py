"""``sentinel maintenance set|clear|show``: the /maintenance hook of a running sentinel.

One request to the sentinel named by ``--sentinel URL`` (default
``http://127.0.0.1:8471``), with the bearer token read from ``--token-file`` (default
``$SENTINEL_MAINTENANCE_TOKEN_FILE``, which the sidecar's own environment sets,
so ``kubectl exec ... -c sentinel -- sentinel maintenance show`` needs no flag).

Exit status (:class:`~sentinel.exitcode.ExitCode`): 0 done; 2 refused for what
was asked or who asked (a bad argument or token file here; 400, 401, 404 from
sentinel: the same request cannot succeed later); 1 no usable answer (sentinel
unreachable, 5xx, a timeout), which a retry may cure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from sentinel.cli_flags import add_output_flag, add_sentinel_flag, positive_seconds, sentinel_url
from sentinel.config.loader import env_name
from sentinel.exitcode import ExitCode
from sentinel.maintenance.window import TokenError, read_token

TOKEN_FILE_ENV = env_name("maintenance_token_file")
METHODS = {"set": "POST", "clear": "DELETE", "show": "GET"}
# Answers that a later, identical request may not get: worth a retry (exit 1).
RETRYABLE = frozenset({408, 429})


def add_maintenance_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    hold = actions.add_parser("set", help="hold a maintenance window of --seconds from now")
    hold.add_argument(
        "--seconds",
        type=positive_seconds,
        required=True,
        help="its length (at most sentinel's maintenance_max, 3600 s by default)",
    )
    hold.add_argument("--reason", required=True, help="why (shown in /status and logs)")
    actions.add_parser("clear", help="end the maintenance window now")
    actions.add_parser("show", help="show the maintenance window")
    for action in actions.choices.values():
        action.add_argument(
            "--token-file",
            type=Path,
            help=f"file holding the bearer token (default: ${TOKEN_FILE_ENV})",
        )
        add_client_options(action)


def add_client_options(action: argparse.ArgumentParser) -> None:
    """The options every command talking to sentinel's HTTP port takes."""
    add_sentinel_flag(action)
    action.add_argument(
        "--timeout", type=positive_seconds, default=10.0, help="seconds (default 10)"
    )
    add_output_flag(action, text="a line or a few for people")


class ClientError(Exception):
    """Why a command talking to sentinel's HTTP port gave up, and its exit status."""

    def __init__(self, code: ExitCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def client_token(token_file: Path | None) -> str:
    """The token from ``--token-file``, else the file ``$SENTINEL_MAINTENANCE_TOKEN_FILE`` names."""
    if token_file is None and os.environ.get(TOKEN_FILE_ENV):
        token_file = Path(os.environ[TOKEN_FILE_ENV])
    if token_file is None:
        raise ClientError(ExitCode.USAGE, f"no token: give --token-file or set {TOKEN_FILE_ENV}")
    try:
        return read_token(token_file)
    except TokenError as exc:
        raise ClientError(ExitCode.USAGE, f"token file {exc}") from exc


def ask_sentinel(
    url: str,
    path: str,
    *,
    method: str,
    timeout: float,
    body: dict[str, Any] | None = None,
    token: str | None = None,
) -> dict[str, Any]:
    """One request to sentinel's HTTP port; its JSON object, or :class:`ClientError`.

    No redirects: a token goes to the URL given and nowhere else. A refusal
    the caller can fix (4xx other than the retryable ones) is a usage error.
    """
    import httpx

    try:
        url = sentinel_url(url)
    except argparse.ArgumentTypeError as exc:
        raise ClientError(ExitCode.USAGE, f"--sentinel {exc}") from None
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    try:
        with httpx.Client(timeout=timeout, follow_redirects=False) as client:
            answer = client.request(method, url + path, json=body, headers=headers)
    except httpx.InvalidURL as exc:
        raise ClientError(ExitCode.USAGE, f"--sentinel {url!r}: {exc}") from exc
    except httpx.HTTPError as exc:
        raise ClientError(
            ExitCode.UNHEALTHY, f"no answer from {url}: {exc or type(exc).__name__}"
        ) from exc
    try:
        document = answer.json()
    except ValueError:
        document = None
    status = answer.status_code
    if not isinstance(document, dict):
        raise ClientError(
            ExitCode.UNHEALTHY, f"{url} answered {status} without a JSON object; is it sentinel?"
        )
    if status != 200:
        refused = 400 <= status < 500 and status not in RETRYABLE
        raise ClientError(
            ExitCode.USAGE if refused else ExitCode.UNHEALTHY,
            f"refused ({status}): {document.get('error') or document}",
        )
    return document


def maintenance_main(args: argparse.Namespace) -> int:
    """One request to ``/maintenance``; prints the window, or why not, and returns the status."""
    body = {"seconds": args.seconds, "reason": args.reason} if args.action == "set" else None
    try:
        document = ask_sentinel(
            str(args.sentinel),
            "/maintenance",
            method=METHODS[args.action],
            timeout=args.timeout,
            body=body,
            token=client_token(args.token_file),
        )
    except ClientError as exc:
        print(f"sentinel maintenance {args.action}: {exc.message}", file=sys.stderr)
        return exc.code
    json_out = args.output == "json"
    print(json.dumps(document, indent=2) if json_out else describe(args.action, document))
    return ExitCode.OK


def describe(action: str, document: dict[str, Any]) -> str:
    """One line for a person: the window in force, or that there is none."""
    if action == "clear":
        cleared = document.get("cleared")
        return "maintenance window cleared" if cleared else "no maintenance window was in force"
    window = document.get("maintenance")
    if not isinstance(window, dict):
        return f"no maintenance window (at most {document.get('max_seconds', '?')} s may be set)"
    return (
        f"maintenance window: {window['remaining']:g} s left of {window['seconds']:g} s "
        f"(set {window['for']:g} s ago): {window['reason']}"
    )
