"""The canary catalog: ``probes/*.yaml`` (and the images beside them) into frozen canary specs.

It owns the file format and every rule a catalog must satisfy, so a bad
ConfigMap is refused at start-up (or by ``check-config``) with the file and the
key named, instead of surfacing as failing canaries that restart a healthy
server. It reads files and nothing else: no network, no event loop.
"""

from __future__ import annotations

import importlib.resources
import io
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Literal

import jsonschema.exceptions
import jsonschema.validators
import yaml
from PIL import Image, UnidentifiedImageError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sentinel.canary.kinds import KINDS
from sentinel.canary.protocol import CHAT_ENDPOINT, COMPLETIONS_ENDPOINT
from sentinel.canary.result import CanaryKind
from sentinel.canary.structured import fill_nonce, has_nonce

Endpoint = Literal["/v1/chat/completions", "/v1/completions"]
Policy = Literal["restart", "unready", "alert"]

# A canary may stay outstanding at most this many intervals: past that, misses
# would pile up behind one slow request and the scheduler would learn late.
MAX_DEADLINE_INTERVALS = 2.0
MAX_JITTER = 0.5
MAX_IMAGE_BYTES = 1 << 20
DEFAULT_DEADLINE = {CanaryKind.TEXT: 8.0, CanaryKind.STRUCTURED: 10.0, CanaryKind.MULTIMODAL: 10.0}
DEFAULT_INTERVAL = {CanaryKind.TEXT: 5.0, CanaryKind.STRUCTURED: 10.0, CanaryKind.MULTIMODAL: 10.0}
DEFAULT_JITTER = {CanaryKind.TEXT: 0.1, CanaryKind.STRUCTURED: 0.0, CanaryKind.MULTIMODAL: 0.0}
DEFAULT_PRIORITY = -100  # lower is earlier in vLLM; canaries must not queue behind real traffic
# Body fields sentinel sets from the spec; a template that set them would fight the spec.
OWNED_REQUEST_KEYS = {
    "priority": "priority",
    "stream": "stream",
    "stream_options": "stream",
    "response_format": "schema",
}
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")


class CatalogError(ValueError):
    """A catalog that cannot be used; the message names the file and the key."""

    def __init__(self, file: str, key: str, problem: str) -> None:
        self.file = file
        self.key = key
        self.problem = problem
        super().__init__(f"{file}: {key}: {problem}" if key else f"{file}: {problem}")


@dataclass(frozen=True, slots=True)
class CanarySpec:
    """One canary, validated. ``request`` is the template body; the runner copies it per run."""

    name: str
    kind: CanaryKind
    endpoint: str
    request: Mapping[str, Any]
    stream: bool = False
    priority: int = DEFAULT_PRIORITY
    deadline: float = 8.0
    interval: float = 5.0
    jitter: float = 0.0
    policy: Policy = "restart"
    enabled: bool = True
    schema: Mapping[str, Any] | None = None
    image: bytes | None = field(default=None, repr=False)
    latency_slo: float | None = None
    source: str = ""  # the file it came from, for messages


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
        return tuple(s for s in self.enabled() if s.kind is kind)

    def get(self, name: str) -> CanarySpec:
        for spec in self.specs:
            if spec.name == name:
                return spec
        raise KeyError(name)


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


def default_directory() -> Traversable:
    """The catalog shipped inside the wheel."""
    return importlib.resources.files("sentinel.probes")


def load_catalog(directory: Path | None = None) -> Catalog:
    """Load and check every ``*.yaml`` in ``directory`` (None: the shipped defaults)."""
    if directory is None:
        return _load(default_directory(), "probes")
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
    if "kind" in raw and kind_name not in {k.value for k in KINDS}:
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
    probe = KINDS[kind]
    name = parsed.name if parsed.name is not None else _stem(file.name)
    if not NAME_PATTERN.match(name):
        raise CatalogError(label, "name", f"{name!r} must match {NAME_PATTERN.pattern}")
    if parsed.endpoint not in probe.endpoints:
        allowed = ", ".join(sorted(probe.endpoints))
        raise CatalogError(label, "endpoint", f"a {kind} canary needs {allowed}")
    for extra in ("schema", "image"):
        given = (parsed.schema_ if extra == "schema" else parsed.image) is not None
        if extra in probe.spec_fields and not given:
            raise CatalogError(label, extra, f"required for a {kind} canary")
        if extra not in probe.spec_fields and given:
            raise CatalogError(label, extra, f"not used by a {kind} canary")
    _check_request(label, parsed.request, parsed.endpoint)

    deadline = parsed.deadline if parsed.deadline is not None else DEFAULT_DEADLINE[kind]
    interval = parsed.interval if parsed.interval is not None else DEFAULT_INTERVAL[kind]
    jitter = parsed.jitter if parsed.jitter is not None else DEFAULT_JITTER[kind]
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
    if parsed.schema_ is not None:
        _check_schema(label, parsed.schema_)
    image = _load_image(root, label, parsed.image) if parsed.image is not None else None

    return CanarySpec(
        name=name,
        kind=kind,
        endpoint=parsed.endpoint,
        request=parsed.request,
        stream=parsed.stream,
        priority=parsed.priority,
        deadline=deadline,
        interval=interval,
        jitter=jitter,
        policy=parsed.policy,
        enabled=parsed.enabled,
        schema=parsed.schema_,
        image=image,
        latency_slo=parsed.latency_slo,
        source=label,
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
    for key, spec_field in OWNED_REQUEST_KEYS.items():
        if key in request:
            raise CatalogError(
                label, f"request.{key}", f"set by sentinel from the spec's {spec_field!r}"
            )
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
    elif endpoint == COMPLETIONS_ENDPOINT:
        if "messages" in request:
            raise CatalogError(label, "request.messages", f"{endpoint} takes prompt, not messages")
        if not isinstance(request.get("prompt"), str) or not request["prompt"]:
            raise CatalogError(label, "request.prompt", "required, a non-empty string")


def _check_schema(label: str, schema: Mapping[str, Any]) -> None:
    if not has_nonce(schema):
        raise CatalogError(
            label,
            "schema",
            "must contain the {nonce} placeholder (e.g. an enum value 'ok-{nonce}'), "
            "or vLLM's grammar cache hides a compile hang",
        )
    filled = fill_nonce(schema, "0" * 8)
    try:
        jsonschema.validators.validator_for(filled).check_schema(filled)
    except jsonschema.exceptions.SchemaError as exc:
        raise CatalogError(label, "schema", f"not a valid JSON schema: {exc.message}") from None


def _load_image(root: Traversable, label: str, relative: str) -> bytes:
    asset = root.joinpath(*Path(relative).parts)
    try:
        data = asset.read_bytes()
    except OSError as exc:
        problem = f"cannot read {relative!r}: {exc.strerror or exc}"
        raise CatalogError(label, "image", problem) from None
    if len(data) > MAX_IMAGE_BYTES:
        raise CatalogError(label, "image", f"{relative!r} is over {MAX_IMAGE_BYTES} bytes")
    try:
        with Image.open(io.BytesIO(data)) as picture:
            picture.load()
    except (UnidentifiedImageError, OSError) as exc:
        raise CatalogError(label, "image", f"{relative!r} is not an image: {exc}") from None
    return data


def _check_catalog(specs: Sequence[CanarySpec]) -> None:
    seen: dict[str, str] = {}
    for spec in specs:
        if spec.name in seen:
            problem = f"duplicate canary name {spec.name!r} (also in {seen[spec.name]})"
            raise CatalogError(spec.source, "name", problem)
        seen[spec.name] = spec.source
    enabled = [s for s in specs if s.enabled]
    path_kinds = [s for s in enabled if s.kind is not CanaryKind.TEXT]
    if path_kinds and not any(s.kind is CanaryKind.TEXT for s in enabled):
        raise CatalogError(
            path_kinds[0].source,
            "kind",
            f"a {path_kinds[0].kind} canary needs an enabled text canary in the catalog: "
            "a path hang is told from an engine hang by the text control passing",
        )


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
            "source": s.source,
        }
        for s in specs
    ]
