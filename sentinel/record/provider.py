"""Evidence providers: a source of evidence beyond the ledger, one way in and one way out.

A provider owns one frozen *section* of the evidence, handed to the verdict
under its name (:attr:`sentinel.verdict.Evidence.sections`; the built-in
correctness check and restart budget fill the typed fields of the same
names), and renders its own ``/status`` fragment from the section the
verdict judged, never from live state. A new feature is one provider plus
one hang rule reading its section: no edit to the evaluator, the verdict's
evidence record or the status document.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol


class Provider(Protocol):
    """One evidence source: its section at an instant, and what ``/status`` shows of it."""

    @property
    def name(self) -> str:
        """The section's name: its key in the evidence and in ``/status``'s ``sections``."""
        ...

    def section(self, now: float) -> object:
        """The frozen section at ``now`` (never raises: a source that cannot tell says so)."""
        ...

    def status(self, section: object, now: float) -> Mapping[str, Any] | None:
        """The ``/status`` fragment for the section judged (None: nothing to show)."""
        ...


def gather(providers: Sequence[Provider], now: float) -> dict[str, object]:
    """Every provider's section at ``now``, by name; refused when two share a name."""
    sections: dict[str, object] = {}
    for provider in providers:
        if provider.name in sections:
            raise ValueError(f"two evidence providers named {provider.name!r}")
        sections[provider.name] = provider.section(now)
    return sections


def fragments(
    providers: Sequence[Provider], sections: Mapping[str, object], now: float
) -> dict[str, Any]:
    """Each provider's ``/status`` fragment, rendered from the sections the verdict judged."""
    shown: dict[str, Any] = {}
    for provider in providers:
        if provider.name in sections:
            fragment = provider.status(sections[provider.name], now)
            if fragment is not None:
                shown[provider.name] = dict(fragment)
    return shown
