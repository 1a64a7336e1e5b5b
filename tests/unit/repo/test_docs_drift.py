"""Docs that cannot drift: the simulator's faults and routes, and the README's size.

The simulator's ``--help`` and ``docs/chaos/faults.md`` are generated from the
fault registry (:mod:`sentinel_sim.fault_help`); these tests fail when a fault
or a control route is added without its line, or the file is stale. The
README stays under its cap: detail belongs in the generated references.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import cast

from sentinel_sim.config import SimConfig, build_parser
from sentinel_sim.control_api import build_control_app
from sentinel_sim.fault_help import CONTROL_ROUTES, DOC, SUMMARIES, faults_markdown
from sentinel_sim.fault_tolerance import FaultTolerance
from sentinel_sim.faults import Fault
from sentinel_sim.server import SimServer

ROOT = Path(__file__).resolve().parents[3]
README_CAP = 10_000  # bytes


def test_every_fault_has_its_line() -> None:
    assert set(SUMMARIES) == set(Fault)
    assert all(line.strip() for line in SUMMARIES.values())


def test_docs_chaos_faults_md_is_current() -> None:
    assert DOC.read_text(encoding="utf-8") == faults_markdown(), (
        "regenerate: .venv/bin/python -m sentinel_sim.fault_help"
    )
    for fault in Fault:
        assert f"| `{fault.value}` |" in faults_markdown()


def test_the_simulators_help_lists_every_fault_and_route() -> None:
    text = build_parser().format_help()
    for fault in Fault:
        assert f"\n  {fault.value}" in text
    for method, path, _ in CONTROL_ROUTES:
        assert f"{method} {path}:" in text


def test_the_listed_routes_are_the_control_ports_routes() -> None:
    server = cast(SimServer, SimpleNamespace(config=SimConfig()))
    app = build_control_app(server)
    FaultTolerance(server).add_control_routes(app)
    served = {
        (route.method, route.resource.canonical)
        for route in app.router.routes()
        if route.method != "HEAD" and route.resource is not None
    }
    assert served == {(method, path) for method, path, _ in CONTROL_ROUTES}


def test_the_readme_stays_under_its_cap() -> None:
    size = len((ROOT / "README.md").read_bytes())
    assert size < README_CAP, f"README.md is {size} bytes; move detail into docs/"


def test_the_manifests_tree_names_every_folder() -> None:
    """manifests/README.md's tree lists each folder two levels down (it once omitted fleet/)."""
    text = (ROOT / "manifests" / "README.md").read_text(encoding="utf-8")
    tree = text.split("```", 2)[1]
    manifests = ROOT / "manifests"
    folders = [
        path
        for path in (
            *manifests.iterdir(),
            *(p for d in manifests.iterdir() if d.is_dir() for p in d.iterdir()),
        )
        if path.is_dir()
    ]
    assert len(folders) > 10
    missing = sorted(str(p.relative_to(manifests)) for p in folders if f"─ {p.name}/" not in tree)
    assert not missing, f"not in manifests/README.md's tree: {missing}"
