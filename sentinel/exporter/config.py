"""The exporter's configuration file: listen address, allowlist, state bounds, modules.

Typed and strict like :mod:`sentinel.config.settings`: unknown keys are errors, every
number is ranged, and every problem is one :class:`~sentinel.config.loader.ConfigError`
naming the file and the key. Modules are checked against the canary catalog
here, at start-up, so a module naming a kind the catalog has no enabled
canary of never reaches a scrape.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sentinel.canary.catalog import Catalog, CatalogError, load_catalog
from sentinel.canary.kinds import KINDS
from sentinel.canary.spec import CanaryKind
from sentinel.capped import FileTooLarge, read_capped_file
from sentinel.config.loader import ConfigError, read_api_key
from sentinel.config.settings import split_host_port

DEFAULT_LISTEN = "0.0.0.0:9116"
MAX_CONFIG_BYTES = 1024 * 1024
MODULE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}$")
# A host pattern: a DNS name, or ``*.`` and a DNS name (any name below it).
HOST_PATTERN = re.compile(r"^(\*\.)?([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9_-]{1,63}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Allow(_Strict):
    """Which targets may be probed: a host pattern matching the name, or CIDRs holding every IP."""

    hosts: tuple[str, ...] = ()
    cidrs: tuple[str, ...] = ()

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        normal = tuple(h.strip().lower().rstrip(".") for h in value)
        for pattern in normal:
            if not HOST_PATTERN.match(pattern):
                raise ValueError(
                    f"{pattern!r} is not a host name or '*.' followed by one "
                    "(a wildcard stands only for the leftmost labels)"
                )
        return normal

    @field_validator("cidrs")
    @classmethod
    def _cidrs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for cidr in value:
            try:
                ipaddress.ip_network(cidr, strict=True)
            except ValueError as exc:
                raise ValueError(f"{cidr!r} is not a CIDR: {exc}") from None
        return value


class Targets(_Strict):
    """Bounds on per-target state: a count (least recently probed dropped) and an idle expiry."""

    max: int = Field(default=1000, ge=1, le=1_000_000)
    idle_seconds: float = Field(default=900.0, ge=1.0, le=30 * 86_400.0)


class Module(_Strict):
    """One ``module=`` of ``/probe``: which canary kinds run, and how."""

    kinds: tuple[str, ...] = ("text",)
    timeout: float = Field(default=10.0, gt=0.0, le=600.0)
    api_key_file: Path | None = None
    model: str | None = Field(default=None, min_length=1, max_length=512)
    metrics: bool = True
    strict: bool = False  # a kind the server cannot do fails the probe instead of being skipped

    @field_validator("kinds")
    @classmethod
    def _kinds(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("at least one canary kind")
        known = [str(k) for k in KINDS]
        for kind in value:
            if kind not in known:
                raise ValueError(f"unknown canary kind {kind!r} (known: {', '.join(known)})")
        if len(set(value)) != len(value):
            raise ValueError("a kind is listed twice")
        return value


class ExporterConfig(_Strict):
    listen: str = DEFAULT_LISTEN
    allow: Allow = Allow()
    targets: Targets = Targets()
    modules: dict[str, Module] = Field(default_factory=dict)

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        split_host_port(value)
        return value

    @field_validator("modules")
    @classmethod
    def _modules(cls, value: dict[str, Module]) -> dict[str, Module]:
        if not value:
            raise ValueError("at least one module")
        for name in value:
            if not MODULE_NAME.match(name):
                raise ValueError(f"module name {name!r}: letters, digits, '_', '.', '-'")
        return value


@dataclass(frozen=True, slots=True)
class ModuleRuntime:
    """A module ready to run: its kinds in catalog order and its API key, read once."""

    name: str
    kinds: tuple[CanaryKind, ...]
    timeout: float
    model: str | None
    metrics: bool
    api_key: str | None
    strict: bool = False


def load_config(path: Path) -> ExporterConfig:
    """Read and validate the file; :class:`ConfigError` names the file and key on any problem."""
    try:
        raw = read_capped_file(path, MAX_CONFIG_BYTES)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except FileTooLarge:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES // 1024} KiB") from None
    try:
        data: Any = yaml.safe_load(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except (yaml.YAMLError, RecursionError) as exc:
        raise ConfigError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with a 'modules' key")
    try:
        return ExporterConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, path)) from None


def _describe(exc: ValidationError, path: Path) -> str:
    problems = []
    for error in exc.errors():
        loc = ".".join(str(part) for part in error["loc"]) or "(file)"
        message = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
        problems.append(f"{path}: {loc}: {message}")
    return "; ".join(problems)


def prepare_modules(config: ExporterConfig, catalog: Catalog) -> Mapping[str, ModuleRuntime]:
    """Each module with its API key read and its kinds checked against ``catalog``."""
    enabled = set(catalog.kinds())
    order = list(KINDS)
    ready: dict[str, ModuleRuntime] = {}
    for name, module in config.modules.items():
        kinds = tuple(sorted((CanaryKind(k) for k in module.kinds), key=order.index))
        missing = [k for k in kinds if k not in enabled]
        if missing:
            raise ConfigError(
                f"modules.{name}.kinds: no enabled canary of kind {', '.join(missing)} "
                "in the catalog"
            )
        try:
            key = read_api_key(module.api_key_file, env={}) if module.api_key_file else None
        except ConfigError as exc:
            raise ConfigError(f"modules.{name}.{exc}") from None
        ready[name] = ModuleRuntime(
            name, kinds, module.timeout, module.model, module.metrics, key, module.strict
        )
    return ready


def read_catalog(catalog_dir: Path | None) -> Catalog:
    """The canary catalog (built-in unless a directory is named), as a configuration error."""
    try:
        return load_catalog(catalog_dir)
    except CatalogError as exc:
        raise ConfigError(str(exc)) from None
