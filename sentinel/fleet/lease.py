"""The restart budget's Kubernetes side: the slot Leases and the loop that keeps this pod's.

:class:`LeaseSlots` reads and replaces ``coordination.k8s.io/v1`` Leases with
the ``kubernetes`` client (``get`` and ``update`` only: the manifests create
the Leases, and RBAC cannot limit ``create`` by name), mapping the API's
answers to :mod:`sentinel.fleet.budget`'s errors: 409 a lost race, 404 a slot
that does not exist, anything else (403, 5xx, a timeout, no route) an API
that cannot be used. Its calls block; :class:`PoolBudget` runs them in a
worker thread, each request bounded by ``restart_budget.request_timeout``.

:class:`PoolBudget` is the component the daemon runs: the evaluator hands it
each verdict's :class:`~sentinel.fleet.budget.Wish` and reads back the
:class:`~sentinel.verdict.RestartGate` the next verdict applies, so the
verdict stays pure and the Lease I/O never blocks an evaluation. Without API
access (outside a cluster, RBAC refused, the API down, no slot Lease) it acts
alone: the gate stays open and restarts happen as without a budget, said once
in the log, in ``/status`` and by ``sentinel_restart_budget_mode``. A pod whose
liveness already fails keeps failing it even when the API comes back with
every slot held: flapping would reset the kubelet's failure count.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sentinel.config.settings import RestartBudget
from sentinel.fleet.budget import (
    Lease,
    LeaseConflict,
    LeaseMissing,
    Leases,
    LeaseUnavailable,
    Mode,
    SlotKeeper,
    Step,
    Wish,
    exhausted,
    release_slot,
    renew_slot,
    slot_count,
    slot_names,
    stamp,
    take_slot,
)
from sentinel.telemetry.events import (
    IN_CLUSTER,
    SERVICE_ACCOUNT,
    Connect,
    EventReason,
    EventReporter,
    PodIdentity,
    in_cluster_credentials,
    pod_identity,
)
from sentinel.telemetry.logging import get_logger
from sentinel.verdict import RestartGate

log = get_logger(__name__)

POOL_ENV = "POOL_NAME"  # the pool's name from the downward API (a label of the pod)


class LeaseSlots:
    """Blocking reads and optimistic replaces of the slot Leases in one namespace."""

    def __init__(self, connect: Connect, namespace: str, *, request_timeout: float) -> None:
        self._connect = connect
        self.namespace = namespace
        self._timeout = request_timeout
        self._api: Any | None = None
        self._client: Any | None = None
        self._lock = threading.Lock()
        self._seen: dict[str, Any] = {}  # the last V1Lease read of each name, written back whole

    def _coordination(self) -> Any:
        with self._lock:
            if self._api is None:
                from kubernetes import client

                self._client = self._connect()
                self._api = client.CoordinationV1Api(self._client)
            return self._api

    def _call(self, name: str, call: Callable[[Any], Any]) -> Lease:
        api = self._coordination()
        from kubernetes.client.exceptions import ApiException

        try:
            raw = call(api)
        except ApiException as exc:
            if exc.status == 409:
                raise LeaseConflict(name) from None
            if exc.status == 404:
                raise LeaseMissing(name) from None
            raise LeaseUnavailable(
                f"API answered {exc.status} {exc.reason} for Lease {name}"
            ) from None
        except Exception as exc:  # urllib3 connection errors, timeouts, bad config
            raise LeaseUnavailable(f"{type(exc).__name__}: {exc}") from None
        self._seen[name] = raw
        return _lease(raw)

    def read(self, name: str) -> Lease:
        return self._call(
            name,
            lambda api: api.read_namespaced_lease(
                name, self.namespace, _request_timeout=self._timeout
            ),
        )

    def write(self, lease: Lease) -> Lease:
        from kubernetes import client

        # The metadata read (labels, annotations kept), conditional on the version read.
        seen = self._seen.get(lease.name)
        metadata = seen.metadata if seen is not None else client.V1ObjectMeta(name=lease.name)
        body = client.V1Lease(
            api_version="coordination.k8s.io/v1",
            kind="Lease",
            metadata=client.V1ObjectMeta(
                name=lease.name,
                namespace=metadata.namespace,
                labels=metadata.labels,
                annotations=metadata.annotations,
                resource_version=lease.version,
            ),
            spec=client.V1LeaseSpec(
                holder_identity=lease.holder,
                acquire_time=_time(lease.acquired),
                renew_time=_time(lease.renewed),
                lease_duration_seconds=lease.duration,
                lease_transitions=lease.transitions,
            ),
        )
        return self._call(
            lease.name,
            lambda api: api.replace_namespaced_lease(
                lease.name, self.namespace, body, _request_timeout=self._timeout
            ),
        )

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()


def _time(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def _seconds(value: Any) -> float | None:
    return value.timestamp() if isinstance(value, datetime) else None


def _lease(raw: Any) -> Lease:
    spec = raw.spec
    return Lease(
        name=raw.metadata.name,
        version=raw.metadata.resource_version or "",
        holder=None if spec is None else spec.holder_identity or None,
        acquired=None if spec is None else _seconds(spec.acquire_time),
        renewed=None if spec is None else _seconds(spec.renew_time),
        duration=None if spec is None else spec.lease_duration_seconds,
        transitions=0 if spec is None else spec.lease_transitions or 0,
    )


class PoolBudget:
    """This pod's place in its pool's restart budget; the daemon runs :meth:`run`."""

    def __init__(
        self,
        config: RestartBudget,
        *,
        pool: str = "",
        pod: PodIdentity | None = None,
        leases: Leases | None = None,
        events: EventReporter | None = None,
        alone: str | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.pool = pool
        self.pod = pod
        self.leases = leases
        self.events = events
        self.wall = wall
        self.count = slot_count(config.slots, config.share, config.pool_size)
        self.names = slot_names(pool, self.count)
        self.mode = Mode.OFF if not config.enabled else Mode.ALONE if alone else Mode.POOL
        self.why = alone
        if self.mode is Mode.ALONE:
            log.warning("restart_budget.alone", why=alone, pool=pool or None)
        self.keeper = SlotKeeper(window=config.window, retry_interval=config.retry_interval)
        self.wish = Wish(wanted=False, failing=False, epoch=0, started=False)
        self.held: tuple[Lease, ...] = ()  # the slots others held at the last try
        self.counting: Lease | None = None  # a slot left to expire after its restart
        self.asked = False  # a try was made in this episode (the gate's reason says so)
        self.posted = False  # the episode's Event is out
        self._missing_said: set[str] = set()
        self._wake = asyncio.Event()

    @classmethod
    def from_settings(
        cls,
        config: RestartBudget,
        env: Mapping[str, str],
        *,
        account: Path = SERVICE_ACCOUNT,
        events: EventReporter | None = None,
        connect: Connect | None = None,
    ) -> PoolBudget:
        """In a pod: its identity, pool and service account; alone (and why) without them."""
        if not config.enabled:
            return cls(config)
        pool = config.pool or env.get(POOL_ENV, "").strip()
        pod = pod_identity(env, namespace_file=account / "namespace")
        why: str | None = None
        if pod is None:
            why = "not in a pod (POD_NAME/POD_NAMESPACE unset)"
        elif not pool:
            why = f"no pool name: set restart_budget.pool or {POOL_ENV}"
        elif connect is None and (missing := in_cluster_credentials(env, account)):
            why = f"no in-cluster credentials: {missing}"
        if pod is None or why is not None:
            return cls(config, pool=pool, pod=pod, alone=why)
        namespace = config.namespace or pod.namespace
        slots = LeaseSlots(connect or IN_CLUSTER, namespace, request_timeout=config.request_timeout)
        return cls(config, pool=pool, pod=pod, leases=slots, events=events)

    @classmethod
    def in_pod(cls, config: RestartBudget) -> PoolBudget:
        """The daemon's: this process's environment, Events on the pod when enabled."""
        if not config.enabled:
            return cls(config)
        return cls.from_settings(config, os.environ, events=EventReporter.from_environment())

    @property
    def enabled(self) -> bool:
        return self.mode is not Mode.OFF

    @property
    def me(self) -> str:
        return "" if self.pod is None else self.pod.name

    # -- what the evaluator reads and tells ----------------------------------
    def gate(self) -> RestartGate:
        """Closed only while coordinating, holding no slot, and not failing liveness already."""
        if self.mode is not Mode.POOL or self.keeper.lease is not None or self.wish.failing:
            return RestartGate()
        return RestartGate(False, exhausted(self.pool, self.count, self.held if self.asked else ()))

    def observe(self, wish: Wish) -> None:
        """The verdict's latest wish; wakes the loop when it changes."""
        if wish != self.wish:
            self.wish = wish
            self._wake.set()

    def status(self) -> dict[str, Any]:
        """The ``/status`` ``restart_budget`` section."""
        lease = self.keeper.lease
        return {
            "mode": self.mode.value,
            "why": self.why,
            "pool": self.pool or None,
            "slots": self.count,
            "window": self.config.window,
            "held_by_budget": not self.gate().open and self.wish.wanted,
            "holding": None
            if lease is None
            else {"slot": lease.name, "until": stamp(lease.expires)},
            "counting": None
            if self.counting is None
            else {"slot": self.counting.name, "until": stamp(self.counting.expires)},
            "held_by_others": [
                {"slot": h.name, "holder": h.holder, "until": stamp(h.expires)} for h in self.held
            ],
        }

    # -- the loop -------------------------------------------------------------
    async def run(self) -> None:
        """Keep this pod's slot until cancelled (a no-op loop when acting without the API)."""
        while True:
            await self.step()
            await self._sleep(min(self.config.retry_interval, self.keeper.renew_every))

    async def _sleep(self, seconds: float) -> None:
        try:
            async with asyncio.timeout(seconds):
                await self._wake.wait()
        except TimeoutError:
            pass
        self._wake.clear()

    async def step(self) -> Step:
        """Plan against the latest wish and perform it; returns what was done."""
        now = self.wall()
        wish = self.wish
        if not wish.wanted:
            self.asked, self.posted, self.held = False, False, ()
        self.keeper = self.keeper.observe(wish, now)
        planned = self.keeper.plan(wish, now)
        if self.leases is None or planned is Step.WAIT or not self.enabled:
            return planned
        try:
            await self._perform(planned, wish, now)
        except LeaseUnavailable as exc:
            self._alone(str(exc))
        return planned

    async def _perform(self, planned: Step, wish: Wish, now: float) -> None:
        leases = self.leases
        assert leases is not None
        lease = self.keeper.lease
        if planned is Step.TAKE:
            self.keeper = self.keeper.tried(now)
            window = self.config.window
            attempt = await asyncio.to_thread(
                take_slot, leases, self.names, self.me, self.wall, window
            )
            self._coordinating()
            self._say_missing(attempt.missing)
            self.asked = True
            if attempt.lease is not None:
                self.keeper = self.keeper.took(attempt.lease, wish.epoch)
                self.held, self.counting = (), None
                log.info("restart_budget.slot_taken", slot=attempt.lease.name, pool=self.pool)
            else:
                self.held = attempt.held
                if not wish.failing:  # failing already (it went ahead alone): not held
                    await self._exhausted()
        elif planned is Step.RENEW and lease is not None:
            window = self.config.window
            renewed = await asyncio.to_thread(renew_slot, leases, lease, self.me, now, window)
            self._coordinating()
            if renewed is None:
                log.warning("restart_budget.slot_lost", slot=lease.name, pool=self.pool)
                self.keeper = self.keeper.dropped()
            else:
                self.keeper = self.keeper.renewed(renewed)
        elif planned is Step.RELEASE and lease is not None:
            await asyncio.to_thread(release_slot, leases, lease, self.me)
            log.info("restart_budget.slot_released", slot=lease.name, pool=self.pool)
            self.keeper = self.keeper.dropped()
        elif planned is Step.LEAVE and lease is not None:
            log.info(
                "restart_budget.slot_left",
                slot=lease.name,
                until=stamp(lease.expires),
                pool=self.pool,
            )
            self.counting = lease
            self.keeper = self.keeper.dropped()

    async def _exhausted(self) -> None:
        if self.posted:
            return
        self.posted = True
        reason = exhausted(self.pool, self.count, self.held)
        log.warning("restart_budget.exhausted", reason=reason, pool=self.pool)
        if self.events is not None and self.events.enabled:
            await self.events.post(
                EventReason.RESTART_BUDGET, reason + "; unready, not restarting until a slot frees"
            )

    def _alone(self, why: str) -> None:
        if self.mode is not Mode.ALONE or self.why != why:
            log.warning("restart_budget.alone", why=why, pool=self.pool)
        self.mode, self.why = Mode.ALONE, why

    def _coordinating(self) -> None:
        if self.mode is not Mode.POOL:
            log.info("restart_budget.coordinating", pool=self.pool)
        self.mode, self.why = Mode.POOL, None

    def _say_missing(self, missing: tuple[str, ...]) -> None:
        new = [name for name in missing if name not in self._missing_said]
        if new:
            self._missing_said.update(new)
            log.warning("restart_budget.slot_missing", slots=new, pool=self.pool)

    def close(self) -> None:
        if isinstance(self.leases, LeaseSlots):
            self.leases.close()
        if self.events is not None:
            self.events.close()


__all__ = ["POOL_ENV", "LeaseSlots", "PoolBudget"]
