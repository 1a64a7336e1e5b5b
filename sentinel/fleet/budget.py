"""The pool's restart budget: which restart slot this pod may take, and when, decided purely.

A cause shared by a whole pool (a bad model push, a storage outage) would
have every sidecar fail its server's liveness at once. The budget caps how
many of a pool's servers sentinel restarts within a window: each restart
takes one *slot*, a ``coordination.k8s.io/v1`` Lease named
``<pool>-restart-<i>`` that the manifests create beforehand. A pod whose
confirmed hang finds every slot held waits unready, liveness green, until a
slot frees (docs/restart-budget.md).

This module owns the rules and nothing else: what a Lease says (:class:`Lease`),
when a slot is free, what taking, renewing and releasing one writes, the
sequence of reads and optimistic writes that takes a slot through any
:class:`Leases` store (:func:`take_slot`), and the small state machine of one
pod's slot (:class:`SlotKeeper`). Times are wall-clock seconds (Lease times
are wall-clock timestamps) handed in by the caller, so every rule runs on a
virtual clock in tests. The Kubernetes calls are :mod:`sentinel.fleet.lease`'s.

A slot is free when it has no holder or when its holder's ``renewTime +
leaseDurationSeconds`` has passed as this pod's clock judges it: Kubernetes
never expires a Lease itself. A slot is taken by a write carrying the
resourceVersion that was read; a conflict means another pod won, so the slot
is read again and, if taken, the next one is tried.

Release policy: a slot whose restart happened (liveness failed while it was
held) is renewed until the server is back (a new epoch that passed startup,
or the hang cleared) and at most one more window after the new epoch; then it
is left to expire a window after its last renewal, so one restart counts
against the budget for at least a window. A slot taken for a restart that
never happened (the hang cleared first) is released at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Protocol

CONFLICT_RETRIES = 3  # re-reads of one slot after lost races before trying the next


class Mode(StrEnum):
    """How the budget is applied: not at all, with the pool, or by this pod alone."""

    OFF = "off"  # restart_budget.enabled is false
    POOL = "pool"  # the Leases answer: restarts are coordinated
    ALONE = "alone"  # no API access: restarts proceed as without a budget


@dataclass(frozen=True, slots=True)
class Lease:
    """One restart slot as the API server last showed it (times in wall-clock seconds)."""

    name: str
    version: str  # metadata.resourceVersion: the write must carry what was read
    holder: str | None = None
    acquired: float | None = None
    renewed: float | None = None
    duration: int | None = None  # leaseDurationSeconds
    transitions: int = 0

    @property
    def expires(self) -> float | None:
        """When the holder's claim lapses; None when there is no holder or no renewal."""
        if not self.holder or self.renewed is None or self.duration is None:
            return None
        return self.renewed + self.duration

    def free_for(self, me: str, now: float) -> bool:
        """No holder, this pod holds it already, or its holder's claim has lapsed."""
        if not self.holder or self.holder == me:
            return True
        expires = self.expires
        return expires is None or expires <= now


class LeaseConflict(Exception):
    """The write carried a stale resourceVersion: another pod wrote the slot first."""


class LeaseMissing(Exception):
    """No Lease of that name: the manifests did not create this slot."""


class LeaseUnavailable(Exception):
    """The API cannot be used (refused, unreachable, timed out); the message says why."""


class Leases(Protocol):
    """Reads and optimistic writes of named Leases (blocking; :mod:`sentinel.fleet.lease`)."""

    def read(self, name: str) -> Lease: ...

    def write(self, lease: Lease) -> Lease: ...


def lease_seconds(window: float) -> int:
    """The Lease's ``leaseDurationSeconds``: the window rounded up to whole seconds."""
    return max(1, math.ceil(window))


def slot_count(slots: int | None, share: float | None, pool_size: int | None) -> int:
    """``slots``, or ``share`` of ``pool_size`` rounded down and at least 1.

    Rounded down so the budget never allows more than the share: 25% of 10
    servers is 2 slots, and 25% of 3 is still 1 (a budget of none would keep
    every hang alive).
    """
    if slots is not None:
        return slots
    if share is not None and pool_size is not None:
        return max(1, math.floor(share * pool_size + 1e-9))
    return 1


def slot_names(pool: str, count: int) -> tuple[str, ...]:
    return tuple(f"{pool}-restart-{i}" for i in range(count))


def claimed(lease: Lease, me: str, now: float, window: float) -> Lease:
    """The slot as this pod writes it to take it (or to renew it when it holds it)."""
    ours = lease.holder == me
    return replace(
        lease,
        holder=me,
        acquired=lease.acquired if ours and lease.acquired is not None else now,
        renewed=now,
        duration=lease_seconds(window),
        transitions=lease.transitions if ours or not lease.holder else lease.transitions + 1,
    )


def released(lease: Lease) -> Lease:
    """The slot as written to give it back now: no holder."""
    return replace(lease, holder=None, acquired=None, renewed=None)


@dataclass(frozen=True, slots=True)
class Attempt:
    """What one pass over the slots found: the slot taken (``lease``), or the slots held."""

    lease: Lease | None
    held: tuple[Lease, ...] = ()
    missing: tuple[str, ...] = ()


def take_slot(
    leases: Leases, names: Sequence[str], me: str, clock: Callable[[], float], window: float
) -> Attempt:
    """Take the first free slot, in order; raise :class:`LeaseUnavailable` when none exists.

    A slot this pod holds already is taken again (a restarted sidecar finds
    its own claim). A lost race is read again: the slot may still be free
    (the winner wrote another field) or now held, then the next is tried.
    """
    held: list[Lease] = []
    missing: list[str] = []
    for name in names:
        for _ in range(CONFLICT_RETRIES):
            try:
                lease = leases.read(name)
            except LeaseMissing:
                missing.append(name)
                break
            if not lease.free_for(me, clock()):
                held.append(lease)
                break
            try:
                taken = leases.write(claimed(lease, me, clock(), window))
                return Attempt(taken, tuple(held), tuple(missing))
            except LeaseConflict:
                continue
    if len(missing) == len(names):
        raise LeaseUnavailable(f"no restart slot Lease exists ({', '.join(names)})")
    return Attempt(None, tuple(held), tuple(missing))


def renew_slot(leases: Leases, lease: Lease, me: str, now: float, window: float) -> Lease | None:
    """Renew this pod's slot; None when another pod holds it now (the claim lapsed)."""
    try:
        return leases.write(claimed(lease, me, now, window))
    except LeaseConflict:
        current = leases.read(lease.name)
        if current.holder != me:
            return None
        return leases.write(claimed(current, me, now, window))


def release_slot(leases: Leases, lease: Lease, me: str) -> None:
    """Give the slot back unless another pod holds it by now."""
    try:
        leases.write(released(lease))
    except LeaseConflict:
        current = leases.read(lease.name)
        if current.holder == me:
            leases.write(released(current))


def stamp(seconds: float | None) -> str | None:
    """A wall-clock time as RFC 3339 (UTC, whole seconds) for messages and ``/status``."""
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def exhausted(pool: str, count: int, held: Sequence[Lease]) -> str:
    """``restart budget of pool X exhausted: 1 of 1 slots held by pod-a until T``."""
    if not held:
        return f"restart budget of pool {pool}: asking for one of {count} restart slots"
    holders = ", ".join(f"{lease.holder} until {stamp(lease.expires)}" for lease in held)
    return (
        f"restart budget of pool {pool} exhausted: {len(held)} of {count} slots held by {holders}"
    )


class Step(StrEnum):
    """What the slot keeper asks its caller to do next."""

    WAIT = "wait"  # nothing to write now
    TAKE = "take"  # a restart is wanted and no slot is held: try the slots
    RENEW = "renew"  # the restart is pending or in progress: keep the claim
    RELEASE = "release"  # taken for a restart that never happened: give it back
    LEAVE = "leave"  # the restart is over: stop renewing, let the Lease expire


@dataclass(frozen=True, slots=True)
class Wish:
    """What the verdict says at one evaluation."""

    wanted: bool  # a confirmed restart-policy hang, enforcing, brake off
    failing: bool  # liveness is failing now
    epoch: int  # the server's epoch (a new one: the server restarted)
    started: bool  # the server passed startup in this epoch


@dataclass(frozen=True, slots=True)
class SlotKeeper:
    """One pod's slot: held or not, and what the restart it was taken for has done.

    Pure: :meth:`plan` maps the keeper, the latest :class:`Wish` and the wall
    clock to the next :class:`Step`; the caller performs it and records the
    outcome with :meth:`took`, :meth:`renewed` or :meth:`dropped`.
    """

    window: float
    retry_interval: float
    lease: Lease | None = None
    epoch: int = 0  # the server's epoch when the slot was taken
    failed: bool = False  # liveness failed while the slot was held: a restart was asked
    back_at: float | None = None  # wall time a new epoch was first seen
    last_try: float | None = None  # wall time of the last TAKE

    @property
    def renew_every(self) -> float:
        """A third of the window, as leader election renews, so two misses still hold it."""
        return self.window / 3

    def plan(self, wish: Wish, now: float) -> Step:
        if self.lease is None:
            due = self.last_try is None or now - self.last_try >= self.retry_interval
            return Step.TAKE if wish.wanted and due else Step.WAIT
        if not self.failed and not wish.failing and not wish.wanted:
            return Step.RELEASE
        restarted = wish.epoch != self.epoch
        if restarted:
            back = self.back_at if self.back_at is not None else now
            if wish.started or now - back >= self.window:
                return Step.LEAVE
        elif not wish.wanted:
            return Step.LEAVE  # the hang cleared without a restart
        renewed = self.lease.renewed
        return Step.RENEW if renewed is None or now - renewed >= self.renew_every else Step.WAIT

    def observe(self, wish: Wish, now: float) -> SlotKeeper:
        """Note what the wish says about the restart the slot was taken for."""
        if self.lease is None:
            return self
        keeper = self
        if wish.failing and not keeper.failed:
            keeper = replace(keeper, failed=True)
        if wish.epoch != keeper.epoch and keeper.back_at is None:
            keeper = replace(keeper, back_at=now)
        return keeper

    def tried(self, now: float) -> SlotKeeper:
        return replace(self, last_try=now)

    def took(self, lease: Lease, epoch: int) -> SlotKeeper:
        return replace(self, lease=lease, epoch=epoch, failed=False, back_at=None)

    def renewed(self, lease: Lease) -> SlotKeeper:
        return replace(self, lease=lease)

    def dropped(self) -> SlotKeeper:
        return replace(self, lease=None, failed=False, back_at=None, last_try=None)
