"""The restart budget's gate as evidence: the provider of the evidence's ``restart_gate``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sentinel.fleet.lease import PoolBudget
from sentinel.verdict import RestartGate
from sentinel.verdict.model import RESTART_GATE
from sentinel.verdict.sections import SectionKey


@dataclass(frozen=True, slots=True)
class BudgetGate:
    """The restart budget's gate as the evidence's ``restart_gate`` section.

    Its ``/status`` is the ``restart_budget`` block (:meth:`PoolBudget.status`).
    """

    budget: PoolBudget

    @property
    def key(self) -> SectionKey[RestartGate]:
        return RESTART_GATE

    @classmethod
    def of(cls, budget: PoolBudget) -> tuple[BudgetGate, ...]:
        """The gate of a budget in force; none for a budget that is off."""
        return (cls(budget),) if budget.enabled else ()

    def section(self, now: float) -> RestartGate:
        return self.budget.gate()

    def status(self, section: RestartGate, now: float) -> Mapping[str, Any] | None:
        return None
