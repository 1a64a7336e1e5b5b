"""The settings model: every knob of ``sentinel run``, typed, ranged and cross-checked.

Pure data and validation; where the values come from (defaults, a YAML file,
``SENTINEL_*`` variables, flags) is :mod:`sentinel.config.loader`'s business, which
also re-exports these names. Each field is one declaration
(:func:`sentinel.knob.setting`): its default, its span with a unit and what it
is for, so the loader, ``docs/configuration.md`` and ``sentinel doctor`` read
the same numbers. :class:`~sentinel.knob.Ranged` refuses a number outside its
span, the inherited verdict thresholds included, so a typo such as
``hang_window: .inf`` (liveness that can never fail) or ``metrics_max_bytes: 0``
is refused naming the key and unit.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import field_validator, model_validator

from sentinel.knob import DAY, GIB, KIB, MIB, Ranged, seconds, setting
from sentinel.target import http_url_error
from sentinel.verdict import Action, Policy

__all__ = [
    "DAY",
    "GIB",
    "GRPC_OFF",
    "KIB",
    "MIB",
    "RENAMED",
    "CanaryOverride",
    "RestartBudget",
    "Settings",
    "split_host_port",
]

# Settings renamed, old name -> new: the old key, SENTINEL_* variable and flag still
# work, each with one note on stderr naming the new one (sentinel.config.loader).
RENAMED: Mapping[str, str] = {"probes": "catalog"}

# Words meaning "no gRPC listener" for ``grpc_listen`` (flag, variable or file).
GRPC_OFF = frozenset({"", "off", "none", "false", "disabled"})


class CanaryOverride(Ranged):
    """Per-canary timing and policy overrides on top of the catalog's YAML."""

    interval: float | None = seconds(
        None, "How often the canary is sent (unset: the catalog's interval).", 0.1, DAY
    )
    deadline: float | None = seconds(
        None,
        "How long the canary may take before it counts as a timeout (unset: the catalog's).",
        0.1,
        3600.0,
    )
    jitter: float | None = setting(
        None,
        "Random spread of the interval, as a share of it (unset: the catalog's).",
        (0.0, 1.0, "share"),
        lt=1,
    )
    enabled: bool | None = setting(
        None, "false: the canary is not sent at all (unset: the catalog's)."
    )
    policy: Action | None = setting(
        None, "What a hang this canary confirms does: restart, unready or alert."
    )


class RestartBudget(Ranged):
    """The pool's restart budget (docs/restart-budget.md); off by default."""

    enabled: bool = setting(
        False, "Coordinate restarts with the pool's other sidecars through Kubernetes Leases."
    )
    pool: str | None = setting(
        None,
        "The pool (Leases <pool>-restart-0..N-1); unset: the POOL_NAME variable (downward API).",
        pattern=r"^[a-z0-9]([-a-z0-9.]{0,200}[a-z0-9])?$",
    )
    slots: int | None = setting(
        None,
        "At most this many of the pool's servers restarted within the window (unset: 1, or share).",
        (1, 1000, "servers"),
    )
    share: float | None = setting(
        None,
        "Instead of slots: this share of pool_size, rounded down, at least 1.",
        (0.0, 1.0, "share"),
        gt=0,
    )
    pool_size: int | None = setting(
        None, "The pool's server count that share is taken of.", (1, 100_000, "servers")
    )
    window: float = seconds(
        300.0,
        "How long one restart counts against the budget; each Lease's duration (whole seconds).",
        1.0,
        DAY,
    )
    retry_interval: float = seconds(
        5.0, "How often a pod held by the budget asks again for a free slot.", 0.1, 3600.0
    )
    namespace: str | None = setting(None, "The Leases' namespace; unset: the pod's.")
    request_timeout: float = seconds(
        5.0,
        "One request to the API server gives up after this long (then: acting alone).",
        0.1,
        60.0,
    )

    @model_validator(mode="after")
    def _one_size(self) -> RestartBudget:
        if self.slots is not None and (self.share is not None or self.pool_size is not None):
            raise ValueError("give slots, or share with pool_size, not both")
        if (self.share is None) != (self.pool_size is None):
            raise ValueError("share and pool_size go together")
        return self


class Settings(Policy, Ranged):
    """Every knob of ``sentinel run``; the defaults are the README's defaults table.

    The verdict's thresholds (``hang_window``, ``engine_policy``, ...) are the
    fields of :class:`~sentinel.verdict.Policy`, inherited: named, defaulted,
    ranged and described there once; :class:`~sentinel.knob.Ranged` checks
    them here, where a value comes from a person, and :meth:`policy` hands
    them to the verdict.
    """

    target: str = setting("http://127.0.0.1:8000", "The inference server's base URL.")
    listen: str = setting(
        "0.0.0.0:8471", "HTTP listener (HOST:PORT) for the probe endpoints, /status and /metrics."
    )
    grpc_listen: str | None = setting(
        "0.0.0.0:8472",
        "gRPC health listener (HOST:PORT) for the Kubernetes gRPC-probe variant; "
        "off: no gRPC listener.",
    )
    catalog: Path | None = setting(
        None, "A directory of canary specs replacing the shipped catalog (formerly probes)."
    )
    api_key_file: Path | None = setting(
        None, "A file holding the server's API key (or SENTINEL_API_KEY); never logged."
    )
    maintenance_token_file: Path | None = setting(
        None,
        "The file holding the bearer token of the /maintenance hook "
        "(sentinel.maintenance.window); unset: the hook is off.",
    )
    maintenance_max: float = seconds(
        3600.0, "The longest maintenance window one /maintenance request may set.", 1.0, DAY
    )
    diagnostics_dir: Path = setting(
        Path("/tmp/sentinel-diagnostics"),
        "Where diagnostics bundles (and the correctness fingerprint) are kept.",
    )
    diagnostics: bool = setting(True, "Capture a diagnostics bundle at the first suspicion.")
    diagnostics_max_incidents: int = setting(
        20, "Bundles kept; the oldest go first.", (1, 10_000, "incidents")
    )
    diagnostics_max_bytes: int = setting(
        200 * MIB, "Bytes all kept bundles may take.", (KIB, 1024 * GIB, "bytes")
    )
    diagnostics_section_max_bytes: int = setting(
        8 * MIB,
        "Bytes one section of a bundle (a /metrics scrape set, a stack dump) may take.",
        (64 * KIB, GIB, "bytes"),
    )
    diagnostics_bundle_max_bytes: int = setting(
        32 * MIB, "Bytes one whole bundle may take.", (256 * KIB, 16 * GIB, "bytes")
    )
    model: str | None = setting(
        None, "The model canaries ask for (unset: the first one /v1/models lists)."
    )
    scheduling_policy: Literal["auto", "priority", "fcfs"] = setting(
        "auto", "The server's scheduling policy (auto: read from its command line)."
    )
    watch_processes: bool = setting(
        True, "Read the server's processes (needs the shared PID namespace)."
    )

    scrape_interval: float = seconds(2.0, "How often the server's /metrics is read.", 0.1, 3600.0)
    scrape_timeout: float = seconds(
        10.0,
        "How long one /metrics read may take: a busy API server answers late, "
        "and a late sample is still evidence.",
        0.1,
        3600.0,
    )
    health_interval: float = seconds(2.0, "How often the server's /health is asked.", 0.1, 3600.0)
    process_interval: float = seconds(
        1.0, "How often the server's processes are sampled.", 0.1, 3600.0
    )
    eval_interval: float = seconds(0.5, "How often the verdict is evaluated.", 0.05, 60.0)
    probe_hold: float = seconds(
        1.0,
        "How long /startupz and /readyz hold a 'not yet' that waits only on canaries under "
        "way (a server's first canaries) before answering it: the probe passes the moment "
        "the verdict does instead of a kubelet period later. Keep it under the probes' "
        "timeoutSeconds; 0 answers at once.",
        0.0,
        2.5,
    )
    eval_quiet_interval: float = seconds(
        2.0,
        "How often the verdict is evaluated while nothing is in play (no canary in flight "
        "or failed, no work shown, no failing evidence, every answer green); at most a "
        "quarter of hang_window, at least eval_interval.",
        0.05,
        60.0,
    )
    idle_window: float = seconds(
        5.0,
        "The text canary is skipped while real decode completed within this window "
        "(0: never skipped).",
        0.0,
        DAY,
    )
    auto_sleep_idle: float | None = seconds(
        None,
        "The server sleeps after this many seconds without a request (vLLM's proposed "
        "--sleep-idle-ttl, llama.cpp's --sleep-idle-seconds); unset: read from its command line.",
        0.1,
        365 * DAY,
    )
    auto_sleep_hold: float = seconds(
        60.0,
        "On an auto-sleeping server, every canary is held once no real traffic was seen this "
        "long, so canaries never keep it awake; a hang right after a burst is still caught.",
        0.0,
        DAY,
    )
    lifecycle_interval: float = seconds(
        5.0,
        "How often /is_sleeping and /is_paused are asked, to tell sleep, pause and weight "
        "updates from hangs (where the server runs VLLM_SERVER_DEV_MODE=1).",
        0.1,
        3600.0,
    )
    shutdown_timeout: float = seconds(5.0, "How long an orderly shutdown may take.", 0.1, 600.0)
    health_timeout: float = seconds(2.0, "How long one /health ask may take.", 0.1, 60.0)
    metrics_max_bytes: int = setting(
        8 * MIB,
        "Cap on one /metrics answer (vLLM's whole exposition is well under 1 MiB).",
        (64 * KIB, GIB, "bytes"),
    )
    metrics_max_lines: int = setting(
        100_000, "Cap on the lines of one /metrics answer.", (100, 100_000_000, "lines")
    )
    metrics_max_line_bytes: int = setting(
        64 * KIB, "Cap on one line of /metrics.", (KIB, 64 * MIB, "bytes")
    )
    metrics_max_series: int = setting(
        1_000,
        "Cap on the series kept of the signals sentinel reads, beside each engine's allowance "
        "(metrics_series_per_engine).",
        (10, 1_000_000, "series"),
    )
    metrics_series_per_engine: int = setting(
        100,
        "Series each data-parallel engine the exposition shows (its engine label) adds to "
        "metrics_max_series: vLLM exposes about 30 per engine, so DP 64 is not refused.",
        (0, 100_000, "series"),
    )
    canary_max_bytes: int = setting(
        MIB, "Cap on one canary's answer.", (4 * KIB, 256 * MIB, "bytes")
    )
    late_wait: float = seconds(
        120.0,
        "A late answer is an answer: a canary past its deadline is recorded as a timeout, "
        "but one per kind is still awaited in the background up to this long past its "
        "send (0: never; else at least every deadline).",
        0.0,
        DAY,
    )
    canaries: dict[str, CanaryOverride] = setting(
        {}, "Per-canary overrides of the catalog, by canary name (see below)."
    )
    restart_budget: RestartBudget = setting(
        RestartBudget(),
        "A cap on restarts across the pool, through Kubernetes Leases "
        "(docs/restart-budget.md; see below).",
    )
    brake_memory: Literal["auto", "on", "off"] = setting(
        "auto",
        "Keep the restart-loop brake's memory in the Lease sentinel-brake-<pod>, so it "
        "survives a recreated pod (docs/groups.md); auto: on in a LeaderWorkerSet's pod "
        "(LWS_GROUP_SIZE and POD_NAME set), whose group LWS recreates sidecar and all; "
        "a Deployment's sidecar outlives the server's restarts and needs no Lease.",
    )

    log_format: Literal["auto", "json", "console"] = setting(
        "auto", "auto: console in a terminal, JSON otherwise."
    )
    log_level: Literal["debug", "info", "warning", "error"] = setting("info", "Log level.")

    @field_validator("target")
    @classmethod
    def _target_is_http(cls, value: str) -> str:
        problem = http_url_error(value)
        if problem is not None:
            raise ValueError(problem)
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

    @property
    def quiet_interval(self) -> float:
        """Seconds between judgements while nothing is in play (sentinel.evaluation.pace)."""
        return max(self.eval_interval, min(self.eval_quiet_interval, self.hang_window / 4))

    def policy(self) -> Policy:
        """The verdict's thresholds as configured: every field of :class:`Policy`."""
        return Policy(**{name: getattr(self, name) for name in Policy.model_fields})


def split_host_port(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) -> (host, port); port 0 allowed."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "0.0.0.0", int(port)
