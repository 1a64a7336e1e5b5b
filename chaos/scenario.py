"""Chaos scenarios: the YAML schema (``chaos/scenarios/*.yaml``) and its loader.

A scenario names the target (the simulator or a real vLLM), sentinel's
settings (the shipped defaults unless stated; the runner owns ports and the
diagnostics directory), a load profile, one fault with its timing, the
kubelet-like prober (the manifest's liveness settings unless overridden), the
naive-canary and blackbox_exporter baselines and what must hold for the
scenario to pass. The model is strict: an unknown or misspelt key is an
error, and every error names the file and the key.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from chaos.group_spec import GroupSpec
from sentinel.canary.kinds import path_kinds
from sentinel.config.loader import ConfigError, load_settings
from sentinel.config.settings import Settings
from sentinel.verdict.registry import hang_kinds as rule_kinds

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"
MANIFEST = Path(__file__).resolve().parent.parent / "manifests" / "base" / "deployment.yaml"

#: sentinel settings the runner sets itself; a scenario may not.
RUNNER_OWNED = frozenset({"target", "listen", "grpc_listen", "diagnostics_dir"})

FaultKind = Literal[
    "none",
    "engine_hang",
    "structured_hang",
    "multimodal_hang",
    "stream_stall",
    "slow_decode",
    "sigstop",
    "sigkill",
    # simulator only: the hang shapes of docs/design.md "Verdict semantics"
    "stuck_running",
    "waiting_churn",
    "preemption_churn",
    "prefill_no_decode",
    "stall_after_first",
    "reset_all",
    "error_5xx",
    "empty_200",
    "listener_closed",
    "metrics_lapse",
    # hangs a passing canary cannot see (simulator only): real traffic starved behind
    # the priority canary; one of two API-server processes (--api-server-count 2) wedged
    "starve",
    "api_wedge",
    # legitimate stalls (docs/design.md "Work is more than tokens", "Lifecycle states
    # are not hangs", "A long engine step", "Late answers"): a working server whose
    # requests wait; the simulator's faults of the same names
    "long_prefill",
    "sleep",
    "pause",  # also on a real vLLM: POST /pause?mode=... (VLLM_SERVER_DEV_MODE=1), /resume
    "weight_update",
    "compile_step",
    "slow_image",
    "metrics_401",
    # silent corruption: answers arrive, garbage (simulator only)
    "weights_lost",
]
LoadKind = Literal["text", "structured", "multimodal"]
PLUGIN_FAULTS = frozenset(
    {"engine_hang", "structured_hang", "multimodal_hang", "stream_stall", "slow_decode"}
)
#: Faults a real vLLM takes over HTTP (its dev-mode routes), not through the plugin.
HTTP_FAULTS = frozenset({"pause"})
#: Faults only the simulator can inject.
SIM_ONLY_FAULTS = frozenset(
    {
        "stuck_running",
        "waiting_churn",
        "preemption_churn",
        "prefill_no_decode",
        "stall_after_first",
        "reset_all",
        "error_5xx",
        "empty_200",
        "listener_closed",
        "metrics_lapse",
        "long_prefill",
        "sleep",
        "weight_update",
        "compile_step",
        "slow_image",
        "metrics_401",
        "weights_lost",
        "starve",
        "api_wedge",
    }
)
#: The legitimate stalls: a working server holds its requests (prefill, lifecycle,
#: compile, slow preprocessing) or hides its metrics; restarting it is always wrong.
LEGITIMATE_STALLS = frozenset(
    {
        "long_prefill",
        "sleep",
        "pause",
        "weight_update",
        "compile_step",
        "slow_image",
        "metrics_401",
    }
)
#: Faults after which the server is degraded but alive: any kill during them is false.
HARMLESS_FAULTS = frozenset({"none", "slow_decode", "metrics_lapse"}) | LEGITIMATE_STALLS
#: ``SimProcess`` options the runner sets itself (ports, log, policy, slots, environment).
SIM_RUNNER_OPTIONS = frozenset(
    {
        "scheduling_policy",
        "max_num_seqs",
        "extra_args",
        "env",
        "host",
        "log_path",
        "startup_timeout",
        "faults",
    }
)
#: ``weight_update`` on the simulator: the harness pauses the scheduler first with
#: this mode (keep, wait or abort) when given, as RL frameworks pause before they
#: load weights; the simulator's own fault takes the other parameters.
WEIGHT_UPDATE_PAUSE = "pause"


class ScenarioError(ValueError):
    """A scenario file that cannot be run; the message names the file and the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TargetSpec(_Strict):
    """What serves the requests: the simulator or a real vLLM on a tiny model."""

    kind: Literal["sim", "vllm"]
    #: real vLLM: the tiny generated model (``vision`` serves every canary kind)
    model: Literal["vision", "text"] = "vision"
    scheduling_policy: Literal["priority", "fcfs"] = "priority"
    max_num_seqs: int | None = Field(default=None, ge=1)
    #: simulator only: further ``SimProcess`` options (``decode_tps``, ``kv_cache_tokens``, ...)
    sim_options: dict[str, int | float | str | bool] = Field(default_factory=dict)
    #: real vLLM only: extra server flags, verbatim
    extra_args: list[str] = Field(default_factory=list)
    #: added to the server's environment (``VLLM_SERVER_DEV_MODE: "1"`` for /pause)
    environment: dict[str, str] = Field(default_factory=dict)
    start_timeout: float = Field(default=300.0, gt=0)
    #: simulator, supervised runs only: the leader of a multi-node group (chaos.group)
    group: GroupSpec | None = None

    @model_validator(mode="after")
    def _options(self) -> TargetSpec:
        if self.group is not None and self.kind != "sim":
            raise ValueError("group: only for the simulator")
        if self.kind == "vllm" and self.sim_options:
            raise ValueError("sim_options: only for the simulator")
        if self.kind == "sim" and self.extra_args:
            raise ValueError("extra_args: only for a real vLLM (the simulator takes sim_options)")
        if self.sim_options:
            known = _sim_option_names()
            for key in sorted(self.sim_options):
                if key in SIM_RUNNER_OPTIONS or key not in known:
                    raise ValueError(f"sim_options: {key!r} is not a simulator option")
        return self

    def server_key(self) -> tuple[Any, ...]:
        """Scenarios whose targets have equal keys can share one running server."""
        return (
            self.kind,
            self.model,
            self.scheduling_policy,
            self.max_num_seqs,
            tuple(sorted(self.sim_options.items())),
            tuple(self.extra_args),
            tuple(sorted(self.environment.items())),
        )


def _sim_option_names() -> frozenset[str]:
    """The keyword options of ``SimProcess`` (the simulator's flags), read from its signature."""
    import inspect

    from sentinel_sim.launch import SimProcess

    return frozenset(inspect.signature(SimProcess.__init__).parameters) - {"self"}


def _text_only() -> dict[LoadKind, float]:
    return {"text": 1.0}


class LoadSpec(_Strict):
    """A closed-loop load from ``python -m chaos.load``, started ``start`` s into the scenario."""

    start: float = Field(default=0.0, ge=0)
    duration: float = Field(gt=0)
    concurrency: int = Field(default=8, ge=1)
    prompt_tokens: int = Field(default=16, ge=1)
    max_tokens: int = Field(default=16, ge=1)
    priority: int | None = None
    mix: dict[LoadKind, float] = Field(default_factory=_text_only)
    #: ``completions``: plain-text completions only (a base model without a chat template)
    endpoint: Literal["chat", "completions"] = "chat"
    timeout: float = Field(default=300.0, gt=0)


class FaultSpec(_Strict):
    """One fault: what, where, when (seconds after sentinel's startup passed) and how long."""

    kind: FaultKind
    #: for sigstop and sigkill: which vLLM process (the simulator has no worker); ``api``
    #: is the API server, the container's main process (SIGSTOP: a wedged API server)
    process: Literal["engine", "worker", "api"] | None = None
    start: float = Field(default=10.0, ge=0)
    #: seconds until the fault is cleared (SIGCONT for sigstop); sigkill: none, the
    #: runner restarts the server and the window ends when it answers again
    duration: float | None = Field(default=None, gt=0)
    params: dict[str, int | float | str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _shape(self) -> FaultSpec:
        if self.kind in ("sigstop", "sigkill") and self.process is None:
            raise ValueError(f"process: required for {self.kind} (engine, worker or api)")
        if self.kind not in ("sigstop", "sigkill") and self.process is not None:
            raise ValueError(f"process: only for sigstop and sigkill, not {self.kind}")
        if self.kind == "sigkill" and self.duration is not None:
            raise ValueError("duration: sigkill has none (the server is restarted)")
        if self.kind not in ("sigkill", "none") and self.duration is None:
            raise ValueError(f"duration: required for {self.kind}")
        return self

    @property
    def harmful(self) -> bool:
        """Whether killing the server during this fault is the right call."""
        return self.kind not in HARMLESS_FAULTS


class ProberSpec(_Strict):
    """The kubelet-like liveness prober; unset fields come from the manifest."""

    manifest: Path = MANIFEST
    period: float | None = Field(default=None, gt=0)
    timeout: float | None = Field(default=None, gt=0)
    failure_threshold: int | None = Field(default=None, ge=1)
    grace: float | None = Field(default=None, ge=0)


class NaiveSpec(_Strict):
    """The naive canary baseline: sentinel's text prompt at priority 0, no progress evidence."""

    enabled: bool = True
    priority: int = 0


class BlackboxSpec(_Strict):
    """The blackbox_exporter baseline (:mod:`chaos.blackbox`); unset fields are derived.

    ``interval`` and ``scrape_timeout`` default to Prometheus's usual 15 s and 10 s,
    scaled by the scenario's prober period over the manifest's (the simulator
    scenarios shorten every timing alike); ``failure_threshold`` is the number of
    consecutive failed scrapes that would restart vLLM.
    """

    enabled: bool = True
    interval: float | None = Field(default=None, gt=0)
    scrape_timeout: float | None = Field(default=None, gt=0)
    failure_threshold: int = Field(default=3, ge=1)

    @model_validator(mode="after")
    def _timeout_fits(self) -> BlackboxSpec:
        interval, timeout = self.interval, self.scrape_timeout
        if interval is not None and timeout is not None and timeout > interval:
            # Prometheus refuses a scrape_timeout longer than the scrape_interval
            raise ValueError("scrape_timeout: longer than interval")
        return self


class ExpectSpec(_Strict):
    """What must hold for the scenario to pass; unset checks are not made."""

    #: sentinel's /livez must be red within this many seconds of the fault start
    detect_within: float | None = Field(default=None, gt=0)
    #: the hang kinds sentinel may report (``/status`` verdict) during the fault:
    #: at least one of them, and no other (:meth:`hang_kinds_met`). A fault
    #: two rules both describe lists both: every canary failing fast with no
    #: progress is an engine hang after H and broken after the broken window.
    #: Each must be a kind the registered hang rules confirm (a path rule's
    #: once per path canary kind), so a rule added to sentinel is named here
    #: without an edit.
    hang_kinds: list[str] | None = None
    #: vLLM's own /health must answer 200 at every sample
    vllm_health_stays_200: bool | None = None
    #: every text canary must pass while the fault is on
    text_canaries_pass: bool | None = None
    #: sentinel's /livez must never fail (busy servers are not hung)
    no_liveness_failure: bool | None = None
    #: liveness and readiness green again within this many seconds of the fault's end
    green_again_within: float | None = Field(default=None, gt=0)
    #: after a restart, sentinel's startup turns red, then green, with no stale hang
    reenters_startup: bool | None = None

    @field_validator("hang_kinds")
    @classmethod
    def _known_kinds(cls, kinds: list[str] | None) -> list[str] | None:
        known = {str(kind) for kind in rule_kinds(path_kinds())}
        unknown = sorted(set(kinds or ()) - known)
        if unknown:
            raise ValueError(f"unknown hang kinds {unknown}; the rules confirm {sorted(known)}")
        return kinds

    def hang_kinds_met(self, seen: Iterable[str]) -> bool:
        """Whether the kinds ``seen`` during the fault are acceptable: some, all of them listed."""
        if self.hang_kinds is None:
            return True
        kinds = set(seen)
        return bool(kinds) and kinds <= set(self.hang_kinds)


class Scenario(_Strict):
    """One chaos scenario."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    description: str = ""
    target: TargetSpec
    #: sentinel settings (``sentinel run`` keys); empty means the shipped defaults
    sentinel: dict[str, Any] = Field(default_factory=dict)
    load: LoadSpec | None = None
    fault: FaultSpec
    #: seconds watched after the fault ends (or after the load, when there is no fault)
    observe_after: float = Field(default=30.0, ge=0)
    #: seconds allowed for sentinel's startup to pass before the scenario begins
    startup_timeout: float = Field(default=120.0, gt=0)
    prober: ProberSpec = Field(default_factory=ProberSpec)
    naive: NaiveSpec = Field(default_factory=NaiveSpec)
    blackbox: BlackboxSpec = Field(default_factory=BlackboxSpec)
    expect: ExpectSpec = Field(default_factory=ExpectSpec)

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        if self.target.kind == "sim" and self.fault.process == "worker" and not self.target.group:
            raise ValueError("fault.process: the simulator has no worker process (use engine)")
        if self.fault.kind == "none" and self.load is None:
            raise ValueError("load: a scenario without a fault needs a load")
        if self.target.kind == "vllm" and self.fault.kind in SIM_ONLY_FAULTS:
            raise ValueError(f"fault.kind: {self.fault.kind} is a simulator fault (target sim)")
        if self.target.kind == "vllm" and self.fault.kind == "pause":
            unknown = sorted(set(self.fault.params) - {"mode"})
            if unknown:
                raise ValueError(f"fault.params: pause takes mode only, not {', '.join(unknown)}")
            mode = self.fault.params.get("mode", "keep")
            if mode not in ("keep", "wait", "abort"):
                raise ValueError(f"fault.params.mode: keep, wait or abort, not {mode!r}")
        pause = self.fault.params.get(WEIGHT_UPDATE_PAUSE)
        if self.fault.kind == "weight_update" and pause not in (None, "keep", "wait", "abort"):
            raise ValueError(f"fault.params.pause: keep, wait or abort, not {pause!r}")
        return self

    @property
    def fault_end(self) -> float | None:
        """Planned end of the fault window (seconds after start), None for sigkill and none."""
        if self.fault.duration is None:
            return None
        return self.fault.start + self.fault.duration


def _key_of(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(scenario)"


def parse_scenario(data: Any, source: str) -> Scenario:
    """Validate ``data`` (parsed YAML) as a scenario; errors name ``source`` and the key."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: expected a mapping, got {type(data).__name__}")
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        lines = []
        for error in exc.errors():
            key, message = _key_of(error["loc"]), error["msg"]
            if error["type"] == "extra_forbidden":
                message = "unknown key"
            elif error["type"] == "value_error":
                # a cross-field rule: its message starts with the key it is about
                message = str(error.get("ctx", {}).get("error", message))
                field, sep, rest = message.partition(": ")
                if sep and field.replace("_", "").replace(".", "").isalnum():
                    key = field if key == "(scenario)" else f"{key}.{field}"
                    message = rest
            lines.append(f"{source}: {key}: {message}")
        raise ScenarioError("\n".join(lines)) from None
    owned = sorted(RUNNER_OWNED & set(scenario.sentinel))
    if owned:
        raise ScenarioError(f"{source}: sentinel.{owned[0]}: set by the runner, not the scenario")
    try:
        sentinel_settings(scenario, "http://127.0.0.1:8000", Path("/nonexistent"))
    except ConfigError as exc:
        detail = str(exc).replace("\n", "; ")
        raise ScenarioError(f"{source}: sentinel: {detail}") from None
    return scenario


def load_scenario(path: Path) -> Scenario:
    """Read and validate one scenario file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not valid YAML: {exc}") from None
    if isinstance(data, dict) and isinstance(data.get("sentinel"), dict):
        for key in ("catalog", "probes"):  # the setting, and its old name
            directory = data["sentinel"].get(key)
            if isinstance(directory, str) and not Path(directory).is_absolute():
                # a catalog beside the scenario file, wherever the runner is started from
                data["sentinel"][key] = str(path.parent / directory)
    return parse_scenario(data, str(path))


def sentinel_settings(scenario: Scenario, target: str, diagnostics_dir: Path) -> Settings:
    """sentinel's settings for a run: the scenario's, plus loopback ports and the directory."""
    flags = {
        **scenario.sentinel,
        "target": target,
        "listen": "127.0.0.1:0",
        "grpc_listen": "127.0.0.1:0",
        "diagnostics_dir": diagnostics_dir,
    }
    return load_settings(None, env={}, flags=flags)


def discover(directory: Path = SCENARIO_DIR) -> list[Path]:
    return sorted(directory.glob("*.yaml"))
