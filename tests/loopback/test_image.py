"""The container image, built from the Dockerfile and run, where a builder answers.

``docker build`` needs a daemon; where none answers (``docker info`` fails,
or no docker client at all) the test is skipped with that reason and the
command to run by hand. Where one answers, the image is built from this
checkout, and three things are checked of it: the entry point is sentinel
(``sentinel --version`` prints the package's version), it runs as uid 10001
with no shell login, and ``sentinel check-config`` judges the shipped example
configuration inside it. The image is removed afterwards. Where no daemon
answers, tests/package/test_image_recipe.py still runs the builder stage's
steps and the entry point.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sentinel import __version__

REPO = Path(__file__).resolve().parents[2]
BY_HAND = "docker build -t sentinel:dev . && docker run --rm sentinel:dev --version"

pytestmark = pytest.mark.timeout(900)


def _daemon() -> str | None:
    """Why no image can be built here (None: a docker daemon answers)."""
    docker = shutil.which("docker")
    if docker is None:
        return "no docker client"
    info = subprocess.run(
        [docker, "info", "--format", "{{.ServerVersion}}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if info.returncode != 0:
        return "no docker daemon answers: " + (info.stderr.strip().splitlines() or ["?"])[-1]
    return None


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    why = _daemon()
    if why is not None:
        pytest.skip(f"{why}; build it by hand: {BY_HAND}")
    tag = f"sentinel-test:{uuid.uuid4().hex[:12]}"
    built = subprocess.run(
        ["docker", "build", "--tag", tag, str(REPO)],
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    try:
        yield tag
    finally:
        subprocess.run(["docker", "rmi", "--force", tag], capture_output=True, check=False)


def _run(image: str, *args: str, entrypoint: str | None = None) -> str:
    command = ["docker", "run", "--rm", "--network", "none"]
    if entrypoint is not None:
        command += ["--entrypoint", entrypoint]
    done = subprocess.run(
        [*command, image, *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    return done.stdout


def test_the_image_runs_sentinel_as_uid_10001(image: str) -> None:
    assert __version__ in _run(image, "--version")
    assert _run(image, "-u", entrypoint="id").strip() == "10001"


def test_the_image_judges_the_example_configuration(image: str) -> None:
    example = (REPO / "docs" / "sentinel.example.yaml").read_text()
    shown = _run(
        image,
        "-c",
        'printf "%s" "$0" > /tmp/s.yaml && sentinel check-config /tmp/s.yaml',
        example,
        entrypoint="sh",
    )
    assert "enforce" in shown
