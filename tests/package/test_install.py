"""sentinel installs as a user installs it: ``pip install .`` from a clone, and the built wheel.

The clone is the files a clone of this working tree holds (tracked files and
untracked ones git does not ignore; on CI, a clone of the commit), copied into
a temporary folder, so nothing built or ignored here (an egg-info, a .venv,
caches) can help. From it ``python -m build`` makes the sdist, then the wheel
from that sdist (so a file missing from the sdist breaks the wheel), and both
pass ``twine check --strict``. Each install goes into a fresh virtual
environment made by the plain interpreter with no site-packages of its own,
where pip resolves every declared dependency from a wheelhouse of the pinned
versions (:mod:`tests.package.wheelhouse`: the index replaced by a folder, so
it runs offline); then the installed ``sentinel`` command answers
``--version``, from the environment's own copy, not from this checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from sentinel import __version__
from tests.package import wheelhouse

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(240)


def _run(command: Sequence[str | Path], env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(
        [str(c) for c in command],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, (command, done.stdout[-3000:], done.stderr[-3000:])
    return done.stdout


def clone_of_working_tree(into: Path) -> Path:
    """The files ``git clone`` of this working tree would hold, copied into ``into``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        cwd=REPO,
        timeout=60,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if not source.exists() and not source.is_symlink():
            continue  # deleted here, not yet committed
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)
    return into


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("install")


@pytest.fixture(scope="module")
def pip_env(work: Path) -> dict[str, str]:
    return wheelhouse.pip_environment(wheelhouse.build(work / "wheelhouse"))


@pytest.fixture(scope="module")
def clone(work: Path) -> Path:
    return clone_of_working_tree(work / "clone")


def fresh_install(venv: Path, target: Path, env: dict[str, str]) -> Path:
    """``pip install TARGET`` into a new, empty virtual environment; its bin folder."""
    _run([wheelhouse.base_python(), "-m", "venv", "--without-pip", venv], env, venv.parent)
    # This environment's pip, pointed at the new interpreter (pip --python):
    # the new one has no pip of its own, and pyc compilation is not what is tested.
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            venv / "bin" / "python",
            "install",
            "--no-compile",
            target,
        ],
        env,
        venv.parent,
    )
    return venv / "bin"


def assert_runs_from(bin_dir: Path, env: dict[str, str]) -> None:
    """``sentinel --version`` answers, and sentinel is imported from the environment."""
    assert _run([bin_dir / "sentinel", "--version"], env, bin_dir).strip() == (
        f"sentinel {__version__}"
    )
    where = _run(
        [bin_dir / "python", "-c", "import sentinel; print(sentinel.__file__)"], env, bin_dir
    )
    assert Path(where.strip()).is_relative_to(bin_dir.parent), where


def test_pip_install_from_a_clone_runs_sentinel(
    work: Path, clone: Path, pip_env: dict[str, str]
) -> None:
    bin_dir = fresh_install(work / "from-clone", clone, pip_env)
    assert_runs_from(bin_dir, pip_env)


def test_the_built_wheel_and_sdist_pass_twine_and_the_wheel_runs_sentinel(
    work: Path, clone: Path, pip_env: dict[str, str]
) -> None:
    dist = work / "dist"
    # python -m build: the sdist, then the wheel built from the unpacked sdist.
    _run([sys.executable, "-m", "build", "--outdir", dist, clone], pip_env, clone)
    wheels = sorted(dist.glob("*.whl"))
    sdists = sorted(dist.glob("*.tar.gz"))
    assert [w.name for w in wheels] == [f"sentinel_probe-{__version__}-py3-none-any.whl"]
    assert [s.name for s in sdists] == [f"sentinel_probe-{__version__}.tar.gz"]
    checked = _run(
        [sys.executable, "-m", "twine", "check", "--strict", *wheels, *sdists], pip_env, work
    )
    assert checked.count("PASSED") == 2, checked
    bin_dir = fresh_install(work / "from-wheel", wheels[0], pip_env)
    assert_runs_from(bin_dir, pip_env)
    # The demo's simulated vLLM ships in the wheel, and so does the license.
    _run([bin_dir / "python", "-c", "import sentinel_sim"], pip_env, bin_dir)
    # So does the canary catalog (package data: the YAML specs and the image beside them).
    loads = "from sentinel.canary.catalog import load_catalog; print(len(load_catalog().specs))"
    assert _run([bin_dir / "python", "-c", loads], pip_env, bin_dir).strip() == "4"
    licenses = list(
        (bin_dir.parent / "lib").glob("python3*/site-packages/sentinel_probe-*/licenses/LICENSE")
    )
    assert licenses, "LICENSE is not in the installed wheel"
