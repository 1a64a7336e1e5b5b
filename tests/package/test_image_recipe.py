"""The Dockerfile's build, run here without a daemon: its builder stage step by step.

tests/loopback/test_image.py builds the real image, but only where a Docker
daemon answers, which is nowhere this suite usually runs. This test reads the
Dockerfile with dockerfile-parse and carries out its instructions in a folder
that stands for the image's root (every absolute path in a step is taken
under it): the build context is this checkout filtered by .dockerignore (with
docker-py's matcher, which follows Docker's rules), each
COPY copies what the image's COPY would, and each builder RUN runs as written
under ``sh -c``, with ``python`` and ``pip`` the plain CPython 3.11 this suite
runs on (the image's base is the same release). Then the entry point runs as
the image would start it, on the final stage's PATH: ``sentinel --version``,
``run --help`` and ``check-config`` of the shipped example.

Where it differs from ``docker build``, on purpose:

* the package index is replaced by a wheelhouse of the same distributions
  (:mod:`tests.package.wheelhouse`), and the context's constraints.txt pins the
  versions installed here, which ``make install`` may have taken newer;
* the final stage's RUN (apt-get for setcap, the file capability, the user) is
  not run: it changes the machine, not the build. The test fails on any other
  final-stage RUN, so a new step cannot go untested silently. Its shape is
  checked by tests/unit/inject/test_manifests.py, uid 10001 by tests/nonroot.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from docker.utils.build import exclude_paths  # type: ignore[import-untyped]
from dockerfile_parse import DockerfileParser  # type: ignore[import-untyped]

from sentinel import __version__
from tests.package import wheelhouse

REPO = Path(__file__).resolve().parents[2]
# What the final stage's RUN may do without being run here: system setup only.
SYSTEM_SETUP = {"apt-get", "setcap", "getcap", "rm", "groupadd", "useradd"}
ABSOLUTE = re.compile(r"(?<![\w.~/-])/(?=[\w.])")

pytestmark = pytest.mark.timeout(240)


def build_context(into: Path) -> Path:
    """This checkout as Docker sends it: what .dockerignore leaves (docker-py's matcher)."""
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for name in sorted(exclude_paths(str(REPO), patterns)):
        source, target = REPO / name, into / name
        if source.is_dir() and not source.is_symlink():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target, follow_symlinks=False)
    (into / "constraints.txt").write_text(wheelhouse.installed_constraints(), encoding="utf-8")
    return into


def base_pip() -> str:
    """The base interpreter's pip, as the image has; this environment's where it has none
    (a distribution's Python without its pip package)."""
    python = wheelhouse.base_python()
    found = subprocess.run([python, "-c", "import pip"], capture_output=True, check=False)
    return shlex.join([python if found.returncode == 0 else sys.executable, "-m", "pip"])


@dataclass
class Image:
    """The folder standing for the image's root, and what the last stage declared."""

    root: Path
    context: Path
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def here(self, text: str) -> str:
        """``text`` with each absolute path taken under the root."""
        return ABSOLUTE.sub(f"{self.root}/", text)

    def path(self, image_path: str) -> Path:
        return Path(
            self.here(image_path if image_path.startswith("/") else self.workdir + "/" + image_path)
        )

    def from_(self, value: str) -> None:
        """A stage on the Python base: ``python`` and ``pip`` in /usr/local/bin."""
        self.env = {}
        self.workdir = "/"
        bin_dir = self.path("/usr/local/bin")
        bin_dir.mkdir(parents=True, exist_ok=True)
        if not (bin_dir / "python").exists():
            (bin_dir / "python").symlink_to(wheelhouse.base_python())
            pip = bin_dir / "pip"
            pip.write_text(f'#!/bin/sh\nexec {base_pip()} "$@"\n')
            pip.chmod(0o755)

    def env_(self, value: str) -> None:
        for assignment in shlex.split(value):
            name, _, setting = assignment.partition("=")
            if name == "PATH":
                setting = self.here(setting)
            self.env[name] = setting

    def workdir_(self, value: str) -> None:
        self.workdir = value
        self.path(".").mkdir(parents=True, exist_ok=True)

    def copy(self, value: str) -> None:
        words = shlex.split(value)
        flags = [w for w in words if w.startswith("--")]
        *sources, dest = [w for w in words if not w.startswith("--")]
        stage = next((f.split("=", 1)[1] for f in flags if f.startswith("--from=")), None)
        target = self.path(dest)
        for source in sources:
            origin = self.path(source) if stage else self.context / source
            into = target / origin.name if dest.endswith("/") else target
            if origin == into:
                continue  # one root stands for both stages
            into.parent.mkdir(parents=True, exist_ok=True)
            if origin.is_dir():
                shutil.copytree(origin, into, symlinks=True, dirs_exist_ok=True)
            else:
                shutil.copy2(origin, into)

    def run(self, value: str, *, final: bool, pip_env: dict[str, str]) -> None:
        if final:
            commands = [shlex.split(c)[0] for c in value.split("&&")]
            unknown = set(commands) - SYSTEM_SETUP
            assert not unknown, f"a final-stage step this test cannot stand in for: {unknown}"
            self.skipped.append(value)
            return
        env = {
            **pip_env,
            "PATH": f"{self.path('/usr/local/bin')}:/usr/bin:/bin",
            "HOME": str(self.root.parent),
            **self.env,
        }
        done = subprocess.run(
            ["sh", "-c", self.here(value)],
            cwd=self.path("."),
            env=env,
            capture_output=True,
            text=True,
            timeout=200,
            check=False,
        )
        assert done.returncode == 0, (value, done.stdout[-3000:], done.stderr[-3000:])


def carry_out(image: Image, pip_env: dict[str, str]) -> Image:
    instructions = DockerfileParser(path=str(REPO / "Dockerfile")).structure
    stage_starts = [n for n, i in enumerate(instructions) if i["instruction"] == "FROM"]
    for n, instruction in enumerate(instructions):
        kind, value = instruction["instruction"], instruction["value"]
        final = n > stage_starts[-1]
        if kind == "FROM":
            image.from_(value)
        elif kind == "ENV":
            image.env_(value)
        elif kind == "WORKDIR":
            image.workdir_(value)
        elif kind == "COPY":
            image.copy(value)
        elif kind == "RUN":
            image.run(value, final=final, pip_env=pip_env)
        elif kind == "ENTRYPOINT":
            image.entrypoint = json.loads(value)
        elif kind == "CMD":
            image.cmd = json.loads(value)
        else:
            assert kind in {"ARG", "COMMENT", "USER", "EXPOSE", "LABEL"}, kind
    return image


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    work = tmp_path_factory.mktemp("recipe")
    pip_env = wheelhouse.pip_environment(wheelhouse.build(work / "wheelhouse"))
    return carry_out(Image(root=work / "root", context=build_context(work / "context")), pip_env)


def start(image: Image, *args: str) -> subprocess.CompletedProcess[str]:
    """The container's process: ENTRYPOINT + args on the final stage's environment."""
    env = {"HOME": str(image.root.parent), **image.env}
    program = shutil.which(image.entrypoint[0], path=env["PATH"])
    assert program is not None, f"{image.entrypoint[0]} is not on the image's PATH"
    assert Path(program).is_relative_to(image.root), program
    return subprocess.run(
        [program, *image.entrypoint[1:], *args],
        cwd=image.root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_entry_point_is_the_installed_sentinel(image: Image) -> None:
    assert image.entrypoint == ["sentinel"]
    shown = start(image, "--version")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == f"sentinel {__version__}"
    helped = start(image, *image.cmd, "--help")
    assert helped.returncode == 0, helped.stderr
    assert "usage: sentinel run" in helped.stdout


def test_the_image_judges_the_example_configuration(image: Image, tmp_path: Path) -> None:
    example = tmp_path / "sentinel.yaml"
    shutil.copy(REPO / "docs" / "sentinel.example.yaml", example)
    judged = start(image, "check-config", str(example))
    assert judged.returncode == 0, (judged.stdout, judged.stderr)
    assert "enforce" in judged.stdout


def test_the_image_holds_the_sidecar_alone_with_its_ptrace_copy_of_py_spy(image: Image) -> None:
    venv = image.path("/opt/sentinel")
    python = venv / "bin" / "python"
    # The simulated vLLM is outside the build context, so not in the image's wheel.
    sim = subprocess.run(
        [python, "-c", "import sentinel_sim"],
        cwd=image.root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert sim.returncode != 0
    assert "No module named 'sentinel_sim'" in sim.stderr
    assert not (venv / "bin" / "pip").exists()
    spy = subprocess.run(
        [venv / "ptrace" / "py-spy", "--version"], capture_output=True, text=True, timeout=60
    )
    assert spy.returncode == 0, spy.stderr
    assert spy.stdout.startswith("py-spy")
    assert [s for s in image.skipped if "setcap cap_sys_ptrace+ep" in s]


def test_the_build_context_is_cut_as_docker_cuts_it(tmp_path: Path) -> None:
    context = build_context(tmp_path)
    # .dockerignore's `diagnostics` is the top-level output folder only.
    assert (context / "sentinel" / "diagnostics" / "__init__.py").is_file()
    for left_out in ("chaos", "sentinel_sim", "tests", ".git", ".venv"):
        assert not (context / left_out).exists(), left_out
    assert not list(context.rglob("__pycache__"))


def test_a_final_stage_step_it_cannot_stand_in_for_fails(tmp_path: Path) -> None:
    image = Image(root=tmp_path, context=tmp_path)
    image.run("apt-get update && rm -rf /var/lib/apt/lists/*", final=True, pip_env={})
    with pytest.raises(AssertionError, match="cannot stand in for"):
        image.run("apt-get update && wget -O /x somewhere", final=True, pip_env={})
