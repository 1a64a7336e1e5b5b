"""The restart budget in the verdict and in this pod's component, on virtual clocks.

The verdict applies the budget's gate as evidence (pure tables); the
component :class:`~sentinel.fleet.lease.PoolBudget` turns wishes into slot
steps through an in-memory Lease store and says "alone" without the API.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import structlog

from sentinel.config.settings import RestartBudget
from sentinel.fleet.budget import Lease, LeaseUnavailable, Mode, Step, Wish
from sentinel.fleet.lease import PoolBudget
from sentinel.telemetry.events import PodIdentity
from sentinel.verdict import Evidence, Policy, RestartGate
from tests.unit.fleet.test_budget import NOW, Store, slot, store
from tests.unit.verdict.test_verdict import Sidecar, evidence, ok, text, timeout

HELD = RestartGate(False, "restart budget of pool llama exhausted: 1 of 1 slots held by vllm-b")


OPEN = RestartGate()


def hung(gate: RestartGate = OPEN) -> Evidence:
    """A text canary sent at 100 s unanswered with progress flat: an engine hang at 115 s."""
    return replace(evidence(text(ok(1), timeout(100)), progress_at=90), restart_gate=gate)


def test_a_held_restart_keeps_liveness_green_and_readiness_red_naming_the_budget() -> None:
    verdict = Sidecar().at(115.0, hung(HELD))
    assert verdict.liveness.ok
    assert verdict.liveness.reason.startswith(HELD.reason)
    assert not verdict.readiness.ok
    assert verdict.readiness.reason.startswith(HELD.reason + ": ")
    assert "engine hang" in verdict.readiness.reason
    assert verdict.budget_held
    assert verdict.restart_wanted


def test_when_the_slot_is_taken_liveness_fails_as_usual() -> None:
    sidecar = Sidecar()
    assert sidecar.at(115.0, hung(HELD)).liveness.ok
    taken = sidecar.at(116.0, hung())
    assert not taken.liveness.ok
    assert not taken.budget_held
    assert taken.restart_wanted
    assert sidecar.state.red_in_epoch  # this episode counts for the brake


def test_a_held_episode_is_not_counted_as_a_restart_by_the_brake() -> None:
    sidecar = Sidecar()
    sidecar.at(115.0, hung(HELD))
    assert not sidecar.state.red_in_epoch


def test_observe_only_wants_no_restart_and_ignores_the_gate() -> None:
    verdict = Sidecar(Policy(enforce=False)).at(115.0, hung(HELD))
    assert not verdict.restart_wanted
    assert not verdict.budget_held
    assert "would restart" in verdict.liveness.reason


def test_no_hang_no_wish_whatever_the_gate() -> None:
    verdict = Sidecar().at(50.0, evidence(text(ok(1)), progress_at=40))
    assert not verdict.restart_wanted
    assert not verdict.budget_held


# -- the component ---------------------------------------------------------------


@dataclass
class Clock:
    now: float = NOW

    def __call__(self) -> float:
        return self.now


class Unreachable(Store):
    def read(self, name: str) -> Lease:
        raise LeaseUnavailable("ConnectTimeoutError: API server unreachable")


CONFIG = RestartBudget(enabled=True, pool="llama", slots=1, window=300, retry_interval=5)


def budget(leases: Store, clock: Clock) -> PoolBudget:
    pod = PodIdentity("vllm-a", "inference")
    return PoolBudget(CONFIG, pool="llama", pod=pod, leases=leases, wall=clock)


WANTED = Wish(wanted=True, failing=False, epoch=0, started=True)


async def test_held_by_another_pod_the_gate_closes_naming_it() -> None:
    clock = Clock()
    pool = budget(store(slot(0, "vllm-b", NOW - 10)), clock)
    assert pool.gate().open is False  # coordinating: no restart before a slot is asked
    pool.observe(WANTED)
    assert await pool.step() is Step.TAKE
    gate = pool.gate()
    assert not gate.open
    assert gate.reason == (
        "restart budget of pool llama exhausted: 1 of 1 slots held by "
        "vllm-b until 2027-01-15T08:04:50Z"
    )
    assert pool.status()["held_by_others"] == [
        {"slot": "llama-restart-0", "holder": "vllm-b", "until": "2027-01-15T08:04:50Z"}
    ]
    assert pool.status()["held_by_budget"] is True
    clock.now = NOW + 291  # the holder's claim lapsed
    assert await pool.step() is Step.TAKE
    assert pool.gate().open
    assert pool.status()["holding"] == {"slot": "llama-restart-0", "until": "2027-01-15T08:09:51Z"}


async def test_without_the_api_it_acts_alone_and_says_so_once() -> None:
    clock = Clock()
    pool = budget(Unreachable(), clock)
    pool.observe(WANTED)
    with structlog.testing.capture_logs() as logs:
        await pool.step()
        clock.now += 5
        await pool.step()
    assert pool.gate().open
    assert pool.mode is Mode.ALONE
    assert pool.status()["mode"] == "alone"
    assert "unreachable" in pool.status()["why"]
    assert [e["event"] for e in logs] == ["restart_budget.alone"]


async def test_no_wish_no_lease_traffic() -> None:
    leases = store(slot(0))
    pool = budget(leases, Clock())
    pool.observe(Wish(wanted=False, failing=False, epoch=0, started=True))
    assert await pool.step() is Step.WAIT
    assert leases.writes == []


def test_outside_a_pod_the_budget_is_alone_from_the_start() -> None:
    pool = PoolBudget.from_settings(CONFIG, {})
    assert pool.mode is Mode.ALONE
    assert pool.gate().open
    assert "not in a pod" in str(pool.status()["why"])
    off = PoolBudget.from_settings(RestartBudget(), {})
    assert off.mode is Mode.OFF
    assert not off.enabled
