"""The canary spec and its vocabulary: kind names, endpoints, policies, the nonce placeholder.

A leaf module: it imports nothing else of sentinel, so the catalog, every kind
module, the runner and the verdict can all depend on it without depending on
each other. What a kind *does* lives in its own module behind
:mod:`sentinel.canary.protocol`; which kinds exist lives in the registry,
:mod:`sentinel.canary.kinds`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal, Self

CHAT_ENDPOINT: Final = "/v1/chat/completions"
COMPLETIONS_ENDPOINT: Final = "/v1/completions"
Endpoint = Literal["/v1/chat/completions", "/v1/completions"]
Policy = Literal["restart", "unready", "alert"]
# What a canary does when the server's command line says its kind cannot be
# validated there (see ``CanaryKindDriver.unvalidatable``): ``auto`` lets the kind
# disable itself with a warning; ``keep`` is the operator vouching that the model
# answers without thinking when asked, so the canary runs anyway.
ReasoningOption = Literal["auto", "keep"]

DEFAULT_PRIORITY = -100  # lower is earlier in vLLM; canaries must not queue behind real traffic

# CanarySpec fields that belong to one kind: the file format accepts each, the
# kind that claims it (``spec_fields``) requires and checks it, and every other
# kind refuses it. Listed in the order the catalog reports them.
KIND_FIELDS: Final = ("schema", "image")

NONCE_PLACEHOLDER = "{nonce}"


class OpenName(str):
    """A name from an open set: any non-empty string, one shared instance per name.

    A plain ``str`` to everything that formats, hashes, compares or serialises
    it, so a name crosses JSON, metric labels and dict keys unchanged. Unlike an
    enum, the set is not closed here: a registry decides which names are in use,
    so adding a member needs no edit of the class. One instance per name keeps
    ``kind is CanaryKind.TEXT`` working. ``value`` reads as an enum member's.
    """

    __slots__ = ()
    _interned: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._interned = {}

    def __new__(cls, name: str) -> Self:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {cls.__name__} is a non-empty string, not {name!r}")
        known: Self | None = cls._interned.get(name)
        if known is not None:
            return known
        made = super().__new__(cls, name)
        cls._interned[str(made)] = made
        return made

    @property
    def value(self) -> str:
        return str(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"


class CanaryKind(OpenName):
    """The path a canary exercises, by name; :mod:`sentinel.canary.kinds` lists the known ones."""

    __slots__ = ()
    TEXT: ClassVar[CanaryKind]
    STRUCTURED: ClassVar[CanaryKind]
    MULTIMODAL: ClassVar[CanaryKind]


CanaryKind.TEXT = CanaryKind("text")
CanaryKind.STRUCTURED = CanaryKind("structured")
CanaryKind.MULTIMODAL = CanaryKind("multimodal")
TEXT: Final = CanaryKind.TEXT
STRUCTURED: Final = CanaryKind.STRUCTURED
MULTIMODAL: Final = CanaryKind.MULTIMODAL


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
    reasoning: ReasoningOption = "auto"
    source: str = ""  # the file it came from, for messages


class SpecFieldError(ValueError):
    """A kind refused one of its spec fields; the catalog adds the file to the message."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"{key}: {problem}")


def fill_nonce(value: Any, nonce: str) -> Any:
    """Replace every ``{nonce}`` in the strings (keys and values) of a JSON document."""
    if isinstance(value, str):
        return value.replace(NONCE_PLACEHOLDER, nonce)
    if isinstance(value, Mapping):
        return {fill_nonce(k, nonce): fill_nonce(v, nonce) for k, v in value.items()}
    if isinstance(value, list):
        return [fill_nonce(v, nonce) for v in value]
    return value


def has_nonce(value: Any) -> bool:
    """Whether a JSON document mentions the placeholder anywhere."""
    if isinstance(value, str):
        return NONCE_PLACEHOLDER in value
    if isinstance(value, Mapping):
        return any(has_nonce(k) or has_nonce(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_nonce(v) for v in value)
    return False
