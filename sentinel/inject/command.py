"""The ``sentinel inject`` command: the YAML stream in and out, refusals, and the exit status.

The stream is read and written with ruamel.yaml's round trip, so a Helm render
keeps its ``# Source:`` comments, key order and quoting, and a second run gives the
same bytes. Nothing is written unless every document could be handled: a
post-renderer that half-injects a release is worse than one that refuses it.
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from sentinel.capped import FileTooLarge, read_capped_file, read_capped_stream
from sentinel.exitcode import ExitCode
from sentinel.inject.pods import Options, has_sentinel, inject_pod, unwired_probes
from sentinel.inject.sidecar import Sidecar, load_sidecar
from sentinel.inject.workloads import InjectError, find_vllm, pod_sites

__all__ = ["check_text", "inject_main", "inject_text"]

# A Helm render of a large release is a few hundred kilobytes.
MAX_INPUT_BYTES = 16 * 1024 * 1024


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096  # never fold a long command line
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.explicit_start = True
    return yaml


def _load(text: str, source: str) -> list[Any]:
    try:
        docs = [doc for doc in _yaml().load_all(text) if doc is not None]
    except RecursionError:
        raise InjectError(f"{source}: nested too deeply to be a manifest") from None
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise InjectError(f"{source}: not YAML{at}: {problem}") from None
    return docs


def inject_text(
    text: str, options: Options, note: Callable[[str], None], source: str = "<stdin>"
) -> str:
    """The stream with sentinel in every vLLM pod; :class:`InjectError` for what it cannot do."""
    docs = _load(text, source)
    without: list[str] = []
    found = 0
    make = partial(_sidecar, options)
    for doc in docs:
        for site in pod_sites(doc):
            vllm = find_vllm(site, options.container)
            if vllm is None:
                without.append(site.where)
                continue
            found += 1
            inject_pod(site, vllm, make, note)
    if without and not found:
        hint = "name it with --container" if options.container is None else "no such container"
        raise InjectError(f"{source}: no vLLM container in {', '.join(without)}: {hint}")
    out = io.StringIO(_preamble(text))
    out.seek(0, io.SEEK_END)
    if docs:
        _yaml().dump_all(docs, out)
    return out.getvalue()


def _preamble(text: str) -> str:
    """The comment lines above a stream's first ``---``, which the YAML library drops.

    A chart's render or a fixture names its source there; writing it back keeps it,
    and a second run finds the same lines above the same ``---``.
    """
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("---"):
            return "".join(lines[:i])
        if stripped and not stripped.startswith("#"):
            return ""
    return ""


def _sidecar(options: Options, port: int) -> Sidecar:
    return load_sidecar(image=options.image, target_port=port, enforce=options.enforce)


def check_text(text: str, options: Options, source: str = "<stdin>") -> list[str]:
    """One line per workload running vLLM without sentinel wired in; empty when all have it."""
    problems = []
    sidecar = load_sidecar(image=options.image, target_port=8000, enforce=options.enforce)
    for doc in _load(text, source):
        for site in pod_sites(doc):
            vllm = find_vllm(site, options.container)
            if vllm is None:
                continue
            if not has_sentinel(site.spec):
                problems.append(f"{site.where}: runs vLLM ({vllm.get('name')}) without sentinel")
            elif unwired := unwired_probes(vllm, sidecar):
                problems.append(
                    f"{site.where}: {vllm.get('name')}'s {', '.join(unwired)} not on sentinel"
                )
    return problems


def _read(files: Sequence[str]) -> Iterable[tuple[str, str]]:
    for name in files or ["-"]:
        try:
            if name == "-":
                raw = read_capped_stream(sys.stdin.buffer, MAX_INPUT_BYTES)
                name = "<stdin>"
            else:
                raw = read_capped_file(Path(name), MAX_INPUT_BYTES)
            yield name, raw.decode("utf-8")
        except FileTooLarge as exc:
            raise InjectError(f"{name}: {exc}") from None
        except UnicodeDecodeError:
            raise InjectError(f"{name}: not UTF-8 text") from None
        except OSError as exc:
            raise InjectError(f"{name}: cannot read: {exc.strerror or exc}") from None


def inject_main(args: argparse.Namespace) -> int:
    options = Options(image=args.image, enforce=args.enforce, container=args.container)
    notes: list[str] = []
    try:
        inputs = list(_read(args.files))
        if args.check:
            problems = [p for name, text in inputs for p in check_text(text, options, name)]
            for problem in problems:
                print(problem)
            return ExitCode.UNHEALTHY if problems else ExitCode.OK
        rendered = [inject_text(text, options, notes.append, name) for name, text in inputs]
    except InjectError as exc:
        print(f"sentinel inject: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    for line in dict.fromkeys(notes):
        print(f"sentinel inject: note: {line}", file=sys.stderr)
    sys.stdout.write("".join(rendered))
    return ExitCode.OK
