"""``python -m chaos.vllm_radar VERSION [--base BASE]``: one release against another, as Markdown.

Run from the repository root (``make vllm-radar VERSION=0.34.0``). Progress
goes to stderr, the report to stdout (or ``--out``). The base defaults to the
release before: the previous patch, or ``X.(Y-1).0`` for an ``X.Y.0``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from chaos.vllm_radar import compare, report, wheel

_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def previous(version: str) -> str:
    """The release before ``version`` by number (a guess: ``--base`` names it exactly)."""
    match = _VERSION.fullmatch(version)
    if match is None:
        raise wheel.RadarError(f"{version!r} is not X.Y.Z: name the base with --base")
    major, minor, patch = (int(g) for g in match.groups())
    if patch:
        return f"{major}.{minor}.{patch - 1}"
    if minor:
        return f"{major}.{minor - 1}.0"
    raise wheel.RadarError(f"no release before {version} by number: name one with --base")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.vllm_radar", description=__doc__)
    parser.add_argument("version", help="the vLLM release to read, e.g. 0.34.0")
    parser.add_argument("--base", help="the release to compare with (default: the one before)")
    parser.add_argument("--cache", type=Path, default=wheel.CACHE, help="wheel and JSON cache")
    parser.add_argument("--out", type=Path, help="write the report here instead of stdout")
    args = parser.parse_args(argv)
    try:
        base = args.base or previous(args.version)
        before = wheel.surfaces(base, args.cache)
        after = wheel.surfaces(args.version, args.cache)
    except wheel.RadarError as exc:
        print(f"radar: {exc}", file=sys.stderr)
        return 2
    text = report.render(
        args.version,
        base,
        after,
        compare.diff(before, after),
        compare.presence(after, args.version),
    )
    if args.out:
        args.out.write_text(text)
        print(f"radar: report written to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
