"""The shape of the code, checked: layering contracts, file sizes, import cycles.

The layering rules of docs/design.md live in `.importlinter` at the repository root
and are checked by import-linter here, so a new import that crosses a layer
fails `make test` with the contract it breaks.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("sentinel", "sentinel_sim", "chaos")
MAX_LINES = 400


def test_layering_contracts_hold() -> None:
    # In a process of its own: import-linter configures logging with
    # disable_existing_loggers, which would silence other tests' loggers.
    linter = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run(
        [str(linter), "--config", str(ROOT / ".importlinter")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle(package: str) -> None:
    # Imports under TYPE_CHECKING count: a circle only the type checker walks is
    # still two modules that cannot be understood (or moved) apart. No cache:
    # grimp keeps one modification-time index per package for all its settings,
    # so a build with other settings (lint-imports') can leave this one stale,
    # and the uncached build takes a fraction of a second.
    graph = grimp.build_graph(package, exclude_type_checking_imports=False, cache_dir=None)
    cycles = []
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            # A package importing its own submodule (or the reverse) is how Python
            # packages are assembled, not a cycle between peers.
            if imported.startswith(module + ".") or module.startswith(imported + "."):
                continue
            if graph.chain_exists(importer=imported, imported=module):
                chain = graph.find_shortest_chain(importer=imported, imported=module)
                cycles.append(f"{module} -> {' -> '.join(chain or ())}")
    assert cycles == []


def test_no_sentinel_module_over_the_size_limit() -> None:
    too_long = {
        str(path.relative_to(ROOT)): n
        for path in (ROOT / "sentinel").rglob("*.py")
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert too_long == {}


def _string_constants(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def test_only_the_stacks_adapter_runs_py_spy() -> None:
    runners = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "sentinel").rglob("*.py")
        if "py-spy" in _string_constants(path)
    }
    assert runners <= {"sentinel/diagnostics/stacks.py"}
