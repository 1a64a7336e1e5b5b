"""``python -m tools.house_figures``: the size of sentinel's central objects and faces.

The figures a structural change is judged by (docs/layout.md's preamble names
the limits): how wide the record, the evaluator, the scheduler and the daemon
are, how many modules reach the ledger, how the packages present themselves,
and how long commit subjects run. Read from the source with ``ast`` and from
``git log``; nothing is imported, so a broken tree is still measured.
"""

from __future__ import annotations

import argparse
import ast
import statistics
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

# The objects whose width the figures follow, found wherever they live.
CLASSES = ("Ledger", "Evaluator", "Scheduler", "Daemon")
READ_ONLY_FACES = ("LedgerReading", "LedgerView")
SOFT_LIMIT = 395  # "near the cap": modules this long are split by the cap, not by concept


def _class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def _init(cls: ast.ClassDef) -> ast.FunctionDef | None:
    return next(
        (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None
    )


def attributes(cls: ast.ClassDef) -> set[str]:
    """Names assigned on ``self`` anywhere in the class, plus annotated class fields."""
    names = {
        n.target.id
        for n in cls.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }
    for node in ast.walk(cls):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            ):
                names.add(target.attr)
    return names


def init_parameters(cls: ast.ClassDef) -> int:
    """``__init__``'s parameters beside ``self`` (a dataclass: its fields)."""
    init = _init(cls)
    if init is None:
        return sum(1 for n in cls.body if isinstance(n, ast.AnnAssign))
    args = init.args
    return len(args.posonlyargs) + len(args.args) + len(args.kwonlyargs) - 1


def modules(root: Path) -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted((root / "sentinel").rglob("*.py")):
        yield path, ast.parse(path.read_text(), str(path))


def importers_of(target: str, root: Path) -> list[str]:
    """The modules (outside the target) that import ``target`` or a name from it."""
    found = []
    for path, tree in modules(root):
        dotted = ".".join(path.relative_to(root).with_suffix("").parts)
        if dotted == target:
            continue
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            if target in names:
                found.append(dotted)
                break
    return found


def find_class(
    root: Path, name: str, *, protocols: bool = False
) -> tuple[str, ast.ClassDef] | None:
    """The module (dotted) that defines class ``name``, and the class (a Protocol of that
    name too only with ``protocols``: a consumer's narrow view is not the object)."""
    for path, tree in modules(root):
        cls = _class(tree, name)
        if cls is not None and (protocols or not _is_protocol(cls)):
            return ".".join(path.relative_to(root).with_suffix("").parts), cls
    return None


def _is_protocol(cls: ast.ClassDef) -> bool:
    """A structural type named like the object (a consumer's narrow view of it)."""
    return any(isinstance(b, ast.Name) and b.id == "Protocol" for b in cls.bases)


def figures(root: Path) -> list[tuple[str, object]]:
    rows: list[tuple[str, object]] = []
    for name in CLASSES:
        found = find_class(root, name)
        if found is None:
            rows.append((f"{name}: not found", "-"))
            continue
        rows.append((f"{name} attributes", len(attributes(found[1]))))
        rows.append((f"{name}.__init__ parameters", init_parameters(found[1])))
    evidence = find_class(root, "Evidence")
    if evidence is not None:
        fields = sum(isinstance(n, ast.AnnAssign) for n in evidence[1].body)
        rows.append(("Evidence fields", fields))
    for name in READ_ONLY_FACES:
        face = find_class(root, name, protocols=True)
        if face is not None:
            props = [
                n
                for n in face[1].body
                if isinstance(n, ast.FunctionDef)
                and any(isinstance(d, ast.Name) and d.id == "property" for d in n.decorator_list)
            ]
            rows.append((f"{name} properties", len(props)))
    ledger = find_class(root, "Ledger")
    if ledger is not None:
        rows.append(("modules importing the ledger", len(importers_of(ledger[0], root))))
    inits = sorted((root / "sentinel").glob("*/__init__.py"))
    one_line = sum(1 for p in inits if len(p.read_text().strip().splitlines()) <= 1)
    with_all = sum(1 for p in inits if "__all__" in p.read_text())
    rows.append(("package __init__ files", len(inits)))
    rows.append(("  of them one line", one_line))
    rows.append(("  of them declaring __all__", with_all))
    names = Counter(p.name for p in (root / "sentinel").rglob("*.py") if p.name != "__init__.py")
    rows.append(("module file names used more than once", sum(1 for c in names.values() if c > 1)))
    lengths = [(len(p.read_text().splitlines()), p) for p, _ in modules(root)]
    rows.append(
        (f"modules of {SOFT_LIMIT}-400 lines", sum(SOFT_LIMIT <= n <= 400 for n, _ in lengths))
    )
    rows.append(("modules over 400 lines", sum(n > 400 for n, _ in lengths)))
    rows.append(("modules", len(lengths)))
    rows.append(("lines", sum(n for n, _ in lengths)))
    unit = root / "tests/unit"
    rows.append(("tests/unit files at its top", len(list(unit.glob("test_*.py")))))
    return rows


def subjects(root: Path, since: str | None) -> list[int]:
    """Lengths of the commit subjects since ``since`` (all of them: None)."""
    spec = [f"{since}..HEAD"] if since else []
    out = subprocess.run(
        ["git", "-C", str(root), "log", "--format=%s", *spec],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [len(line) for line in out.splitlines() if line]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.house_figures", description=__doc__)
    parser.add_argument("--root", type=Path, default=Path("."), help="the checkout (default: .)")
    parser.add_argument("--since", help="commit subjects after this revision only")
    args = parser.parse_args(argv)
    for label, value in figures(args.root):
        print(f"{label:<44} {value}")
    lengths = subjects(args.root, args.since)
    if lengths:
        print(f"{'commit subjects':<44} {len(lengths)}")
        median, longest = statistics.median(lengths), max(lengths)
        print(f"{'  median / longest characters':<44} {median:.0f} / {longest}")
        print(f"{'  over 72 characters':<44} {sum(n > 72 for n in lengths)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
