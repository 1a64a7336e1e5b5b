"""The plan: what scheduling goes by in one server epoch, frozen.

Whether startup passed (the verdict's state, published after each
judgement), which canary kinds are set aside and why, and which kinds send
their fallback request instead (a base model's text canary on
``/v1/completions``). Scheduling reads the plan and never the ledger's
records for these: one immutable value, replaced whole by its one writer
(:class:`sentinel.record.planner.Planner`), so a reader holding it sees one
consistent word, and a new server epoch starts from :meth:`Plan.fresh`
(nothing passed, nothing set aside, chat again).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from sentinel.canary.spec import CanaryKind

_NONE: Mapping[CanaryKind, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Plan:
    """One epoch's plan; every change is a new :class:`Plan`."""

    epoch: int = 0
    startup_passed: bool = False
    set_aside: Mapping[CanaryKind, str] = field(default_factory=lambda: _NONE)  # kind -> why
    fallbacks: Mapping[CanaryKind, str] = field(
        default_factory=lambda: _NONE
    )  # kind -> how it is sent instead

    @classmethod
    def fresh(cls, epoch: int) -> Plan:
        """A new server epoch's plan: startup is earned again, every kind runs as configured."""
        return cls(epoch)

    def runs(self, kind: CanaryKind) -> bool:
        """Whether ``kind``'s canaries go out (it is not set aside)."""
        return kind not in self.set_aside

    def fallback(self, kind: CanaryKind) -> str:
        """How ``kind`` is sent instead of its spec's request ('' : as configured)."""
        return self.fallbacks.get(kind, "")

    def started(self, passed: bool) -> Plan:
        """This plan with the judgement's word on startup."""
        return self if passed == self.startup_passed else replace(self, startup_passed=passed)

    def without(self, kind: CanaryKind, why: str) -> Plan:
        """This plan with ``kind`` set aside for ``why``."""
        return replace(self, set_aside=MappingProxyType({**self.set_aside, kind: why}))

    def falling_back(self, kind: CanaryKind, note: str) -> Plan:
        """This plan with ``kind`` sent its fallback way (``note`` says which and why)."""
        return replace(self, fallbacks=MappingProxyType({**self.fallbacks, kind: note}))
