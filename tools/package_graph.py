"""``python -m tools.package_graph``: the knots in sentinel's package-level import graph.

The layers contract in ``.importlinter`` can only name whole packages if no
two packages import each other, directly or round a loop. This prints the
strongly connected sets of the graph whose nodes are sentinel's first-level
packages and modules (``sentinel.config``, ``sentinel.boot``), built by
grimp, the graph library import-linter checks with, with the imports under
``TYPE_CHECKING`` counted as ``.importlinter`` counts them. A set of more
than one package is a knot; for each, the imports that close it are listed,
so the one to move can be found. Exit status 1 when there is a knot.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict

import grimp


def package_of(module: str, root: str) -> str:
    """``sentinel.config.settings`` -> ``sentinel.config``; the root stays itself."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == root and len(parts) > 1 else module


def package_edges(root: str) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """Every package-to-package edge, with the module imports that make it."""
    # No cache: grimp keeps one index per package for all settings, which lint-imports shares.
    graph = grimp.build_graph(root, exclude_type_checking_imports=False, cache_dir=None)
    edges: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            source, target = package_of(importer, root), package_of(imported, root)
            if source != target and source != root and target != root:
                edges[source, target].append((importer, imported))
    return edges


def strongly_connected(nodes: set[str], edges: set[tuple[str, str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative: each strongly connected set, members sorted."""
    after: dict[str, list[str]] = defaultdict(list)
    for source, target in sorted(edges):
        after[source].append(target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, position = work.pop()
            if position == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            for i in range(position, len(after[node])):
                nxt = after[node][i]
                if nxt not in index:
                    work += [(node, i + 1), (nxt, 0)]
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                if low[node] == index[node]:
                    members = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        members.append(member)
                        if member == node:
                            break
                    found.append(sorted(members))
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", default="sentinel", help="the root package")
    args = parser.parse_args(argv)
    edges = package_edges(args.root)
    nodes = {package for edge in edges for package in edge}
    sets = sorted(strongly_connected(nodes, set(edges)), key=lambda s: (-len(s), s))
    knots = [s for s in sets if len(s) > 1]
    largest = len(sets[0]) if sets else 0
    print(
        f"{len(nodes)} packages, {len(edges)} package edges, largest strongly connected set: "
        f"{largest}, knots: {len(knots)}"
    )
    for knot in knots:
        print(f"\nknot of {len(knot)}: {', '.join(knot)}")
        members = set(knot)
        for (source, target), imports in sorted(edges.items()):
            if source in members and target in members:
                lines = ", ".join(f"{a} -> {b}" for a, b in imports)
                print(f"  {source} -> {target}: {lines}")
    return 1 if knots else 0


if __name__ == "__main__":
    sys.exit(main())
