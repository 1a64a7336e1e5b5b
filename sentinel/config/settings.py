"""The settings model: every knob of ``sentinel run``, typed, ranged and cross-checked.

Pure data and validation; where the values come from (defaults, a YAML file,
``SENTINEL_*`` variables, flags) is :mod:`sentinel.config.loader`'s business, which
also re-exports these names. Every number is finite and ranged with its unit
(:data:`RANGES`), so a typo such as ``hang_window: .inf`` (liveness that can
never fail) or ``metrics_max_bytes: 0`` is refused naming the key and unit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from sentinel.verdict import Action, Policy

# Words meaning "no gRPC listener" for ``grpc_listen`` (flag, variable or file).
GRPC_OFF = frozenset({"", "off", "none", "false", "disabled"})

# Every duration setting: (least, most) seconds. A duration outside its range
# is refused naming the unit: ``hang_window: .inf`` would mean liveness can
# never fail, ``process_interval: 1e-12`` a loop that never yields.
DAY = 86_400.0
KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
SECONDS_RANGES: dict[str, tuple[float, float]] = {
    "scrape_interval": (0.1, 3600.0),
    "scrape_timeout": (0.1, 3600.0),
    "health_interval": (0.1, 3600.0),
    "health_timeout": (0.1, 60.0),
    "broken_window": (1.0, DAY),
    "listener_grace": (1.0, DAY),
    "process_interval": (0.1, 3600.0),
    "eval_interval": (0.05, 60.0),
    "idle_window": (0.0, DAY),
    "hang_window": (1.0, DAY),
    "step_window": (1.0, DAY),
    "no_evidence_window": (1.0, DAY),
    "dead_grace": (0.0, 3600.0),
    "brake_window": (60.0, 7 * DAY),
    "maintenance_max": (1.0, DAY),
    "shutdown_timeout": (0.1, 600.0),
    "interval": (0.1, DAY),
    "deadline": (0.1, 3600.0),
    "late_wait": (0.0, DAY),
    "lifecycle_interval": (0.1, 3600.0),
    "pause_bound": (1.0, 30 * DAY),
    "sleep_bound": (1.0, 365 * DAY),
    "compile_grace": (0.0, DAY),
}
# Every cap and count: (least, most, unit). A cap of 0 would refuse every
# answer; one of 10**18 is no cap at all.
COUNT_RANGES: dict[str, tuple[int, int, str]] = {
    "diagnostics_max_incidents": (1, 10_000, "incidents"),
    "diagnostics_max_bytes": (KIB, 1024 * GIB, "bytes"),
    "diagnostics_section_max_bytes": (64 * KIB, GIB, "bytes"),
    "diagnostics_bundle_max_bytes": (256 * KIB, 16 * GIB, "bytes"),
    "metrics_max_bytes": (64 * KIB, GIB, "bytes"),
    "metrics_max_lines": (100, 100_000_000, "lines"),
    "metrics_max_line_bytes": (KIB, 64 * MIB, "bytes"),
    "metrics_max_series": (10, 1_000_000, "series"),
    "canary_max_bytes": (4 * KIB, 256 * MIB, "bytes"),
    "path_misses": (1, 100, "canaries"),
    "ready_out_after": (1, 100, "evaluations"),
    "ready_back_after": (1, 100, "evaluations"),
    "brake_max_restarts": (1, 1_000, "restarts"),
}
RANGES: dict[str, tuple[float, float, str]] = {
    **{name: (least, most, "s") for name, (least, most) in SECONDS_RANGES.items()},
    **COUNT_RANGES,
}


def _finite_in_range(value: object, field: str | None) -> object:
    """Refuse a non-finite number anywhere, and a ranged setting outside its range, with units."""
    if isinstance(value, bool) or not isinstance(value, float | int):
        return value
    bounds = RANGES.get(field or "")
    if bounds is None:
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number, got {value}")
        return value
    least, most, unit = bounds
    if not math.isfinite(value) or not least <= value <= most:
        raise ValueError(
            f"must be between {least:g} {unit} and {most:g} {unit}, got {value:g} {unit}"
        )
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


class RestartBudget(BaseModel):
    """The pool's restart budget (docs/restart-budget.md); off by default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Coordinate restarts with the pool's other sidecars through Kubernetes Leases.
    enabled: bool = False
    # The pool (Leases <pool>-restart-0..N-1); unset: the POOL_NAME variable (downward API).
    pool: str | None = Field(default=None, pattern=r"^[a-z0-9]([-a-z0-9.]{0,200}[a-z0-9])?$")
    # At most this many of the pool's servers restarted within the window (unset: 1, or share).
    slots: int | None = Field(default=None, ge=1, le=1000)
    # Instead of slots: this share of pool_size, rounded down, at least 1.
    share: float | None = Field(default=None, gt=0, le=1)
    # The pool's server count that share is taken of.
    pool_size: int | None = Field(default=None, ge=1, le=100_000)
    # How long one restart counts against the budget; each Lease's duration (whole seconds).
    window: float = Field(default=300.0, ge=1, le=DAY)
    # How often a pod held by the budget asks again for a free slot.
    retry_interval: float = Field(default=5.0, ge=0.1, le=3600)
    # The Leases' namespace; unset: the pod's.
    namespace: str | None = None
    # One request to the API server gives up after this long (then: acting alone).
    request_timeout: float = Field(default=5.0, ge=0.1, le=60)

    @model_validator(mode="after")
    def _one_size(self) -> RestartBudget:
        if self.slots is not None and (self.share is not None or self.pool_size is not None):
            raise ValueError("give slots, or share with pool_size, not both")
        if (self.share is None) != (self.pool_size is None):
            raise ValueError("share and pool_size go together")
        return self


class Settings(Policy):
    """Every knob of ``sentinel run``; the defaults are the README's defaults table.

    The verdict's thresholds (``hang_window``, ``engine_policy``, ...) are the
    fields of :class:`~sentinel.verdict.Policy`, inherited: named, defaulted
    and described there once; :meth:`policy` hands them to the verdict.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    target: str = "http://127.0.0.1:8000"
    listen: str = "0.0.0.0:8471"
    # None: no gRPC listener (``off``); the Kubernetes gRPC-probe variant turns it on.
    grpc_listen: str | None = "0.0.0.0:8472"
    probes: Path | None = None
    api_key_file: Path | None = None
    # The /maintenance hook (sentinel.maintenance.window): the file holding its bearer
    # token (None: the hook is off) and the longest window one request may set.
    maintenance_token_file: Path | None = None
    maintenance_max: float = 3600.0
    diagnostics_dir: Path = Path("/tmp/sentinel-diagnostics")
    diagnostics: bool = True
    diagnostics_max_incidents: int = 20
    diagnostics_max_bytes: int = 200 * 1024 * 1024
    # One bundle: each section (a /metrics scrape set, a stack dump) and the whole.
    diagnostics_section_max_bytes: int = 8 * 1024 * 1024
    diagnostics_bundle_max_bytes: int = 32 * 1024 * 1024
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
    # Lifecycle (sleep, pause, weight updates): how often /is_sleeping and
    # /is_paused are asked (where the server runs VLLM_SERVER_DEV_MODE=1).
    lifecycle_interval: float = 5.0
    shutdown_timeout: float = 5.0
    # Caps on what the target may send (hostile or merely huge answers).
    # vLLM's whole exposition is well under 1 MiB and the series sentinel
    # reads number a few dozen, even with data-parallel engines.
    health_timeout: float = 2.0
    metrics_max_bytes: int = 8 * 1024 * 1024
    metrics_max_lines: int = 100_000
    metrics_max_line_bytes: int = 64 * 1024
    metrics_max_series: int = 1_000
    canary_max_bytes: int = 1024 * 1024
    # A late answer is an answer: a canary past its deadline is recorded as a
    # timeout, but one per kind is still awaited in the background up to this
    # many seconds past its send (0: never; else at least every deadline).
    late_wait: float = 120.0
    canaries: dict[str, CanaryOverride] = Field(default_factory=dict)
    # A cap on restarts across the pool, through Kubernetes Leases (docs/restart-budget.md).
    restart_budget: RestartBudget = Field(default_factory=RestartBudget)

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
        if self.step_window < self.hang_window and self.step_window <= 2 * self.scrape_interval:
            raise ValueError(
                "step_window must exceed two scrape intervals, or a step cannot be seen "
                f"({self.step_window} <= 2 x {self.scrape_interval})"
            )
        if self.scrape_timeout >= self.no_evidence_window:
            raise ValueError(
                "scrape_timeout must be shorter than no_evidence_window "
                f"({self.scrape_timeout} >= {self.no_evidence_window})"
            )
        if self.eval_interval > self.hang_window / 4:
            raise ValueError("eval_interval must be at most a quarter of hang_window")
        deadlines = {
            name: o.deadline for name, o in self.canaries.items() if o.deadline is not None
        }
        self.check_windows(deadlines)
        return self

    def check_windows(self, deadlines: Mapping[str, float]) -> None:
        """Refuse a window shorter than a canary deadline it judges.

        A hang window shorter than a deadline confirms a hang on a canary that
        was still allowed to answer: a slow server (2 s per token) would be
        killed by its own deadline arithmetic. ``deadlines`` maps canary names
        to their deadlines in seconds; raises ``ValueError`` naming both.
        """
        if not deadlines:
            return
        name, longest = max(deadlines.items(), key=lambda item: item[1])
        if 0 < self.late_wait < longest:
            raise ValueError(
                f"late_wait must be 0 or at least every canary deadline "
                f"({self.late_wait:g} s < {longest:g} s, the deadline of canary {name!r})"
            )
        for window in ("hang_window", "broken_window"):
            value = getattr(self, window)
            if value < longest:
                raise ValueError(
                    f"{window} must be at least every canary deadline "
                    f"({value:g} s < {longest:g} s, the deadline of canary {name!r})"
                )

    @property
    def evidence_freshness(self) -> float:
        """How old the last /metrics sample may be and still count as evidence."""
        return self.scrape_interval * 2 + self.scrape_timeout

    def policy(self) -> Policy:
        """The verdict's thresholds as configured: every field of :class:`Policy`."""
        return Policy(**{name: getattr(self, name) for name in Policy.model_fields})


def split_host_port(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) -> (host, port); port 0 allowed."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "0.0.0.0", int(port)
