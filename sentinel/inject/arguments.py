"""``sentinel inject``'s flags, kept apart so that building the CLI parser loads no YAML library."""

from __future__ import annotations

import argparse

__all__ = ["add_inject_arguments"]


def _bool(text: str) -> bool:
    lowered = text.lower()
    if lowered not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, not {text!r}")
    return lowered == "true"


def add_inject_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Write the Kubernetes YAML stream of FILE (or stdin) to stdout with sentinel added "
        "to every pod whose container runs vLLM; usable as a Helm post-renderer."
    )
    parser.add_argument("files", nargs="*", metavar="FILE", help="YAML files; none or - is stdin")
    parser.add_argument(
        "--image", help="sentinel's image (default: the one manifests/base names; use your build)"
    )
    parser.add_argument(
        "--container",
        metavar="NAME",
        help="the vLLM container's name (default: found by "
        "its command, `vllm serve`, or its image)",
    )
    parser.add_argument(
        "--enforce",
        type=_bool,
        default=True,
        metavar="true|false",
        help="false: observe-only, sentinel never restarts vLLM (default: true)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 listing every workload running vLLM without sentinel",
    )
