"""The canary catalog: ``specs/*.yaml`` (and the images beside them) into frozen canary specs.

It owns the file format and every rule a catalog must satisfy, so a bad
ConfigMap is refused at start-up (or by ``check-config``) with the file and the
key named, instead of surfacing as failing canaries that restart a healthy
server. It reads files and nothing else: no network, no event loop.
"""

from __future__ import annotations

import importlib.resources
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from importlib.resources.abc import Traversable
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sentinel.canary.kinds import CONTROL, KINDS
from sentinel.canary.spec import (
    CHAT_ENDPOINT,
    COMPLETIONS_ENDPOINT,
    DEFAULT_PRIORITY,
    KIND_FIELDS,
    CanaryKind,
    CanarySpec,
    Endpoint,
    Policy,
    ReasoningOption,
    SpecFieldError,
)

# A canary may stay outstanding at most this many intervals: past that, misses
# would pile up behind one slow request and the scheduler would learn late.
MAX_DEADLINE_INTERVALS = 2.0
MAX_JITTER = 0.5
MAX_PROMPTS = 8  # prompts in one completions request (a correctness check sends a few)
# Body fields sentinel sets (from the spec, or per run); a template that set them would
# fight sentinel. The value says where sentinel takes it from.
OWNED_REQUEST_KEYS = {
    "priority": "the spec's 'priority'",
    "stream": "the spec's 'stream'",
    "stream_options": "the spec's 'stream'",
    "response_format": "the spec's 'schema'",
    "user": "each run's nonce (no two canary bodies alike, past any cache)",
}
# Spec fields that name a file beside the catalog's YAML.
ASSET_FIELDS = frozenset({"image"})
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")


class CatalogError(ValueError):
    """A catalog that cannot be used; the message names the file and the key."""

    def __init__(self, file: str, key: str, problem: str) -> None:
        self.file = file
        self.key = key
        self.problem = problem
        super().__init__(f"{file}: {key}: {problem}" if key else f"{file}: {problem}")


@dataclass(frozen=True, slots=True)
class Catalog:
    """Every canary of one catalog directory, in file-name order."""

    specs: tuple[CanarySpec, ...]
    source: str = ""

    def enabled(self) -> tuple[CanarySpec, ...]:
        return tuple(s for s in self.specs if s.enabled)

    def kinds(self) -> tuple[CanaryKind, ...]:
        """The kinds that have at least one enabled canary, in registry order."""
        present = {s.kind for s in self.enabled()}
        return tuple(k for k in KINDS if k in present)

    def of_kind(self, kind: CanaryKind) -> tuple[CanarySpec, ...]:
        return tuple(s for s in self.enabled() if s.kind == kind)

    def get(self, name: str) -> CanarySpec:
        for spec in self.specs:
            if spec.name == name:
                return spec
        raise KeyError(name)


# The spec's keys taken as the file wrote them (or its defaults): the name, the
# kind's timing and the kind's own fields are resolved and checked above.
AS_WRITTEN = (
    "endpoint",
    "request",
    "stream",
    "priority",
    "policy",
    "enabled",
    "latency_slo",
    "reasoning",
)


class _SpecFile(BaseModel):
    """The YAML file format. Strict: unknown keys and loose types are refused."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: str | None = None
    kind: str
    stream: bool = False
    endpoint: Endpoint = CHAT_ENDPOINT
    request: dict[str, Any]
    priority: int = DEFAULT_PRIORITY
    deadline: float | None = Field(default=None, gt=0)
    interval: float | None = Field(default=None, gt=0)
    jitter: float | None = Field(default=None, ge=0, le=MAX_JITTER)
    policy: Policy = "restart"
    enabled: bool = True
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    image: str | None = None
    latency_slo: float | None = Field(default=None, gt=0)
    reasoning: ReasoningOption = "auto"


def default_directory() -> Traversable:
    """The catalog shipped inside the wheel."""
    return importlib.resources.files("sentinel.canary.specs")


def load_catalog(directory: Path | None = None) -> Catalog:
    """Load and check every ``*.yaml`` in ``directory`` (None: the shipped defaults)."""
    if directory is None:
        return _load(default_directory(), "sentinel/canary/specs")
    if not directory.is_dir():
        raise CatalogError(str(directory), "", "not a directory")
    return _load(directory, str(directory))


def _load(root: Traversable, label: str) -> Catalog:
    files = sorted(
        (f for f in root.iterdir() if f.name.endswith((".yaml", ".yml")) and f.is_file()),
        key=lambda f: f.name,
    )
    if not files:
        raise CatalogError(label, "", "no canary files (*.yaml) found")
    specs = [_load_file(root, f, f"{label}/{f.name}") for f in files]
    _check_catalog(specs)
    return Catalog(specs=tuple(specs), source=label)


def _load_file(root: Traversable, file: Traversable, label: str) -> CanarySpec:
    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else ""
        raise CatalogError(label, where, f"not valid YAML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogError(label, "", f"cannot read: {exc}") from None
    if not isinstance(raw, dict):
        raise CatalogError(label, "", "must be a mapping of keys to values")

    kind_name = raw.get("kind")
    if isinstance(kind_name, str) and kind_name not in KINDS:
        expected = ", ".join(k.value for k in KINDS)
        problem = f"unknown canary kind {kind_name!r} (expected {expected})"
        raise CatalogError(label, "kind", problem)
    try:
        parsed = _SpecFile.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(part) for part in first["loc"]) or "(file)"
        raise CatalogError(label, key, _pydantic_problem(first)) from None

    kind = CanaryKind(parsed.kind)
    driver = KINDS[kind]
    name = parsed.name if parsed.name is not None else _stem(file.name)
    if not NAME_PATTERN.match(name):
        raise CatalogError(label, "name", f"{name!r} must match {NAME_PATTERN.pattern}")
    if parsed.endpoint not in driver.endpoints:
        allowed = ", ".join(sorted(driver.endpoints))
        raise CatalogError(label, "endpoint", f"a {kind} canary needs {allowed}")
    written = parsed.model_dump(by_alias=True)
    given = {key: written[key] for key in KIND_FIELDS if written[key] is not None}
    for key in KIND_FIELDS:
        if key in driver.spec_fields and key not in given:
            raise CatalogError(label, key, f"required for a {kind} canary")
        if key not in driver.spec_fields and key in given:
            raise CatalogError(label, key, f"not used by a {kind} canary")
    _check_request(label, parsed.request, parsed.endpoint)

    defaults = driver.defaults
    deadline = parsed.deadline if parsed.deadline is not None else defaults.deadline
    interval = parsed.interval if parsed.interval is not None else defaults.interval
    jitter = parsed.jitter if parsed.jitter is not None else defaults.jitter
    if deadline > interval * MAX_DEADLINE_INTERVALS:
        raise CatalogError(
            label,
            "deadline",
            f"{deadline:g} s exceeds {MAX_DEADLINE_INTERVALS:g} x interval ({interval:g} s): "
            "canaries would pile up behind a slow one",
        )
    if parsed.latency_slo is not None and parsed.latency_slo >= deadline:
        problem = f"{parsed.latency_slo:g} s must be below the deadline ({deadline:g} s)"
        raise CatalogError(label, "latency_slo", problem)
    for key in ASSET_FIELDS & given.keys():
        _confine(label, key, given[key], root)
    try:
        kind_values = driver.load_fields(given, root)
    except SpecFieldError as exc:
        raise CatalogError(label, exc.key, exc.problem) from None

    return CanarySpec(
        name=name,
        kind=kind,
        deadline=deadline,
        interval=interval,
        jitter=jitter,
        source=label,
        **{key: getattr(parsed, key) for key in AS_WRITTEN},
        **kind_values,
    )


def _confine(label: str, key: str, relative: object, root: Traversable) -> None:
    """An asset path must name a file inside the catalog directory, symlinks resolved.

    The catalog is often a ConfigMap that more people can edit than the pod's
    filesystem; an ``image:`` of ``/etc/shadow`` or ``../../secrets/key`` must
    not turn it into a way to read (and send to the target) any file.
    """
    if not isinstance(relative, str) or not relative:
        raise CatalogError(label, key, "must be a path relative to the catalog directory")
    parts = PurePosixPath(relative).parts
    if PurePosixPath(relative).is_absolute() or ".." in parts or "\\" in relative:
        raise CatalogError(
            label, key, f"{relative!r} must be a path inside the catalog directory (no '..')"
        )
    if isinstance(root, Path):
        base = root.resolve()
        target = root.joinpath(*parts).resolve()
        if not target.is_relative_to(base):
            raise CatalogError(
                label, key, f"{relative!r} resolves outside the catalog directory ({target})"
            )


def _stem(file_name: str) -> str:
    return file_name.rsplit(".", 1)[0]


def _pydantic_problem(error: Mapping[str, Any]) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown key"
    if error["type"] == "missing":
        return "required"
    return str(error["msg"])


def _check_request(label: str, request: Mapping[str, Any], endpoint: str) -> None:
    for key, source in OWNED_REQUEST_KEYS.items():
        if key in request:
            raise CatalogError(label, f"request.{key}", f"set by sentinel from {source}")
    if "model" in request and not isinstance(request["model"], str):
        raise CatalogError(label, "request.model", "must be a string")
    max_tokens = request.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise CatalogError(
            label, "request.max_tokens", "required, a positive integer (keeps the canary cheap)"
        )
    if endpoint == CHAT_ENDPOINT:
        if "prompt" in request:
            raise CatalogError(label, "request.prompt", f"{endpoint} takes messages, not prompt")
        messages = request.get("messages")
        if not isinstance(messages, list) or not messages:
            raise CatalogError(label, "request.messages", "required, a non-empty list")
        for i, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise CatalogError(
                    label, f"request.messages.{i}", "must be a mapping with a 'role'"
                )
        if not any(m.get("role") == "user" for m in messages):
            raise CatalogError(label, "request.messages", "needs a user message")
        if not isinstance(request.get("chat_template_kwargs", {}), dict):
            # sentinel adds enable_thinking: false to it (unless it names enable_thinking).
            raise CatalogError(label, "request.chat_template_kwargs", "must be a mapping")
    elif endpoint == COMPLETIONS_ENDPOINT:
        if "messages" in request:
            raise CatalogError(label, "request.messages", f"{endpoint} takes prompt, not messages")
        prompt = request.get("prompt")
        # A list of prompts is one request answered with one choice per prompt.
        prompts = prompt if isinstance(prompt, list) and prompt else [prompt]
        if not all(isinstance(p, str) and p for p in prompts) or len(prompts) > MAX_PROMPTS:
            raise CatalogError(
                label,
                "request.prompt",
                f"required, a non-empty string or a list of 1 to {MAX_PROMPTS} of them",
            )


def _check_catalog(specs: Sequence[CanarySpec]) -> None:
    seen: dict[str, str] = {}
    for spec in specs:
        if spec.name in seen:
            problem = f"duplicate canary name {spec.name!r} (also in {seen[spec.name]})"
            raise CatalogError(spec.source, "name", problem)
        seen[spec.name] = spec.source
    enabled = [s for s in specs if s.enabled]
    paths = [s for s in enabled if KINDS[s.kind].path]
    if paths and not any(s.kind == CONTROL for s in enabled):
        raise CatalogError(
            paths[0].source,
            "kind",
            f"a {paths[0].kind} canary needs an enabled {CONTROL} canary in the catalog: "
            "a path hang is told from an engine hang by the text control passing",
        )


class Override(Protocol):
    """One canary's override as the config holds it (``sentinel.config.settings.CanaryOverride``).

    Named by what the catalog reads of it, the fields it sets, because the
    config is what loads the catalog: the catalog stays below it.
    """

    def model_dump(self, *, exclude_none: bool = ...) -> dict[str, Any]: ...


def apply_overrides(
    specs: Iterable[CanarySpec], overrides: Mapping[str, Override], source: str = "config"
) -> tuple[CanarySpec, ...]:
    """The catalog's specs with the config's per-canary overrides applied.

    An override naming no canary is refused rather than ignored: a typo there
    would otherwise silently leave the canary it meant on its old timing or
    policy. ``source`` names the config file in the message.
    """
    specs = tuple(specs)
    unknown = sorted(set(overrides) - {s.name for s in specs})
    if unknown:
        known = ", ".join(s.name for s in specs) or "none"
        problem = f"no canary named {', '.join(map(repr, unknown))} in the catalog (it has {known})"
        raise CatalogError(source, "canaries", problem)
    out = []
    for spec in specs:
        override = overrides.get(spec.name)
        if override is not None:
            changes = override.model_dump(exclude_none=True)
            if "policy" in changes:
                changes["policy"] = str(changes["policy"])
            spec = replace(spec, **changes)
        out.append(spec)
    return tuple(out)


def describe(specs: Iterable[CanarySpec]) -> list[dict[str, Any]]:
    """A JSON-able summary (no image bytes), for ``check-config`` and ``/status``."""
    return [
        {
            "name": s.name,
            "kind": s.kind.value,
            "endpoint": s.endpoint,
            "stream": s.stream,
            "priority": s.priority,
            "deadline": s.deadline,
            "interval": s.interval,
            "jitter": s.jitter,
            "policy": s.policy,
            "enabled": s.enabled,
            "latency_slo": s.latency_slo,
            "reasoning": s.reasoning,
            "source": s.source,
        }
        for s in specs
    ]
