"""Evidence providers: a source of evidence beyond the ledger, one way in and one way out.

A provider owns one frozen *section* of the evidence, declared by a typed key
(:class:`~sentinel.verdict.sections.SectionKey`: the section's name and type,
beside the rule that judges it), handed to the verdict under that key
(:attr:`sentinel.verdict.Evidence.sections`; the built-in correctness check
and restart budget fill the typed fields of the same names), and renders its
own ``/status`` fragment from the section the verdict judged, never from live
state. A new feature is one provider plus one hang rule reading its section
through its key: no edit to the evaluator, the verdict's evidence record or the
status document.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar

from sentinel.verdict.sections import SectionKey

T = TypeVar("T")


class Provider(Protocol[T]):
    """One evidence source: its section at an instant, and what ``/status`` shows of it."""

    @property
    def key(self) -> SectionKey[T]:
        """The section's key: its name in the evidence and in ``/status``'s ``sections``."""
        ...

    def section(self, now: float) -> T | None:
        """The frozen section at ``now`` (None: none now; never raises: a source that
        cannot tell says so)."""
        ...

    def status(self, section: T, now: float) -> Mapping[str, Any] | None:
        """The ``/status`` fragment for the section judged (None: nothing to show)."""
        ...


def gather(providers: Sequence[Provider[Any]], now: float) -> dict[str, object]:
    """Every provider's section at ``now``, by its key's name (none for a provider that has
    none now); refused when two share a name or a section is not of its key's type.

    A mismatch is a provider's bug, which the type checker already refuses: it
    is raised here, where it is made, so the verdict never has to tell it apart
    from a section it cannot read.
    """
    sections: dict[str, object] = {}
    names: set[str] = set()
    for provider in providers:
        key = provider.key
        if key.name in names:
            raise ValueError(f"two evidence providers named {key.name!r}")
        names.add(key.name)
        section = provider.section(now)
        if section is None:
            continue
        if not key.holds(section):
            raise TypeError(f"the {key!r} section is a {type(section).__name__}")
        sections[key.name] = section
    return sections


def fragments(
    providers: Sequence[Provider[Any]], sections: Mapping[str, object], now: float
) -> dict[str, Any]:
    """Each provider's ``/status`` fragment, rendered from the sections the verdict judged."""
    shown: dict[str, Any] = {}
    for provider in providers:
        section = provider.key.read(sections)
        if section is not None:
            fragment = provider.status(section, now)
            if fragment is not None:
                shown[provider.key.name] = dict(fragment)
    return shown
