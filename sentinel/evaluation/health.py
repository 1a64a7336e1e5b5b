"""Health state: the one place verdicts live, with one writer and many readers.

The daemon's evaluation loop is the only writer (:meth:`HealthState.publish`).
HTTP handlers (the probes from the listener's own thread: a snapshot is
immutable and replaced in one assignment), the gRPC health publisher and the
Prometheus collector are read-only views: they take :meth:`HealthState.snapshot`
(never waiting on the inference server) or wait for the next change with
:meth:`HealthState.wait_changed`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sentinel.verdict import ProbeAnswer
from sentinel.verdict.model import Ineffective

__all__ = ["HealthSnapshot", "HealthState", "ProbeAnswer", "initial_snapshot"]


@dataclass(frozen=True, slots=True)
class HealthSnapshot:
    """An immutable view of everything the endpoints and metrics report."""

    liveness: ProbeAnswer
    readiness: ProbeAnswer
    startup: ProbeAnswer
    enforce: bool = True
    priority_effective: bool | None = None  # None: unknown (no process visible, no config)
    progress_at: float | None = None  # monotonic time of the last real progress seen
    brake_engaged: bool = False  # the restart-loop brake holds a hang at unready
    # ... for a cause its restarts did not fix (sentinel.verdict.cause): the node to look at.
    restart_ineffective: Ineffective | None = None
    # The pool's restart budget (sentinel.fleet.budget): it holds a restart at unready;
    # how it applies (off, pool, alone); this pod holds one of its slots.
    budget_held: bool = False
    budget_mode: str = "off"
    budget_slot: bool = False
    phase: str = "awake"  # the server's lifecycle phase: awake, asleep, paused
    # Each piece of process evidence (sentinel.evidence.process_access) on or
    # off; empty until the process watcher sampled once (or when it is off).
    process_evidence: Mapping[str, bool] = field(default_factory=dict)
    status: Mapping[str, Any] = field(default_factory=dict)  # JSON-able, served by /status
    version: int = 0


def initial_snapshot(enforce: bool = True) -> HealthSnapshot:
    """Liveness passes from the moment sentinel listens; the others must be earned."""
    return HealthSnapshot(
        liveness=ProbeAnswer(True, "no hang confirmed"),
        readiness=ProbeAnswer(False, "startup has not passed"),
        startup=ProbeAnswer(False, "waiting for every canary kind to succeed", settling=True),
        enforce=enforce,
    )


class HealthState:
    """Holds the current snapshot and tells readers when it changes.

    It also tracks heartbeats of sentinel's own loops so ``/healthz`` can fail
    when one of them stops ticking: a wedged scheduler must not keep serving a
    stale green.
    """

    def __init__(self, *, enforce: bool = True, clock: Callable[[], float] | None = None) -> None:
        import time

        self._clock = clock or time.monotonic
        self._snapshot = initial_snapshot(enforce)
        self._changed = asyncio.Condition()
        self._heartbeats: dict[str, tuple[float, float]] = {}  # loop -> (last beat, max gap)

    def snapshot(self) -> HealthSnapshot:
        return self._snapshot

    async def publish(self, snapshot: HealthSnapshot) -> None:
        """Replace the snapshot (writer only) and wake every waiting reader."""
        async with self._changed:
            self._snapshot = _with_version(snapshot, self._snapshot.version + 1)
            self._changed.notify_all()

    async def wait_changed(self, seen_version: int) -> HealthSnapshot:
        """Return the first snapshot newer than ``seen_version``."""
        async with self._changed:
            await self._changed.wait_for(lambda: self._snapshot.version > seen_version)
            return self._snapshot

    def beat(self, loop: str, max_gap: float) -> None:
        """Record that ``loop`` is alive; it is stale once ``max_gap`` seconds pass."""
        self._heartbeats[loop] = (self._clock(), max_gap)

    def sidecar_health(self) -> ProbeAnswer:
        """Whether every registered loop ticked within its allowed gap."""
        now = self._clock()
        # Read from the HTTP listener's thread: list() copies the dict in one
        # step, so a loop registering its first beat meanwhile cannot break it.
        beats = list(self._heartbeats.items())
        stale = sorted(name for name, (last, gap) in beats if now - last > gap)
        if stale:
            return ProbeAnswer(False, "loops stopped ticking: " + ", ".join(stale))
        return ProbeAnswer(True, "all loops ticking")


def _with_version(snapshot: HealthSnapshot, version: int) -> HealthSnapshot:
    from dataclasses import replace

    return replace(snapshot, version=version)
