"""``python -m sentinel.reference``: write the generated ``docs/`` pages from the code."""

from __future__ import annotations

import argparse
import sys

from sentinel.reference.documents import DOCS, REFERENCES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sentinel.reference",
        description="Regenerate "
        + ", ".join(f"docs/{name}" for name in REFERENCES)
        + " from the code (a unit test fails when they drift).",
    )
    parser.parse_args(argv)
    for name, build in REFERENCES.items():
        (DOCS / name).write_text(build(), encoding="utf-8")
        print(f"wrote docs/{name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
