"""The flags commands share: ``--sentinel URL`` (a running sentinel), ``--output``, ``--catalog``.

A running sentinel used to be named three ways (``status [URL]``, ``--url
URL``, ``doctor --sentinel [URL]``) and the output picked two ways
(``--output``, ``--json``). Every command now takes ``--sentinel URL``
(default :data:`DEFAULT_SENTINEL`) and ``--output text|json``; the old
spellings still work, hidden from ``--help``, each with one note on stderr,
so nothing a user scripted breaks; likewise ``--probes DIR``, now ``--catalog
DIR`` (one name for the canary catalog). Values are checked here, as argparse
types, so a malformed URL or number is one line and exit 2, never a traceback
from the client that would have used it.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sentinel.target import http_url_error

#: sentinel's HTTP listener on this host (the port ``listen`` defaults to; a unit test
#: holds the two together).
DEFAULT_SENTINEL = "http://127.0.0.1:8471"
OUTPUTS = ("text", "json")
# Old ``--output`` values, still accepted: status and probe printed a "table".
OLD_OUTPUTS = {"table": "text"}


def deprecated(prog: str, old: str, new: str) -> None:
    """One line on stderr: the old spelling works, and what to write instead."""
    print(f"{prog}: {old} is deprecated; use {new}", file=sys.stderr)


class _OldSpelling(argparse.Action):
    """A hidden alias: stores what the new flag would, after a note on stderr."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        *,
        instead: str,
        value: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.instead = instead
        self.value = value
        if value is not None:
            kwargs["nargs"] = 0
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        deprecated(parser.prog, str(option_string), self.instead)
        setattr(namespace, self.dest, self.value if self.value is not None else values)


def add_sentinel_flag(parser: argparse.ArgumentParser, *, optional: bool = False) -> None:
    """``--sentinel URL`` (and the old ``--url URL``): which running sentinel to ask.

    ``optional``: the command works without one (``doctor``); the flag alone
    then means :data:`DEFAULT_SENTINEL`.
    """
    if optional:
        parser.add_argument(
            "--sentinel",
            nargs="?",
            const=DEFAULT_SENTINEL,
            metavar="URL",
            type=sentinel_url,
            help="also ask a running sentinel, at URL or HOST:PORT "
            f"(the flag alone: {DEFAULT_SENTINEL})",
        )
    else:
        parser.add_argument(
            "--sentinel",
            default=DEFAULT_SENTINEL,
            type=sentinel_url,
            metavar="URL",
            help="the running sentinel's HTTP listener, URL or HOST:PORT (default %(default)s)",
        )
    parser.add_argument(
        "--url", dest="sentinel", type=sentinel_url, action=_OldSpelling, instead="--sentinel URL"
    )


def add_catalog_flag(parser: argparse.ArgumentParser) -> None:
    """``--catalog DIR`` (and the old ``--probes DIR``): canary specs replacing the shipped ones.

    Stored as ``catalog``, the setting's name, so ``sentinel run`` hands it to
    the settings as it is.
    """
    parser.add_argument(
        "--catalog", type=Path, metavar="DIR", help="canary catalog directory (default: built-in)"
    )
    parser.add_argument(
        "--probes", dest="catalog", type=Path, action=_OldSpelling, instead="--catalog DIR"
    )


def _output(value: str) -> str:
    new = OLD_OUTPUTS.get(value)
    if new is not None:
        deprecated("sentinel", f"--output {value}", f"--output {new}")
        return new
    return value


def add_output_flag(parser: argparse.ArgumentParser, *, text: str) -> None:
    """``--output text|json`` (and the old ``--json``); ``text`` says what the text form is."""
    parser.add_argument(
        "--output",
        type=_output,
        choices=OUTPUTS,
        default="text",
        help=f"text: {text} (default); json: the whole answer as JSON",
    )
    parser.add_argument(
        "--json", dest="output", action=_OldSpelling, instead="--output json", value="json"
    )


def sentinel_url(value: str) -> str:
    """``HOST:PORT`` means ``http://HOST:PORT``; a trailing slash or ``/status`` is dropped.

    An argparse type: a URL that is not one raises :class:`argparse.ArgumentTypeError`.
    """
    url = value.strip()
    if "://" not in url:
        url = "http://" + url
    url = url.rstrip("/").removesuffix("/status")
    problem = http_url_error(url)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{value!r}: {problem}")
    return url


def positive_seconds(value: str) -> float:
    """An argparse type: a positive, finite number of seconds."""
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {value!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {value!r}")
    return seconds


def one_line(error: BaseException) -> str:
    """An error's message on one line: its lines joined, for a one-line stderr."""
    return "; ".join(line.strip() for line in str(error).splitlines() if line.strip())


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit 2, as every other
    error of the CLI is (a kubelet's "last state" and most log viewers show the last
    line only); ``--help`` still prints the whole usage."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")
