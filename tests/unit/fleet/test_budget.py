"""The restart budget's slot rules on a virtual clock: free, held, expired, races, keeping.

The store is an in-memory stand-in for the API server's Lease semantics
(resourceVersion bumped per write, a stale one refused), the one seam the
rules use; the real client against a wire-level fake is tests/loopback/test_restart_budget.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pytest

from sentinel.fleet.budget import (
    Lease,
    LeaseConflict,
    LeaseMissing,
    LeaseUnavailable,
    SlotKeeper,
    Step,
    Wish,
    claimed,
    exhausted,
    lease_seconds,
    release_slot,
    renew_slot,
    slot_count,
    slot_names,
    take_slot,
)

ME = "vllm-a"
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
WINDOW = 300.0


@dataclass
class Store:
    """Leases by name; ``before_write`` runs once before the next write (a rival's race)."""

    leases: dict[str, Lease] = field(default_factory=dict)
    version: int = 10
    writes: list[Lease] = field(default_factory=list)
    before_write: Callable[[], object] | None = None

    def put(self, lease: Lease) -> Lease:
        self.version += 1
        stored = replace(lease, version=str(self.version))
        self.leases[lease.name] = stored
        return stored

    def read(self, name: str) -> Lease:
        if name not in self.leases:
            raise LeaseMissing(name)
        return self.leases[name]

    def write(self, lease: Lease) -> Lease:
        if self.before_write is not None:
            race, self.before_write = self.before_write, None
            race()
        if self.leases[lease.name].version != lease.version:
            raise LeaseConflict(lease.name)
        self.writes.append(lease)
        return self.put(lease)


def store(*leases: Lease) -> Store:
    s = Store()
    for lease in leases:
        s.put(lease)
    return s


def slot(i: int, holder: str | None = None, renewed: float | None = None) -> Lease:
    return Lease(
        name=f"llama-restart-{i}",
        version="",
        holder=holder,
        acquired=renewed,
        renewed=renewed,
        duration=None if holder is None else 300,
    )


NAMES = slot_names("llama", 2)


def clock() -> float:
    return NOW


def test_slot_names_follow_the_manifests() -> None:
    assert NAMES == ("llama-restart-0", "llama-restart-1")


@pytest.mark.parametrize(
    ("slots", "share", "pool_size", "count"),
    [
        (3, None, None, 3),
        (None, None, None, 1),
        (None, 0.25, 10, 2),
        (None, 0.25, 3, 1),  # never a budget of none
        (None, 0.5, 4, 2),
        (None, 0.29, 100, 29),  # 0.29 * 100 is 28.999... in binary
        (None, 1.0, 7, 7),
    ],
)
def test_share_of_the_pool_rounds_down_and_is_at_least_one(
    slots: int | None, share: float | None, pool_size: int | None, count: int
) -> None:
    assert slot_count(slots, share, pool_size) == count


def test_a_free_slot_is_taken_with_the_version_read() -> None:
    leases = store(slot(0), slot(1))
    read_version = leases.leases["llama-restart-0"].version
    attempt = take_slot(leases, NAMES, ME, clock, WINDOW)
    assert attempt.lease is not None
    assert attempt.lease.name == "llama-restart-0"
    assert leases.writes[0].version == read_version
    taken = leases.leases["llama-restart-0"]
    assert (taken.holder, taken.acquired, taken.renewed, taken.duration) == (ME, NOW, NOW, 300)
    assert taken.expires == NOW + 300
    assert leases.leases["llama-restart-1"].holder is None


def test_a_held_slot_is_passed_over_for_the_next() -> None:
    leases = store(slot(0, "vllm-b", NOW - 10), slot(1))
    attempt = take_slot(leases, NAMES, ME, clock, WINDOW)
    assert attempt.lease is not None
    assert attempt.lease.name == "llama-restart-1"
    assert leases.leases["llama-restart-0"].holder == "vllm-b"


def test_every_slot_held_names_the_holders_and_until_when() -> None:
    leases = store(slot(0, "vllm-b", NOW - 10), slot(1, "vllm-c", NOW - 100))
    attempt = take_slot(leases, NAMES, ME, clock, WINDOW)
    assert attempt.lease is None
    assert leases.writes == []
    assert exhausted("llama", 2, attempt.held) == (
        "restart budget of pool llama exhausted: 2 of 2 slots held by "
        "vllm-b until 2027-01-15T08:04:50Z, vllm-c until 2027-01-15T08:03:20Z"
    )


def test_an_expired_slot_is_free_as_the_client_judges_it() -> None:
    lapsed = slot(0, "vllm-b", NOW - 300)  # renewed + 300 s == now: lapsed
    leases = store(lapsed)
    attempt = take_slot(leases, NAMES[:1], ME, clock, WINDOW)
    assert attempt.lease is not None
    assert attempt.lease.holder == ME
    assert attempt.lease.transitions == 1
    still = store(slot(0, "vllm-b", NOW - 299))
    assert take_slot(still, NAMES[:1], ME, clock, WINDOW).lease is None


def test_a_slot_this_pod_holds_is_taken_again_after_a_sidecar_restart() -> None:
    leases = store(slot(0, ME, NOW - 20))
    attempt = take_slot(leases, NAMES[:1], ME, clock, WINDOW)
    assert attempt.lease is not None
    assert attempt.lease.acquired == NOW - 20  # the claim continues
    assert attempt.lease.transitions == 0


def test_a_lost_race_is_read_again_and_the_next_slot_tried() -> None:
    leases = store(slot(0), slot(1))

    def rival_takes_slot_0() -> None:
        leases.put(claimed(leases.leases["llama-restart-0"], "vllm-b", NOW, WINDOW))

    leases.before_write = rival_takes_slot_0
    attempt = take_slot(leases, NAMES, ME, clock, WINDOW)
    assert attempt.lease is not None
    assert attempt.lease.name == "llama-restart-1"
    assert leases.leases["llama-restart-0"].holder == "vllm-b"


def test_a_lost_race_for_the_only_slot_means_held() -> None:
    leases = store(slot(0))
    leases.before_write = lambda: leases.put(
        claimed(leases.leases["llama-restart-0"], "vllm-b", NOW, WINDOW)
    )
    attempt = take_slot(leases, NAMES[:1], ME, clock, WINDOW)
    assert attempt.lease is None
    assert [h.holder for h in attempt.held] == ["vllm-b"]


def test_a_race_lost_to_a_write_that_left_the_slot_free_is_retried() -> None:
    leases = store(slot(0))
    leases.before_write = lambda: leases.put(leases.leases["llama-restart-0"])  # version bump only
    attempt = take_slot(leases, NAMES[:1], ME, clock, WINDOW)
    assert attempt.lease is not None
    assert attempt.lease.holder == ME


def test_missing_slots_are_skipped_and_none_at_all_is_unavailable() -> None:
    leases = store(slot(1))
    attempt = take_slot(leases, NAMES, ME, clock, WINDOW)
    assert attempt.lease is not None
    assert attempt.lease.name == "llama-restart-1"
    assert attempt.missing == ("llama-restart-0",)
    with pytest.raises(LeaseUnavailable, match="no restart slot Lease exists"):
        take_slot(store(), NAMES, ME, clock, WINDOW)


def test_renew_moves_the_expiry_and_notices_a_lost_claim() -> None:
    leases = store(slot(0))
    taken = take_slot(leases, NAMES[:1], ME, clock, WINDOW).lease
    assert taken is not None
    renewed = renew_slot(leases, taken, ME, NOW + 100, WINDOW)
    assert renewed is not None
    assert (renewed.acquired, renewed.renewed, renewed.expires) == (NOW, NOW + 100, NOW + 400)
    # The claim lapsed and another pod took it: the renewal gives up.
    leases.put(claimed(replace(renewed, holder=None), "vllm-b", NOW + 500, WINDOW))
    assert renew_slot(leases, renewed, ME, NOW + 501, WINDOW) is None
    assert leases.leases["llama-restart-0"].holder == "vllm-b"


def test_release_clears_the_holder_unless_another_pod_holds_it() -> None:
    leases = store(slot(0))
    taken = take_slot(leases, NAMES[:1], ME, clock, WINDOW).lease
    assert taken is not None
    release_slot(leases, taken, ME)
    assert leases.leases["llama-restart-0"].holder is None
    assert leases.leases["llama-restart-0"].expires is None
    other = store(slot(0, "vllm-b", NOW))
    release_slot(other, replace(slot(0, ME, NOW - 400), version="1"), ME)
    assert other.leases["llama-restart-0"].holder == "vllm-b"


def test_lease_duration_is_the_window_in_whole_seconds() -> None:
    assert lease_seconds(2.5) == 3
    assert lease_seconds(0.2) == 1
    assert claimed(slot(0), ME, NOW, 2.5).duration == 3


# -- the keeper: one pod's slot over a restart ---------------------------------------


def wish(wanted: bool, failing: bool = False, epoch: int = 0, started: bool = True) -> Wish:
    return Wish(wanted=wanted, failing=failing, epoch=epoch, started=started)


def keeper() -> SlotKeeper:
    return SlotKeeper(window=WINDOW, retry_interval=5.0)


def held_lease(renewed: float) -> Lease:
    return replace(slot(0, ME, renewed), version="7")


def test_nothing_is_asked_until_a_restart_is_wanted_and_retries_wait() -> None:
    k = keeper()
    assert k.plan(wish(False), NOW) is Step.WAIT
    assert k.plan(wish(True), NOW) is Step.TAKE
    k = k.tried(NOW)
    assert k.plan(wish(True), NOW + 4.9) is Step.WAIT
    assert k.plan(wish(True), NOW + 5.0) is Step.TAKE


def test_the_holder_renews_every_third_of_the_window_while_the_restart_is_pending() -> None:
    k = keeper().took(held_lease(NOW), epoch=3)
    failing = wish(True, failing=True, epoch=3)
    k = k.observe(failing, NOW + 1)
    assert k.failed
    assert k.plan(failing, NOW + 99) is Step.WAIT
    assert k.plan(failing, NOW + 100) is Step.RENEW


def test_after_the_restart_the_slot_is_renewed_until_startup_then_left_to_expire() -> None:
    k = keeper().took(held_lease(NOW), epoch=3).observe(wish(True, True, 3), NOW + 1)
    loading = wish(False, epoch=4, started=False)
    k = k.observe(loading, NOW + 30)
    assert k.back_at == NOW + 30
    assert k.plan(loading, NOW + 100) is Step.RENEW
    assert k.plan(wish(False, epoch=4, started=True), NOW + 130) is Step.LEAVE


def test_a_server_that_never_passes_startup_frees_the_slot_a_window_after_it_came_back() -> None:
    k = keeper().took(held_lease(NOW), epoch=3).observe(wish(True, True, 3), NOW + 1)
    loading = wish(False, epoch=4, started=False)
    k = k.observe(loading, NOW + 30)
    k = k.renewed(held_lease(NOW + 300))
    assert k.plan(loading, NOW + 329) is Step.WAIT
    assert k.plan(loading, NOW + 330) is Step.LEAVE


def test_a_slot_whose_restart_never_happened_is_released() -> None:
    k = keeper().took(held_lease(NOW), epoch=3)
    assert k.plan(wish(True, epoch=3), NOW + 1) is Step.WAIT
    assert k.plan(wish(False, epoch=3), NOW + 1) is Step.RELEASE


def test_a_hang_that_cleared_after_liveness_failed_leaves_the_slot_to_count() -> None:
    k = keeper().took(held_lease(NOW), epoch=3).observe(wish(True, True, 3), NOW + 1)
    assert k.plan(wish(False, epoch=3), NOW + 2) is Step.LEAVE
    assert k.dropped().plan(wish(False, epoch=3), NOW + 3) is Step.WAIT
