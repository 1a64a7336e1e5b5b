"""The one explicit registry of canary kinds.

The catalog rejects any kind not listed here, takes each kind's defaults and
field checks from it, the runner dispatches through it, the verdict reads
which kinds are path kinds from it, and the scheduler and ``sentinel probe``
ask it which kind is the control, which kinds go out paired with it, which
are idle-gated and which take UNSUPPORTED as a skip. Adding a kind means
adding a module that implements
:class:`~sentinel.canary.protocol.CanaryKindDriver` and one :func:`register`
call; nothing else enumerates or names kinds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType

from sentinel.canary import correctness, multimodal, structured, text
from sentinel.canary.protocol import CanaryKindDriver, ServerFacts
from sentinel.canary.spec import TEXT, CanaryKind, CanarySpec

CONTROL: CanaryKind = TEXT
"""The kind every paired kind is sent with (and every path kind judged against)."""

_REGISTRY: dict[CanaryKind, CanaryKindDriver] = {}

KINDS: Mapping[CanaryKind, CanaryKindDriver] = MappingProxyType(_REGISTRY)
"""Every registered kind, in registration order (a read-only view that follows the registry)."""


def register(driver: CanaryKindDriver) -> CanaryKindDriver:
    """Add a kind; refused when its name is taken, so two modules cannot claim one kind.

    Also refused: a path kind that is not paired (its hang is told by the
    control passing beside it).
    """
    if driver.kind in _REGISTRY:
        raise ValueError(f"canary kind {driver.kind.value!r} is already registered")
    if driver.path and not driver.paired:
        raise ValueError(f"path kind {driver.kind.value!r} must be paired with a {CONTROL} control")
    _REGISTRY[driver.kind] = driver
    return driver


def unregister(kind: CanaryKind) -> None:
    """Remove a kind (tests that registered one restore the registry with this)."""
    if kind == CONTROL:
        raise ValueError(f"the {CONTROL.value!r} kind is the control of every path kind")
    del _REGISTRY[kind]


def names() -> tuple[CanaryKind, ...]:
    """The registered kinds, in registration order."""
    return tuple(_REGISTRY)


def _declares(kind: CanaryKind, trait: Callable[[CanaryKindDriver], bool]) -> bool:
    """Whether ``kind`` is registered and its driver declares ``trait`` (unknown kinds: no)."""
    driver = _REGISTRY.get(kind)
    return driver is not None and trait(driver)


def is_path(kind: CanaryKind) -> bool:
    """Whether ``kind`` is a registered path kind (judged against a text control)."""
    return _declares(kind, lambda driver: driver.path)


def is_paired(kind: CanaryKind) -> bool:
    """Whether canaries of ``kind`` go out with a :data:`CONTROL` canary beside them."""
    return _declares(kind, lambda driver: driver.paired)


def is_idle_gated(kind: CanaryKind) -> bool:
    """Whether real traffic that recently proved the engine alive stands in for ``kind``."""
    return _declares(kind, lambda driver: driver.idle_gated)


def skips_unsupported(kind: CanaryKind) -> bool:
    """Whether an UNSUPPORTED canary of ``kind`` is a skip (the model lacks the input)."""
    return _declares(kind, lambda driver: driver.unsupported_skipped)


def path_kinds() -> tuple[CanaryKind, ...]:
    """The registered path kinds, in registration order."""
    return tuple(kind for kind, driver in _REGISTRY.items() if driver.path)


def traffic_counters() -> dict[CanaryKind, str]:
    """The kinds whose real traffic the server counts, each with its counter."""
    return {kind: c for kind, driver in _REGISTRY.items() if (c := driver.traffic_counter)}


def unvalidatable(specs: Iterable[CanarySpec], facts: ServerFacts) -> dict[CanaryKind, str]:
    """The kinds that cannot be validated on a server with ``facts``, each with why.

    Per kind, as the ledger disables kinds: a kind is listed only when every
    enabled spec of it says so (one spec kept with ``reasoning: keep`` keeps
    the kind). Kinds not registered are ignored.
    """
    why: dict[CanaryKind, str] = {}
    kept: set[CanaryKind] = set()
    for spec in specs:
        driver = _REGISTRY.get(spec.kind)
        if driver is None or not spec.enabled:
            continue
        reason = driver.unvalidatable(spec, facts)
        if reason is None:
            kept.add(spec.kind)
        else:
            why.setdefault(spec.kind, reason)
    return {kind: reason for kind, reason in why.items() if kind not in kept}


for _builtin in (text.CANARY, structured.CANARY, multimodal.CANARY, correctness.CANARY):
    register(_builtin)
