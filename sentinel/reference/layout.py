"""``docs/layout.md``: every module of the repository's packages, with what it owns.

Read from each module's docstring (its first sentence), so the map cannot
leave a module out or keep one that is gone; a unit test regenerates it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("sentinel", "sentinel_sim", "chaos")
SKIP = ("build",)  # chaos/vllm_plugin/build: a build output, not a module of ours

INTRO = """\
# Layout

Generated from each module's docstring by `python -m sentinel.reference`;
a test fails when a module is added, removed or re-described without it. The
layers these packages form, and which may import which, are the contracts in
`.importlinter` ([design.md](design.md), "Layering").

- `sentinel/`: the daemon and the CLI (installed; console script `sentinel`).
- `sentinel_sim/`: the simulated vLLM (installed for `sentinel demo`; never in the image).
- `chaos/`: scenario runner, baselines, load generator, real-vLLM environments and plugin.
- `manifests/` (Kubernetes), `docs/`, `tests/` (tiers: tests/README.md) hold no package.
"""


def summary(path: Path) -> str:
    """The first sentence of the module's docstring, on one line."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    first = " ".join(doc.split("\n\n", 1)[0].split())
    return first.replace("|", "/") or "(no docstring)"


def modules(package: str) -> list[Path]:
    base = ROOT / package
    return sorted(
        p for p in base.rglob("*.py") if not any(part in SKIP for part in p.relative_to(base).parts)
    )


def layout() -> str:
    """The whole ``docs/layout.md``."""
    rows = [INTRO]
    for package in PACKAGES:
        rows += ["", f"## `{package}/`", "", "| module | what it owns |", "|---|---|"]
        for path in modules(package):
            name = path.relative_to(ROOT).as_posix()
            rows.append(f"| `{name}` | {summary(path)} |")
    return "\n".join(rows) + "\n"
