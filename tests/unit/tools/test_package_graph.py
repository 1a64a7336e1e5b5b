"""No knot between sentinel's packages: the layers contract can name whole packages.

A cycle between two packages would force the root layers contract in
`.importlinter` to split them over rungs or ignore an import; the measure
(`python -m tools.package_graph`) is checked here, and its algorithm on graphs
whose answer is known, so the check can fail.
"""

from __future__ import annotations

from tools.package_graph import main, package_edges, package_of, strongly_connected


def test_no_two_sentinel_packages_import_each_other_round_a_loop() -> None:
    edges = package_edges("sentinel")
    nodes = {package for edge in edges for package in edge}
    knots = [members for members in strongly_connected(nodes, set(edges)) if len(members) > 1]
    assert knots == []
    assert main(["sentinel"]) == 0


def test_a_loop_through_three_packages_is_one_knot() -> None:
    edges = {("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e")}
    found = sorted(strongly_connected({"a", "b", "c", "d", "e", "f"}, edges))
    assert found == [["a", "b", "c"], ["d"], ["e"], ["f"]]


def test_two_knots_are_told_apart() -> None:
    edges = {("a", "b"), ("b", "a"), ("b", "c"), ("c", "d"), ("d", "c")}
    found = sorted(strongly_connected({"a", "b", "c", "d"}, edges))
    assert found == [["a", "b"], ["c", "d"]]


def test_modules_fold_into_their_first_level_package() -> None:
    assert package_of("sentinel.config.settings", "sentinel") == "sentinel.config"
    assert package_of("sentinel.boot", "sentinel") == "sentinel.boot"
    assert package_of("sentinel", "sentinel") == "sentinel"
