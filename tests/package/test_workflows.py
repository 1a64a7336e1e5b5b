"""The CI and release workflows: valid for GitHub, and doing what a release needs.

They run only on GitHub, so here they are checked as far as can be offline:
against the workflow schema that check-jsonschema vendors (a misspelt key or a
wrong shape fails), then for what the release promises (README, issue 40): a
tag ``v*`` runs the suite first, the sdist and wheel are built, checked and
attested, published by trusted publishing (an id-token, no token or URL), and
a multi-arch image is pushed with provenance and an SBOM; CI runs ``make
test`` and a real ``docker build`` on every change.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO / ".github" / "workflows"

Workflow = dict[Any, Any]


def load(name: str) -> Workflow:
    loaded: Workflow = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    # YAML 1.1 reads the key `on` as True.
    loaded["on"] = loaded.pop(True, loaded.get("on"))
    return loaded


def steps(workflow: Workflow, job: str) -> list[dict[str, Any]]:
    return list(workflow["jobs"].get(job, {}).get("steps", []))


def action(workflow: Workflow, job: str, name: str) -> dict[str, Any] | None:
    """The step of ``job`` that uses the action ``name`` (any version), or None."""
    return next(
        (s for s in steps(workflow, job) if str(s.get("uses", "")).split("@")[0] == name), None
    )


def release_problems(release: Workflow) -> list[str]:
    """What the release workflow lacks of what a release needs; empty when nothing."""
    problems = []
    if release["on"] != {"push": {"tags": ["v*"]}}:
        problems.append("not started by a tag v* alone")
    jobs = release["jobs"]
    if jobs.get("ci", {}).get("uses") != "./.github/workflows/ci.yml":
        problems.append("the suite does not run first")
    built = " ".join(str(s.get("run", "")) for s in steps(release, "dist"))
    if "python -m build" not in built or "twine check --strict" not in built:
        problems.append("dist does not build and check the sdist and wheel")
    if action(release, "dist", "actions/attest-build-provenance") is None:
        problems.append("no build provenance for the sdist and wheel")
    publish = action(release, "publish", "pypa/gh-action-pypi-publish")
    if publish is None:
        problems.append("nothing publishes to the package index")
    elif publish.get("with", {}).keys() & {"password", "repository-url"}:
        problems.append("publishing names a token or an index: trusted publishing needs neither")
    if jobs.get("publish", {}).get("permissions", {}).get("id-token") != "write":
        problems.append("publish has no id-token for trusted publishing")
    image = action(release, "image", "docker/build-push-action") or {}
    given = image.get("with", {})
    if set(str(given.get("platforms", "")).split(",")) != {"linux/amd64", "linux/arm64"}:
        problems.append("the image is not built for linux/amd64 and linux/arm64")
    if given.get("provenance") != "mode=max" or given.get("sbom") is not True:
        problems.append("the image has no full provenance and SBOM")
    if given.get("push") is not True:
        problems.append("the image is not pushed")
    meta = action(release, "image", "docker/metadata-action") or {}
    if not str(meta.get("with", {}).get("images", "")).startswith("ghcr.io/"):
        problems.append("the image is not named for ghcr.io")
    return problems


def test_the_workflows_are_valid_for_github() -> None:
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert [f.name for f in files] == ["ci.yml", "release.yml"]
    checked = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows"]
        + [str(f) for f in files],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_release_builds_checks_attests_and_publishes_wheels_and_an_image() -> None:
    assert release_problems(load("release.yml")) == []


@pytest.mark.parametrize(
    ("path", "value", "problem"),
    [
        (("on",), {"push": {"branches": ["main"]}}, "not started by a tag v* alone"),
        (("jobs", "image", "steps", 5, "with", "sbom"), False, "no full provenance and SBOM"),
        (("jobs", "publish", "permissions"), {}, "no id-token for trusted publishing"),
        (("jobs", "dist", "steps", 6), {"run": "true"}, "no build provenance"),
    ],
)
def test_a_release_workflow_missing_a_part_is_caught(
    path: tuple[Any, ...], value: Any, problem: str
) -> None:
    broken = load("release.yml")
    holder = broken
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = value
    assert any(problem in p for p in release_problems(broken)), release_problems(broken)


def test_ci_runs_the_suite_and_a_real_docker_build_on_every_change() -> None:
    ci = load("ci.yml")
    assert {"push", "pull_request", "workflow_call"} <= set(ci["on"])
    assert ci["on"]["push"] is None  # every branch and tag
    assert any("make test" in str(s.get("run", "")) for s in steps(ci, "test"))
    build = action(ci, "image", "docker/build-push-action")
    assert build is not None
    assert build["with"]["push"] is False
