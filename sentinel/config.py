"""Configuration: typed, strict, checkable; defaults in code.

Sources, lowest precedence first: the defaults below, a YAML file
(``--config``), ``SENTINEL_*`` environment variables, command-line flags.
Unknown keys are rejected and every error names the key and where it came
from, so ``sentinel check-config FILE`` and a bad start-up say exactly what to
fix. The API key itself is never a setting: it is read from
``--api-key-file`` (``SENTINEL_API_KEY_FILE``) or ``SENTINEL_API_KEY`` when
needed and never logged.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from sentinel.verdict import Action, Policy

ENV_PREFIX = "SENTINEL_"
# A settings file is a page of YAML; anything much larger is a wrong path.
MAX_CONFIG_BYTES = 1024 * 1024
# Words meaning "no gRPC listener" for ``grpc_listen`` (flag, variable or file).
GRPC_OFF = frozenset({"", "off", "none", "false", "disabled"})

# Every duration setting: (least, most) seconds. A duration outside its range
# is refused naming the unit: ``hang_window: .inf`` would mean liveness can
# never fail, ``process_interval: 1e-12`` a loop that never yields.
DAY = 86_400.0
SECONDS_RANGES: dict[str, tuple[float, float]] = {
    "scrape_interval": (0.1, 3600.0),
    "scrape_timeout": (0.1, 3600.0),
    "health_interval": (0.1, 3600.0),
    "health_timeout": (0.1, 60.0),
    "process_interval": (0.1, 3600.0),
    "eval_interval": (0.05, 60.0),
    "idle_window": (0.0, DAY),
    "hang_window": (1.0, DAY),
    "no_evidence_window": (1.0, DAY),
    "dead_grace": (0.0, 3600.0),
    "brake_window": (60.0, 7 * DAY),
    "shutdown_timeout": (0.1, 600.0),
    "interval": (0.1, DAY),
    "deadline": (0.1, 3600.0),
}


def _finite_in_range(value: object, field: str | None) -> object:
    """Refuse a non-finite float anywhere, and a duration outside its range, with units."""
    if not isinstance(value, float):
        return value
    bounds = SECONDS_RANGES.get(field or "")
    if bounds is None:
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number, got {value}")
        return value
    least, most = bounds
    if not math.isfinite(value) or not least <= value <= most:
        raise ValueError(f"must be between {least:g} s and {most:g} s, got {value:g} s")
    return value


class CanaryOverride(BaseModel):
    """Per-canary timing and policy overrides on top of the catalog's YAML."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    interval: float | None = None
    deadline: float | None = None
    jitter: float | None = Field(default=None, ge=0, lt=1)
    enabled: bool | None = None
    policy: Action | None = None

    @field_validator("*", mode="after")
    @classmethod
    def _finite(cls, value: object, info: ValidationInfo) -> object:
        return _finite_in_range(value, info.field_name)


class Settings(BaseModel):
    """Every knob of ``sentinel run``; the defaults are DESIGN.md's table."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target: str = "http://127.0.0.1:8000"
    listen: str = "0.0.0.0:8471"
    # None: no gRPC listener (``off``); the Kubernetes gRPC-probe variant turns it on.
    grpc_listen: str | None = "0.0.0.0:8472"
    probes: Path | None = None
    enforce: bool = True
    api_key_file: Path | None = None
    diagnostics_dir: Path = Path("/tmp/sentinel-diagnostics")
    diagnostics: bool = True
    diagnostics_max_incidents: int = Field(default=20, ge=1)
    diagnostics_max_bytes: int = Field(default=200 * 1024 * 1024, ge=1024)
    # One bundle: each section (a /metrics scrape set, a stack dump) and the whole.
    diagnostics_section_max_bytes: int = Field(default=8 * 1024 * 1024, ge=64 * 1024)
    diagnostics_bundle_max_bytes: int = Field(default=32 * 1024 * 1024, ge=256 * 1024)
    model: str | None = None
    scheduling_policy: Literal["auto", "priority", "fcfs"] = "auto"
    watch_processes: bool = True

    scrape_interval: float = 2.0
    # A busy API server answers /metrics late; a late sample is still evidence.
    scrape_timeout: float = 10.0
    health_interval: float = 2.0
    process_interval: float = 1.0
    eval_interval: float = 0.5
    idle_window: float = 5.0
    hang_window: float = 15.0
    no_evidence_window: float = 30.0
    dead_grace: float = 5.0
    broken_window: float = 60.0
    listener_grace: float = 30.0
    path_misses: int = Field(default=2, ge=1)
    ready_out_after: int = Field(default=2, ge=1)
    ready_back_after: int = Field(default=3, ge=1)
    brake_max_restarts: int = Field(default=3, ge=1)
    brake_window: float = 3600.0
    engine_policy: Action = Action.RESTART
    dead_policy: Action = Action.RESTART
    broken_policy: Action = Action.RESTART
    listener_policy: Action = Action.RESTART
    shutdown_timeout: float = 5.0
    # Caps on what the target may send (hostile or merely huge answers).
    # vLLM's whole exposition is well under 1 MiB and the series sentinel
    # reads number a few dozen, even with data-parallel engines.
    health_timeout: float = Field(default=2.0, gt=0, le=60)
    metrics_max_bytes: int = Field(default=8 * 1024 * 1024, ge=64 * 1024)
    metrics_max_lines: int = Field(default=100_000, ge=100)
    metrics_max_line_bytes: int = Field(default=64 * 1024, ge=1024)
    metrics_max_series: int = Field(default=1_000, ge=10)
    canary_max_bytes: int = Field(default=1024 * 1024, ge=4096)
    canaries: dict[str, CanaryOverride] = Field(default_factory=dict)

    log_format: Literal["auto", "json", "console"] = "auto"
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    @field_validator("target")
    @classmethod
    def _target_is_http(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        split_host_port(value)
        return value

    @field_validator("grpc_listen", mode="before")
    @classmethod
    def _grpc_host_port(cls, value: object) -> object:
        if value is None or (isinstance(value, str) and value.strip().lower() in GRPC_OFF):
            return None
        if isinstance(value, str):
            split_host_port(value)
        return value

    @field_validator("*", mode="after")
    @classmethod
    def _finite(cls, value: object, info: ValidationInfo) -> object:
        return _finite_in_range(value, info.field_name)

    @model_validator(mode="after")
    def _cross_field(self) -> Settings:
        if self.no_evidence_window < self.hang_window:
            raise ValueError(
                "no_evidence_window must be at least hang_window "
                f"({self.no_evidence_window} < {self.hang_window})"
            )
        if self.hang_window <= 2 * self.scrape_interval:
            raise ValueError(
                "hang_window must exceed two scrape intervals, or progress cannot be seen "
                f"({self.hang_window} <= 2 x {self.scrape_interval})"
            )
        if self.scrape_timeout >= self.no_evidence_window:
            raise ValueError(
                "scrape_timeout must be shorter than no_evidence_window "
                f"({self.scrape_timeout} >= {self.no_evidence_window})"
            )
        if self.eval_interval > self.hang_window / 4:
            raise ValueError("eval_interval must be at most a quarter of hang_window")
        return self

    @property
    def evidence_freshness(self) -> float:
        """How old the last /metrics sample may be and still count as evidence."""
        return self.scrape_interval * 2 + self.scrape_timeout

    def policy(self) -> Policy:
        return Policy(
            enforce=self.enforce,
            hang_window=self.hang_window,
            no_evidence_window=self.no_evidence_window,
            dead_grace=self.dead_grace,
            path_misses=self.path_misses,
            ready_out_after=self.ready_out_after,
            ready_back_after=self.ready_back_after,
            brake_max_restarts=self.brake_max_restarts,
            brake_window=self.brake_window,
            engine_action=self.engine_policy,
            dead_action=self.dead_policy,
            broken_window=self.broken_window,
            listener_grace=self.listener_grace,
            broken_action=self.broken_policy,
            listener_action=self.listener_policy,
        )


class ConfigError(Exception):
    """A configuration problem, with the key and the source in its message."""


def split_host_port(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) -> (host, port); port 0 allowed."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


FIELDS = tuple(Settings.model_fields)


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def load_settings(
    config_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> Settings:
    """Merge the sources and validate once; raise :class:`ConfigError` naming the culprit."""
    env = os.environ if env is None else env
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    if config_file is None and env.get(env_name("config")):
        config_file = Path(env[env_name("config")])
    if config_file is not None:
        for key, value in _read_file(config_file).items():
            merged[key] = value
            origin[key] = str(config_file)
    unknown = unknown_env(env)
    if unknown:
        raise ConfigError(
            f"unknown environment variable{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(unknown)} (known: {ENV_PREFIX}<setting>, e.g. {env_name('target')})"
        )
    for field in FIELDS:
        name = env_name(field)
        if name not in env:
            continue
        value = env[name]
        where = f"environment variable {name}"
        _check_text(value, where)
        merged[field] = _parse_mapping(value, where) if field == "canaries" else value
        origin[field] = where
    for key, value in (flags or {}).items():
        if value is not None:
            merged[key] = value
            origin[key] = f"flag --{key.replace('_', '-')}"
    try:
        return Settings.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, origin, config_file)) from None


# Variables that are not settings but are read under the prefix, and the shapes
# Kubernetes injects for a Service named ``sentinel...`` (service links), which
# a pod receives whether it wants them or not.
OTHER_ENV = frozenset({ENV_PREFIX + "CONFIG", ENV_PREFIX + "API_KEY"})
SERVICE_LINK = re.compile(
    r"^[A-Z0-9_]*_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_\d+_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?)?)$"
)


def unknown_env(env: Mapping[str, str]) -> list[str]:
    """``SENTINEL_*`` variables that name no setting: a typo there would be silently ignored."""
    known = {env_name(field) for field in FIELDS} | OTHER_ENV
    return sorted(
        name
        for name in env
        if name.startswith(ENV_PREFIX) and name not in known and not SERVICE_LINK.match(name)
    )


def _check_text(value: str, where: str) -> None:
    """An environment value that was not valid UTF-8 arrives with surrogates: refuse it."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(f"{where}: not valid UTF-8 text") from None


def _parse_mapping(value: str, where: str) -> Any:
    """A structured variable (``SENTINEL_CANARIES``): YAML or JSON flow, as in the file."""
    data = _load_yaml(value, where)
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping such as {{text: {{interval: 10}}}}")
    return data


def _load_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load``, with every way it can fail as one line naming ``where``.

    A deeply nested document exhausts the recursion limit inside PyYAML's
    composer; that is a malformed input too, not a crash.
    """
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML: {_one_line(str(exc))}") from None
    except RecursionError:
        raise ConfigError(f"{where}: not valid YAML: nested too deeply") from None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _read_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{path}: larger than {MAX_CONFIG_BYTES // 1024} KiB; not a settings file"
        )
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    data = _load_yaml(text, str(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of settings, got {type(data).__name__}")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def _describe(exc: ValidationError, origin: Mapping[str, str], config_file: Path | None) -> str:
    lines = []
    for error in exc.errors():
        loc = ".".join(str(part) for part in error["loc"])
        top = str(error["loc"][0]) if error["loc"] else ""
        where = origin.get(top) or (str(config_file) if config_file else "settings")
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = "unknown key"
        lines.append(f"{where}: {loc or '(settings)'}: {message}")
    return "\n".join(lines)


def read_api_key(
    source: Settings | Path | None = None, env: Mapping[str, str] | None = None
) -> str | None:
    """The target's API key: the key file, else ``SENTINEL_API_KEY``; never logged.

    The one reader for the daemon and ``sentinel probe``. ``source`` is the
    settings (their ``api_key_file``) or a key file named directly (``probe
    --api-key-file``); without one, ``SENTINEL_API_KEY_FILE`` names the file.
    A key file is read the way secret mounts and editors write it: a UTF-8
    byte-order mark and surrounding whitespace (the trailing newline) are not
    part of the key. A file of more than one line is refused rather than sent
    whole, since no server would accept it and the error would name neither
    the file nor the cause; the message names the file, never its content.
    """
    env = os.environ if env is None else env
    key_file = source.api_key_file if isinstance(source, Settings) else source
    if key_file is None and env.get(ENV_PREFIX + "API_KEY_FILE"):
        key_file = Path(env[ENV_PREFIX + "API_KEY_FILE"])
    if key_file is None:
        from_env = env.get(ENV_PREFIX + "API_KEY", "").removeprefix("\ufeff").strip()
        if from_env:
            _check_text(from_env, f"environment variable {ENV_PREFIX}API_KEY")
        return from_env or None
    try:
        text = key_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise ConfigError(f"api_key_file: cannot read {key_file}: {reason}") from None
    key = text.removeprefix("\ufeff").strip()
    if not key:
        raise ConfigError(f"api_key_file: {key_file} is empty")
    if len(key.splitlines()) > 1:
        raise ConfigError(
            f"api_key_file: {key_file} holds more than one line; it must hold the key alone"
        )
    return key


def effective_config(settings: Settings) -> dict[str, Any]:
    """The settings as JSON-able data, for ``/status`` and diagnostics bundles."""
    return settings.model_dump(mode="json")
