"""What the record's readers read of the ledger: a narrow, read-only face.

The canary scheduler's helpers (aiming, comeback, suspicion, the auto-sleep
hold) and the record's own providers that only read (reachability, KV
transfer, auto-sleep) take a :class:`LedgerReading`, not the
:class:`~sentinel.record.ledger.Ledger`: they cannot call a writer, the type
checker says so, and the ledger's importers stay the few that write it or
build it. The ledger is one (structurally); so is any test double.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from typing import Protocol

from sentinel.canary.result import CanaryResult
from sentinel.canary.spec import CanaryKind
from sentinel.evidence.process_model import ProcessSnapshot
from sentinel.progress.tracker import ProgressTracker
from sentinel.record.lifecycle import LifecycleTracker
from sentinel.record.plan import Plan


class KindReading(Protocol):
    """What the readers read of one kind's history (a ledger ``KindRecord``)."""

    @property
    def results(self) -> Iterable[CanaryResult]: ...
    @property
    def outstanding(self) -> Mapping[int, float]: ...  # token -> send time
    @property
    def awaited(self) -> Set[int]: ...  # timed-out canaries still awaited late


class LedgerReading(Protocol):
    """What the readers read of the ledger."""

    @property
    def epoch(self) -> int: ...
    @property
    def epoch_started(self) -> float: ...
    @property
    def records(self) -> Mapping[CanaryKind, KindReading]: ...
    @property
    def plan(self) -> Plan: ...
    @property
    def progress(self) -> ProgressTracker: ...
    @property
    def lifecycle(self) -> LifecycleTracker: ...
    @property
    def processes(self) -> ProcessSnapshot | None: ...
    @property
    def reachable(self) -> bool | None: ...
    @property
    def refused_since(self) -> float | None: ...
    @property
    def answered(self) -> bool: ...
    @property
    def health_status(self) -> int | None: ...
    def in_flight(self) -> int: ...
    def busy(self, now: float, idle_window: float) -> bool: ...
