"""The restart-loop brake's memory kept in a Lease: recalled once at start, written on change.

:class:`BrakeMemory` is the component the evaluator holds. Before its first
verdict it recalls the pod's Lease (``sentinel-brake-<pod>``,
:mod:`sentinel.fleet.brake`) within :data:`RECALL_DEADLINE`, and seeds the
brake's state with the restarts remembered there; after each verdict it notes
whether the brake's memory changed (a restart asked for, one counted, one
aged out, an escalation), and its own loop writes the Lease, in a worker
thread, within :data:`WRITE_DEADLINE`: a verdict never waits for the API.

It degrades honestly. A Lease that cannot be read (no pod name, no
credentials, RBAC refused, the API down or slow, no such Lease, an
annotation that is not what sentinel writes) makes the memory *unavailable*,
with the reason, in ``/status`` (``sections.brake_memory``) and in one log
line; the sidecar then brakes on what it saw since it started, as it does
without this memory, and writes nothing (a write after a failed read could
overwrite what it could not read). A failed write is said the same way and
tried again on the next change, at most every :data:`RETRY`. Nothing here
decides a restart: the memory can only make the brake hold sooner.

:class:`BrakeLeases` reads and replaces the annotation through
:class:`~sentinel.fleet.lease.LeaseSlots` (the ``kubernetes`` client and its
errors stay there); like the restart budget's slots, the Lease is created by
the manifests, never by sentinel (RBAC cannot limit ``create`` by name).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from sentinel.config.settings import Settings
from sentinel.fleet.brake import ANNOTATION, Malformed, Remembered, decode, encode, lease_name
from sentinel.fleet.brake import remember as remembered
from sentinel.fleet.brake import seed as seeded
from sentinel.fleet.budget import Lease, LeaseConflict, LeaseMissing, LeaseUnavailable, stamp
from sentinel.fleet.lease import LeaseSlots
from sentinel.telemetry.events import (
    IN_CLUSTER,
    SERVICE_ACCOUNT,
    Connect,
    in_cluster_credentials,
    pod_identity,
)
from sentinel.telemetry.logging import get_logger
from sentinel.verdict import VerdictState
from sentinel.verdict.sections import SectionKey

log = get_logger(__name__)

RECALL_DEADLINE = 4.0  # the first verdict waits at most this long for the Lease
WRITE_DEADLINE = 4.0  # one write (a conflict's re-read included), under the loop's heartbeat
REQUEST_TIMEOUT = 3.0  # one request to the API server
LWS_ENV = "LWS_GROUP_SIZE"  # set by LeaderWorkerSet in every container of its pods
WRITE_EVERY = 1.0  # the write loop's tick: how soon a changed memory reaches the Lease
RETRY = 10.0  # a failed write is tried again no sooner than this

Key = tuple[object, ...]


class Annotations(Protocol):
    """Where the memory is kept (blocking calls; :class:`BrakeLeases`, or a test's store)."""

    def recall(self, name: str) -> str | None: ...

    def store(self, name: str, value: str, holder: str, now: float) -> object: ...

    def close(self) -> None: ...


class BrakeLeases(LeaseSlots):
    """One Lease's brake-memory annotation, read and replaced (blocking; in a worker thread)."""

    def __init__(self, connect: Connect, namespace: str, *, request_timeout: float) -> None:
        super().__init__(connect, namespace, request_timeout=request_timeout)
        self._last: dict[str, Lease] = {}  # as last read or written: the next write's version

    def recall(self, name: str) -> str | None:
        """The annotation's value (None: the Lease has none); raises the budget's Lease errors."""
        self._last[name] = self.read(name)
        annotations = getattr(self._seen[name].metadata, "annotations", None)
        value = annotations.get(ANNOTATION) if isinstance(annotations, dict) else None
        if value is not None and not isinstance(value, str):
            raise Malformed("the annotation is not a string")
        return value

    def store(self, name: str, value: str, holder: str, now: float) -> Lease:
        """Replace the annotation, holder and renewal; one lost race is read again and retried."""
        for _ in range(2):
            lease = self._last.get(name) or self.read(name)
            raw = self._seen[name]  # its metadata is written back whole: labels kept
            raw.metadata.annotations = {**(raw.metadata.annotations or {}), ANNOTATION: value}
            try:
                self._last[name] = self.write(replace(lease, holder=holder, renewed=now))
                return self._last[name]
            except LeaseConflict:
                self._last.pop(name, None)
        raise LeaseUnavailable(f"Lease {name} was written by another client twice in a row")


@dataclass(frozen=True, slots=True)
class BrakeMemoryStatus:
    """The memory as ``/status`` shows it: frozen at one evaluation (the provider's section)."""

    state: str  # off, recalling, kept (recalled; written on change), unavailable
    why: str = ""
    lease: str = ""
    recalled: Remembered | None = None
    written_at: float | None = None  # wall clock

    def document(self) -> dict[str, Any]:
        recalled = self.recalled
        return {
            "state": self.state,
            "why": self.why or None,
            "lease": self.lease or None,
            "recalled_restarts": None
            if recalled is None
            else [{"at": stamp(at), "cause": cause} for at, cause in recalled.restarts],
            "recalled_ineffective": None if recalled is None else recalled.ineffective or None,
            "dropped_from_the_future": None if recalled is None else recalled.future,
            "written_at": stamp(self.written_at),
        }


# Its section in the evidence: /status shows it (``sections.brake_memory``), no rule reads it.
BRAKE_MEMORY = SectionKey("brake_memory", BrakeMemoryStatus)


class BrakeMemory:
    """This pod's brake memory; the evaluator seeds and tells it, the daemon runs its step."""

    @property
    def key(self) -> SectionKey[BrakeMemoryStatus]:
        """Its section: /status shows it, no rule reads it."""
        return BRAKE_MEMORY

    def __init__(
        self,
        *,
        window: float = 3600.0,
        pod: str = "",
        leases: Annotations | None = None,
        why: str | None = None,
        wall: Callable[[], float] = time.time,
        recall_deadline: float = RECALL_DEADLINE,
    ) -> None:
        self.window = window
        self.pod = pod
        self.lease = lease_name(pod) if pod else ""
        self.leases = leases
        self.wall = wall
        self.recall_deadline = recall_deadline
        state = "unavailable" if why else "off" if leases is None else "recalling"
        self.status_now = BrakeMemoryStatus(state, why or "", self.lease)
        if why:
            log.warning("brake_memory.unavailable", why=why, lease=self.lease or None)
        self.recalled = leases is None  # nothing to recall without a Lease
        self.writing = False  # only after a successful recall
        self._asked: tuple[int, float] | None = None  # (epoch, when) liveness failed in it
        self._latest: tuple[VerdictState, float] | None = None
        self._written: Key | None = None
        self._failed_at: float | None = None

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        env: Mapping[str, str],
        *,
        account: Path = SERVICE_ACCOUNT,
        connect: Connect | None = None,
    ) -> BrakeMemory:
        """In a LeaderWorkerSet's pod (``auto``) or when asked (``on``); off otherwise.

        LWS writes ``LWS_GROUP_SIZE`` into every container of a group's pods,
        sidecars included: the pods it recreates whole, sidecar and all.
        """
        mode, window = settings.brake_memory, settings.brake_window
        grouped = bool(env.get("POD_NAME", "").strip()) and bool(env.get(LWS_ENV, "").strip())
        if mode == "off" or (mode == "auto" and not grouped):
            return cls(window=window)
        pod = pod_identity(env, namespace_file=account / "namespace")
        if pod is None:
            return cls(window=window, why="not in a pod (POD_NAME/POD_NAMESPACE unset)")
        if connect is None and (missing := in_cluster_credentials(env, account)):
            return cls(window=window, pod=pod.name, why=f"no in-cluster credentials: {missing}")
        leases = BrakeLeases(connect or IN_CLUSTER, pod.namespace, request_timeout=REQUEST_TIMEOUT)
        return cls(window=window, pod=pod.name, leases=leases)

    @classmethod
    def in_pod(cls, settings: Settings) -> BrakeMemory:
        """The daemon's: this process's environment."""
        return cls.from_settings(settings, os.environ)

    @property
    def enabled(self) -> bool:
        return self.status_now.state != "off"

    # -- what the evaluator asks and tells ------------------------------------
    async def seed(self, state: VerdictState, now: float) -> VerdictState:
        """The first time: ``state`` with the Lease's restarts (within the deadline); then as is."""
        if self.recalled:
            return state
        self.recalled = True
        assert self.leases is not None
        try:
            async with asyncio.timeout(self.recall_deadline):
                text = await asyncio.to_thread(self.leases.recall, self.lease)
            memory = decode(text, self.wall(), self.window)
        except TimeoutError:
            return self._unavailable(f"no answer within {self.recall_deadline:g}s", state)
        except LeaseMissing:
            why = f"no Lease {self.lease} (the manifests create it: docs/groups.md)"
            return self._unavailable(why, state)
        except LeaseUnavailable as exc:
            return self._unavailable(str(exc), state)
        except Malformed as exc:
            return self._unavailable(f"annotation {ANNOTATION} malformed: {exc}", state)
        state = seeded(state, memory, self.wall(), now)
        self.status_now = replace(self.status_now, state="kept", recalled=memory)
        self.writing = True
        self._written = self._key(state)
        log.info(
            "brake_memory.recalled",
            lease=self.lease,
            restarts=len(memory.restarts),
            causes=sorted({cause for _, cause in memory.restarts}),
            ineffective=memory.ineffective or None,
            from_the_future=memory.future or None,
        )
        return state

    def observe(self, state: VerdictState, now: float) -> None:
        """The verdict's state after an evaluation at ``now``: remembered when it changed."""
        if not self.writing:
            return
        if not state.red_in_epoch:
            self._asked = None
        elif self._asked is None or self._asked[0] != state.epoch:
            self._asked = (state.epoch, now)
        self._latest = (state, now)

    # -- the write loop ------------------------------------------------------
    def steps(self) -> list[tuple[str, float, Callable[[], Awaitable[None]]]]:
        """The daemon's periodic step (none while nothing is written)."""
        return [("brake-memory", WRITE_EVERY, self.step)] if self.enabled else []

    async def step(self) -> None:
        """Write the Lease when the brake's memory changed since the last write."""
        if not self.writing or self._latest is None or self.leases is None:
            return
        state, now = self._latest
        key = self._key(state)
        wall = self.wall()
        if key == self._written or (self._failed_at is not None and wall - self._failed_at < RETRY):
            return
        asked = None if self._asked is None else self._asked[1]
        text = encode(remembered(state, asked, now, wall, self.window))
        try:
            async with asyncio.timeout(WRITE_DEADLINE):
                await asyncio.to_thread(self.leases.store, self.lease, text, self.pod, wall)
        except (TimeoutError, LeaseMissing, LeaseUnavailable) as exc:
            self._failed_at = wall
            why = f"no answer within {WRITE_DEADLINE:g}s" if isinstance(exc, TimeoutError) else exc
            self._unavailable(f"writing Lease {self.lease} failed: {why}", state)
            return
        self._written, self._failed_at = key, None
        if self.status_now.state != "kept":
            log.info("brake_memory.kept_again", lease=self.lease)
        self.status_now = replace(self.status_now, state="kept", why="", written_at=wall)

    def _key(self, state: VerdictState) -> Key:
        asked = self._asked[1] if self._asked is not None and state.red_in_epoch else None
        ineffective = state.ineffective.cause if state.ineffective is not None else ""
        cause = state.red_cause if asked is not None else ""
        return (state.restarts, state.causes, asked, cause, ineffective)

    def _unavailable(self, why: str, state: VerdictState) -> VerdictState:
        if self.status_now.why != why:
            log.warning("brake_memory.unavailable", why=why, lease=self.lease)
        self.status_now = replace(self.status_now, state="unavailable", why=why)
        return state

    # -- the provider: /status ------------------------------------------------
    def section(self, now: float) -> BrakeMemoryStatus:
        return self.status_now

    def status(self, section: BrakeMemoryStatus, now: float) -> Mapping[str, Any] | None:
        if section.state == "off":
            return None
        return section.document()

    def close(self) -> None:
        if self.leases is not None:
            self.leases.close()


__all__ = ["BRAKE_MEMORY", "Annotations", "BrakeLeases", "BrakeMemory", "BrakeMemoryStatus"]
