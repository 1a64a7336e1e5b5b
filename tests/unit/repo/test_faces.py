"""Package faces: every package says what it owns and lists its public names, each with one home.

A face is a package's ``__init__``: its docstring and its ``__all__``. These
tests keep faces honest (every listed name resolves, is defined in the
package, lives in one face only and does not hide a submodule of the same
name) and keep them cheap: a face must not make a light import heavy, which
a subprocess shows by what the import loaded.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import sentinel

ROOT = Path(sentinel.__file__).parent


def _packages() -> list[str]:
    """Found on disk, so that collecting the tests imports nothing."""
    found = ROOT.parent.glob("sentinel/**/__init__.py")
    return sorted(".".join(init.parent.relative_to(ROOT.parent).parts) for init in found)


PACKAGES = _packages()


def _submodules(package: ModuleType) -> set[str]:
    return {info.name for info in pkgutil.iter_modules(package.__path__)}


def test_packages_are_found() -> None:
    assert {"sentinel.canary", "sentinel.verdict.hangs", "sentinel.record"} <= set(PACKAGES)


@pytest.mark.parametrize("name", PACKAGES)
def test_face_says_what_the_package_owns(name: str) -> None:
    package = importlib.import_module(name)
    doc = package.__doc__ or ""
    assert "\n\n" in doc.strip(), f"{name}: a summary line and at least one paragraph"
    assert isinstance(package.__dict__.get("__all__"), list), f"{name} declares no __all__"


@pytest.mark.parametrize("name", PACKAGES)
def test_face_names_resolve_at_home(name: str) -> None:
    package = importlib.import_module(name)
    public: list[str] = package.__all__
    assert len(public) == len(set(public)), f"{name}: a name listed twice"
    hidden = set(public) & _submodules(package) if hasattr(package, "__path__") else set()
    assert not hidden, f"{name}: {sorted(hidden)} would hide the submodule of that name"
    for attr in public:
        value = getattr(package, attr)
        if inspect.isclass(value) or inspect.isfunction(value):
            home = str(getattr(value, "__module__", ""))
            assert home.startswith(name), f"{name}.{attr} is defined in {home}: not its home"


def test_each_public_name_has_one_face() -> None:
    seen: dict[int, str] = {}
    for name in PACKAGES:
        package = importlib.import_module(name)
        for attr in package.__all__:
            value = getattr(package, attr)
            if not (inspect.isclass(value) or inspect.isfunction(value)):
                continue
            where = f"{name}.{attr}"
            assert id(value) not in seen, f"{where} is also {seen[id(value)]}"
            seen[id(value)] = where


# What importing a face must not load: the libraries its light users never needed.
LIGHT = {
    "sentinel.verdict": (
        "asyncio",
        "PIL",
        "jsonschema",
        "httpx",
        "yaml",
        "aiohttp",
        "grpc",
        "kubernetes",
    ),
    "sentinel.canary": ("asyncio", "PIL", "jsonschema", "httpx", "yaml", "structlog", "pydantic"),
    "sentinel.evidence": ("httpx", "psutil", "prometheus_client", "yaml"),
    "sentinel.inject": ("ruamel", "yaml"),
    "sentinel.fleet": ("structlog", "httpx", "prometheus_client", "kubernetes"),
    "sentinel.diagnostics": ("psutil", "httpx", "prometheus_client", "pynvml", "PIL"),
    "sentinel.telemetry": ("kubernetes", "prometheus_client", "httpx"),
}


@pytest.mark.parametrize("name", sorted(LIGHT))
def test_face_stays_light(name: str) -> None:
    heavy = LIGHT[name]
    code = f"import sys, {name}\nprint(' '.join(m for m in {heavy!r} if m in sys.modules))\n"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == [], f"importing {name} loads {done.stdout.strip()}"
