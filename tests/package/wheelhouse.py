"""A local wheelhouse of sentinel's dependencies, repacked from this virtual environment.

The packaging tests install sentinel the way a user or the image build does,
with pip resolving every dependency, but they must run without reaching a
package index. So the index is replaced by a folder: each distribution
sentinel depends on (and setuptools, the build backend) is repacked into a
wheel from the files this virtual environment installed for it (its RECORD),
with the tags its own WHEEL file names. pip then installs from that folder with
``--no-index`` exactly as it would from the index, at the same versions.

What this does not prove: that the index serves those versions (CI's
``make install`` does, every run) or that a wheel of another platform installs.
"""

from __future__ import annotations

import email
import os
import stat
import sys
from importlib import metadata
from pathlib import Path, PurePosixPath
from zipfile import ZIP_STORED, ZipInfo

from wheel.wheelfile import WheelFile  # type: ignore[import-untyped]

from tests.unit.inject.test_manifests import runtime_closure

REPO = Path(__file__).resolve().parents[2]
CONSTRAINTS = REPO / "constraints.txt"
# The build backend, for pip's isolated build of sentinel itself.
BUILD_BACKEND = ("setuptools",)
# What an installer writes into dist-info for itself, not part of a wheel.
INSTALLER_FILES = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}


def _tags(wheel_metadata: str) -> str:
    """The compressed tag triple of a wheel's filename, from its WHEEL file's Tag lines."""
    found = email.message_from_string(wheel_metadata).get_all("Tag") or []
    triples = [t.strip().split("-") for t in found if t.count("-") == 2]
    if not triples:
        raise ValueError("no Tag in WHEEL")
    return "-".join(".".join(sorted({t[i] for t in triples})) for i in range(3))


def _console_scripts(distribution: metadata.Distribution) -> set[str]:
    return {
        entry.name
        for entry in distribution.entry_points
        if entry.group in ("console_scripts", "gui_scripts")
    }


def repack(distribution: metadata.Distribution, into: Path) -> Path:
    """One installed distribution as a wheel in ``into``; returns its path."""
    files = distribution.files or []
    dist_info = next((f.parts[0] for f in files if f.parts[0].endswith(".dist-info")), None)
    if dist_info is None:
        raise ValueError(f"{distribution.metadata['Name']}: no dist-info in its RECORD")
    namever = dist_info.removesuffix(".dist-info")
    wheel_text = distribution.read_text("WHEEL") or ""
    target = into / f"{namever}-{_tags(wheel_text)}.whl"
    scripts = _console_scripts(distribution)
    with WheelFile(target, "w", compression=ZIP_STORED) as wheel:  # fast; size is moot
        for file in files:
            parts = PurePosixPath(str(file)).parts
            if "__pycache__" in parts or file.suffix == ".pyc":
                continue
            if parts[0] == dist_info and parts[-1] in INSTALLER_FILES:
                continue
            source = Path(str(file.locate()))
            if parts[0] == "..":
                # Outside site-packages: a data script (py-spy's binary) goes
                # back to .data/scripts; console scripts the installer writes anew.
                if parts[-2] != "bin" or parts[-1] in scripts:
                    continue
                arcname = f"{namever}.data/scripts/{parts[-1]}"
                data = source.read_bytes()
                first, newline, rest = data.partition(b"\n")
                if first.startswith(b"#!") and b"python" in first:
                    data = b"#!python" + newline + rest
                entry = ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))
                entry.compress_type = ZIP_STORED
                entry.external_attr = (0o755 | stat.S_IFREG) << 16  # a script runs
                wheel.writestr(entry, data)
                continue
            wheel.write(str(source), "/".join(parts))
    return target


def build(into: Path) -> Path:
    """Every runtime dependency of sentinel (transitively), and the build backend, as wheels.

    At the versions installed here, which may be newer than constraints.txt's
    pins (``make install`` takes the newest): callers that install with the
    pins use :func:`installed_constraints` in their place. A dependency that
    pyproject.toml declares and constraints.txt misses is still here (that gap
    is tests/unit/inject/test_manifests.py's to report).
    """
    into.mkdir(parents=True, exist_ok=True)
    for name in [*runtime_closure(), *BUILD_BACKEND]:
        repack(metadata.distribution(name), into)
    return into


def installed_constraints() -> str:
    """constraints.txt's text with each pin at the version installed here."""
    lines = []
    for line in CONSTRAINTS.read_text(encoding="utf-8").splitlines():
        name, sep, _ = line.partition("==")
        if sep and not line.startswith("#"):
            line = f"{name}=={metadata.version(name)}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def pip_environment(wheelhouse: Path) -> dict[str, str]:
    """The environment for pip with the index replaced by ``wheelhouse``.

    No pip configuration file of this machine applies (a developer's index or
    constraints would change what is proven), nor any PIP_ variable set here.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(wheelhouse),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    return env


def base_python() -> str:
    """The interpreter this virtual environment was made from: a plain CPython 3.11."""
    return str(getattr(sys, "_base_executable", sys.executable))
