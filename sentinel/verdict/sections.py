"""Typed section keys: one typed read of the evidence's heterogeneous sections.

Each evidence provider (:mod:`sentinel.record.provider`) owns one frozen
section; the verdict holds them all in one mapping
(:attr:`~sentinel.verdict.Evidence.sections`). A section is declared once as a
:class:`SectionKey`, its name (its key in ``/status``'s ``sections``) and its
type, beside the rule that judges it; the provider hands its section under
that key and every reader reads it through :meth:`SectionKey.read`, so a
reader gets the type the key names or nothing, and no reader looks a section
up by a bare string or tests its type itself (aiohttp's ``web.AppKey`` is the
model).

A section of another type than its key names reads as absent: "cannot tell",
never an error. The verdict is a pure function that must answer for any
evidence it is given (a raise would take the kubelet answers down with it),
and a provider whose section does not match its key is refused before it gets
here: statically, since :class:`~sentinel.record.provider.Provider` ties a
provider's section to its key's type, and at gathering
(:func:`~sentinel.record.provider.gather`), which raises on a mismatch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SectionKey(Generic[T]):
    """A section's name and type: how its provider hands it and its readers read it."""

    name: str  # the key in the evidence's sections and in /status's ``sections``
    type: type[T]

    def read(self, sections: Mapping[str, object]) -> T | None:
        """The section under this key's name, if it is of this key's type (None: cannot tell)."""
        value = sections.get(self.name)
        return value if isinstance(value, self.type) else None

    def holds(self, value: object) -> bool:
        """Whether ``value`` is a section of this key's type."""
        return isinstance(value, self.type)

    def __repr__(self) -> str:
        return f"SectionKey({self.name!r}, {self.type.__name__})"
