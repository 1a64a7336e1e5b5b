"""The brake's memory in a Lease: its bytes, its seeding across a recreated pod, its failures.

Pure first (sentinel.fleet.brake: the name, the annotation's encoding, hostile
values, old and future times, seeding a new process's verdict on its own
monotonic clock), then the component (sentinel.fleet.brake_memory) against an
in-memory store: recalled once, written on change only, and every way the
Lease cannot be used leaving the sidecar as it is without the memory.
On a virtual clock: the verdict's times are plain seconds, the wall clock
:data:`WALL` plus them.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.config.settings import Settings
from sentinel.fleet.brake import (
    ANNOTATION,
    MAX_BYTES,
    NAME_LIMIT,
    SKEW,
    Malformed,
    Remembered,
    decode,
    encode,
    lease_name,
    remember,
    seed,
)
from sentinel.fleet.brake_memory import RETRY, BrakeMemory
from sentinel.fleet.budget import LeaseMissing, LeaseUnavailable
from sentinel.verdict import Evidence, KindEvidence, Policy, Verdict, VerdictState, evaluate
from sentinel.verdict.model import Ineffective

TEXT = CanaryKind.TEXT
WALL = 1_800_000_000.0  # the wall clock at the verdict's 0
HOUR = 3600.0
NODE = "gpu-node-7"


# -- the verdict, as a sidecar process carries it ----------------------------------


@dataclass
class Process:
    """One sidecar process: its own monotonic clock (0 at ``born``, in wall seconds) and state."""

    born: float  # wall seconds after WALL
    policy: Policy = field(default_factory=Policy)
    state: VerdictState = field(default_factory=VerdictState)

    def at(self, now: float, ev: Evidence) -> Verdict:
        self.state, verdict = evaluate(self.state, ev, self.policy, now)
        return verdict

    def wall(self, now: float) -> float:
        return WALL + self.born + now


def server(
    epoch: int, started: float, *, down_since: float | None = None, engine: int = 1
) -> Evidence:
    """A server whose text canary passed; with ``down_since``, its engine ``engine`` is down."""
    ok = CanaryResult("text-canary", TEXT, Reason.OK, started=started + 1, duration=0.3)
    return Evidence(
        epoch=epoch,
        epoch_started=started,
        kinds={TEXT: KindEvidence(TEXT, results=(ok,))},
        progress_available=True,
        engine_down_since=down_since,
        down_engines=(engine,) if down_since is not None else (),
        sections={"node": NODE},
    )


def hang(process: Process, epoch: int, started: float, engine: int = 1) -> Verdict:
    """Server ``epoch`` starts, serves, then its engine goes down (dead after the grace)."""
    assert process.at(started + 2, server(epoch, started)).startup.ok
    down = server(epoch, started, down_since=started + 10, engine=engine)
    return process.at(started + 20, down)


def recreated(process: Process, asked_at: float, now: float, born: float) -> Process:
    """The pod recreated: the Lease written by ``process``, read by a new one born at ``born``."""
    text = encode(remember(process.state, asked_at, now, process.wall(now), HOUR))
    successor = Process(born)
    memory = decode(text, successor.wall(0.0), HOUR)
    successor.state = seed(successor.state, memory, successor.wall(0.0), 0.0)
    return successor


def test_a_fault_that_survives_each_group_recreation_brakes_with_the_memory() -> None:
    """Each restart recreates the pod: only the Lease carries the brake's count."""
    process, forgetful = Process(0.0), Process(0.0)
    for life in range(3):
        red = hang(process, 0, 5.0)
        assert not red.liveness.ok, f"restart {life + 1} is asked for"
        assert not hang(forgetful, 0, 5.0).liveness.ok
        process = recreated(process, 25.0, 25.0, process.born + 600.0)
        forgetful = Process(forgetful.born + 600.0)
    assert process.state.causes == ("dead engine 1",) * 3
    fourth = hang(process, 0, 5.0)
    assert fourth.brake_engaged
    assert fourth.liveness.ok  # no fourth restart
    assert fourth.ineffective == Ineffective("dead engine 1", 3, NODE)
    assert not fourth.readiness.ok
    assert "a restart does not fix this: dead engine 1" in fourth.readiness.reason
    # Without the memory each new sidecar asks for a restart again: the endless loop.
    assert not hang(forgetful, 0, 5.0).liveness.ok


def test_a_different_cause_after_a_recreation_resets_the_cause_count() -> None:
    process = Process(0.0)
    for engine in (1, 1, 1):
        assert not hang(process, 0, 5.0, engine).liveness.ok
        process = recreated(process, 25.0, 25.0, process.born + 600.0)
    other = hang(process, 0, 5.0, engine=0)
    assert other.brake_engaged  # three restarts this hour: the count alone brakes
    assert other.ineffective is None  # none of them was for engine 0
    assert "does not fix" not in other.readiness.reason


def test_a_sidecar_that_sees_the_restart_remembers_it_once() -> None:
    """The asked-for restart is written at the red flip and replaced when the server is back."""
    process = Process(0.0)
    hang(process, 0, 5.0)
    asked = remember(process.state, 25.0, 30.0, process.wall(30.0), HOUR)
    assert [cause for _, cause in asked.restarts] == ["dead engine 1"]
    assert asked.restarts[0][0] == WALL + 25.0
    process.at(100.0, server(1, 90.0))  # the restarted server: a new epoch, counted
    counted = remember(process.state, 25.0, 100.0, process.wall(100.0), HOUR)
    assert [(at - WALL, cause) for at, cause in counted.restarts] == [(100.0, "dead engine 1")]


def test_restarts_older_than_the_window_are_dropped_on_both_sides() -> None:
    memory = Remembered(((WALL - HOUR - 1, "engine"), (WALL - 10, "engine")), "engine")
    assert decode(encode(memory), WALL, HOUR).restarts == ((WALL - 10, "engine"),)
    assert decode(encode(memory), WALL + HOUR, HOUR) == Remembered()  # ineffective goes with them
    state = VerdictState(restarts=(-HOUR - 5.0, -5.0), causes=("a", "b"))
    assert remember(state, None, 0.0, WALL, HOUR).restarts == ((WALL - 5.0, "b"),)


def test_times_from_the_future_are_dropped_beyond_the_skew_and_clamped_within_it() -> None:
    text = json.dumps(
        {
            "v": 1,
            "restarts": [
                {"at": "2027-01-15T08:00:30Z", "cause": "engine"},  # WALL + 30: skew
                {"at": "2027-01-15T09:00:00Z", "cause": "engine"},  # an hour ahead
            ],
        }
    )
    memory = decode(text, WALL, HOUR)
    assert memory.restarts == ((WALL, "engine"),)
    assert memory.future == 1
    assert SKEW < HOUR


def test_seeding_converts_wall_time_to_the_new_process_clock() -> None:
    memory = Remembered(((WALL - 100.0, "engine"), (WALL - 40.0, "dead rank 2")))
    state = seed(VerdictState(), memory, WALL, 7.0)
    assert state.restarts == (-93.0, -33.0)
    assert state.causes == ("engine", "dead rank 2")
    assert seed(VerdictState(), Remembered(), WALL, 7.0) == VerdictState()


def test_the_encoding_is_compact_json_that_round_trips() -> None:
    memory = Remembered(((WALL - 60.0, "partial engine 1"),), "partial engine 1")
    text = encode(memory)
    assert json.loads(text) == {
        "v": 1,
        "restarts": [{"at": "2027-01-15T07:59:00Z", "cause": "partial engine 1"}],
        "ineffective": "partial engine 1",
    }
    assert decode(text, WALL, HOUR) == memory
    assert decode(None, WALL, HOUR) == Remembered()


HOSTILE = [
    ("not json", "{restarts"),
    ("a list", "[]"),
    ("another version", '{"v": 2, "restarts": []}'),
    ("unknown key", '{"v": 1, "restarts": [], "x": 1}'),
    ("restarts not a list", '{"v": 1, "restarts": {}}'),
    ("entry not an object", '{"v": 1, "restarts": [1]}'),
    (
        "entry with extra key",
        '{"v": 1, "restarts": [{"at": "2027-01-15T08:00:00Z", "cause": "e", "n": 1}]}',
    ),
    ("time not a string", '{"v": 1, "restarts": [{"at": 1800000000, "cause": "e"}]}'),
    ("time not a time", '{"v": 1, "restarts": [{"at": "yesterday", "cause": "e"}]}'),
    ("time without zone", '{"v": 1, "restarts": [{"at": "2027-01-15T08:00:00", "cause": "e"}]}'),
    (
        "cause not printable",
        '{"v": 1, "restarts": [{"at": "2027-01-15T08:00:00Z", "cause": "e\\u001b[2J"}]}',
    ),
    (
        "cause too long",
        json.dumps({"v": 1, "restarts": [{"at": "2027-01-15T08:00:00Z", "cause": "e" * 201}]}),
    ),
    ("ineffective not a string", '{"v": 1, "restarts": [], "ineffective": 3}'),
    ("too many entries", json.dumps({"v": 1, "restarts": [{"at": "x", "cause": "e"}] * 1001})),
    ("too long", " " * (MAX_BYTES + 1)),
    ("nested too deep", "[" * 100_000),
]


@pytest.mark.parametrize("text", [h[1] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_hostile_annotations_are_refused_whole(text: str) -> None:
    with pytest.raises(Malformed):
        decode(text, WALL, HOUR)


def test_lease_names_are_valid_object_names() -> None:
    assert lease_name("vllm-0") == "sentinel-brake-vllm-0"
    long = lease_name("a" * 250)
    assert len(long) <= NAME_LIMIT
    assert long != lease_name("a" * 249 + "b")  # hashed, not merely cut
    odd = lease_name("Vllm_0")
    assert odd.startswith("sentinel-brake-vllm-0-")
    assert odd.replace("-", "").replace(".", "").isalnum()
    assert odd == odd.lower()
    assert lease_name("___").startswith("sentinel-brake-")
    assert len(lease_name("___")) == 25


# -- the component against an in-memory store --------------------------------------


@dataclass
class Store:
    """The Lease's annotation, as :class:`~sentinel.fleet.brake_memory.BrakeLeases` keeps it."""

    value: str | None = None
    fail: Exception | None = None
    block: threading.Event | None = None  # recall waits on it (an API that does not answer)
    writes: list[str] = field(default_factory=list)
    closed: bool = False

    def recall(self, name: str) -> str | None:
        assert name == "sentinel-brake-vllm-0"
        if self.block is not None:
            self.block.wait(5)
        if self.fail is not None:
            raise self.fail
        return self.value

    def store(self, name: str, value: str, holder: str, now: float) -> object:
        assert holder == "vllm-0"
        if self.fail is not None:
            raise self.fail
        self.writes.append(value)
        self.value = value
        return None

    def close(self) -> None:
        self.closed = True


class Wall:
    def __init__(self) -> None:
        self.now = WALL

    def __call__(self) -> float:
        return self.now


def memory(store: Store, wall: Wall | None = None, deadline: float = 1.0) -> BrakeMemory:
    return BrakeMemory(
        window=HOUR, pod="vllm-0", leases=store, wall=wall or Wall(), recall_deadline=deadline
    )


def status(brake: BrakeMemory) -> dict[str, object]:
    fragment = brake.status(brake.section(0.0), 0.0)
    assert fragment is not None
    return dict(fragment)


async def test_recalled_once_seeded_and_written_only_when_the_memory_changes() -> None:
    three = Remembered(tuple((WALL - 300.0 * i, "engine") for i in (3, 2, 1)))
    store, wall = Store(encode(three)), Wall()
    brake = memory(store, wall)
    state = await brake.seed(VerdictState(), 50.0)
    assert state.restarts == (-850.0, -550.0, -250.0)
    assert await brake.seed(VerdictState(), 51.0) == VerdictState()  # once only
    brake.observe(state, 50.0)
    await brake.step()
    assert store.writes == []  # nothing new to write
    asked = replace(state, epoch=0, red_in_epoch=True, red_cause="engine")
    brake.observe(asked, 60.0)
    wall.now += 10.0
    await brake.step()
    await brake.step()
    assert len(store.writes) == 1
    written = decode(store.writes[0], wall.now, HOUR)
    assert [cause for _, cause in written.restarts] == ["engine"] * 4
    assert written.restarts[-1][0] == WALL + 10.0  # when liveness failed, on the wall clock
    shown = status(brake)
    assert shown["state"] == "kept"
    assert shown["recalled_restarts"] == [
        {"at": "2027-01-15T07:45:00Z", "cause": "engine"},
        {"at": "2027-01-15T07:50:00Z", "cause": "engine"},
        {"at": "2027-01-15T07:55:00Z", "cause": "engine"},
    ]


@pytest.mark.parametrize(
    ("fail", "value", "says"),
    [
        (
            LeaseUnavailable("API answered 403 Forbidden for Lease sentinel-brake-vllm-0"),
            None,
            "403",
        ),
        (LeaseUnavailable("API answered 503 Service Unavailable"), None, "503"),
        (LeaseMissing("sentinel-brake-vllm-0"), None, "no Lease sentinel-brake-vllm-0"),
        (None, '{"v": 1, "restarts": "all of them"}', "malformed"),
        (Malformed("the annotation is not a string"), None, "malformed"),
    ],
)
async def test_an_unusable_lease_leaves_the_brake_as_without_memory(
    fail: Exception | None, value: str | None, says: str
) -> None:
    store = Store(value, fail)
    brake = memory(store)
    before = VerdictState()
    assert await brake.seed(before, 0.0) is before
    shown = status(brake)
    assert shown["state"] == "unavailable"
    assert says in str(shown["why"])
    brake.observe(VerdictState(restarts=(1.0,), causes=("engine",)), 2.0)
    store.fail = None
    await brake.step()
    assert store.writes == []  # what could not be read is never overwritten


async def test_an_api_that_does_not_answer_costs_the_first_verdict_the_deadline_only() -> None:
    gate = threading.Event()
    store = Store(encode(Remembered(((WALL - 5.0, "engine"),))), block=gate)
    brake = memory(store, deadline=0.05)
    try:
        async with asyncio.timeout(2.0):
            state = await brake.seed(VerdictState(), 0.0)
    finally:
        gate.set()
    assert state == VerdictState()
    assert "no answer within 0.05s" in str(status(brake)["why"])


async def test_a_failed_write_is_said_and_tried_again_after_the_retry() -> None:
    store, wall = Store(), Wall()
    brake = memory(store, wall)
    state = await brake.seed(VerdictState(), 0.0)
    brake.observe(VerdictState(restarts=(1.0,), causes=("engine",)), 2.0)
    store.fail = LeaseUnavailable("API answered 503 Service Unavailable")
    await brake.step()
    assert status(brake)["state"] == "unavailable"
    assert "writing Lease sentinel-brake-vllm-0 failed" in str(status(brake)["why"])
    store.fail = None
    await brake.step()
    assert store.writes == []  # not before the retry interval
    wall.now += RETRY
    await brake.step()
    assert len(store.writes) == 1
    assert status(brake)["state"] == "kept"
    assert state == VerdictState()


def test_on_by_default_only_in_a_groups_pod_and_never_when_off(tmp_path: Path) -> None:
    deployment = {"POD_NAME": "vllm-7d9f-x2", "POD_NAMESPACE": "inference"}
    assert not BrakeMemory.from_settings(Settings(), deployment, account=tmp_path).enabled
    pod = {**deployment, "POD_NAME": "vllm-0", "LWS_GROUP_SIZE": "2"}  # as LWS writes it
    outside = BrakeMemory.from_settings(Settings(), {"LWS_GROUP_SIZE": "2"}, account=tmp_path)
    assert not outside.enabled
    assert outside.steps() == []
    assert outside.status(outside.section(0.0), 0.0) is None
    off = BrakeMemory.from_settings(Settings(brake_memory="off"), pod, account=tmp_path)
    assert not off.enabled
    asked = BrakeMemory.from_settings(Settings(brake_memory="on"), {}, account=tmp_path)
    assert "not in a pod" in str(status(asked)["why"])
    no_token = BrakeMemory.from_settings(Settings(), pod, account=tmp_path)
    assert no_token.enabled
    assert "no in-cluster credentials" in str(status(no_token)["why"])
    assert status(no_token)["lease"] == "sentinel-brake-vllm-0"
    assert ANNOTATION == "sentinel.io/brake-memory"


# -- the LeaderWorkerSet example's Lease and Role ------------------------------------

EXAMPLE = Path(__file__).resolve().parents[3] / "manifests" / "examples" / "leaderworkerset"


def test_the_example_creates_each_leaders_lease_and_grants_only_it() -> None:
    plain = yaml.safe_load_all((EXAMPLE / "plain.yaml").read_text())
    (lws,) = (d for d in plain if d and d["kind"] == "LeaderWorkerSet")
    docs = [d for d in yaml.safe_load_all((EXAMPLE / "brake-memory.yaml").read_text()) if d]
    for doc in docs:
        kubernetes_validate.validate(doc, "1.30", strict=True)
    leaders = [f"{lws['metadata']['name']}-{i}" for i in range(lws["spec"]["replicas"])]
    names = [lease_name(pod) for pod in leaders]
    kinds = {d["kind"]: d for d in docs}
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Lease"] == names
    (rule,) = kinds["Role"]["rules"]
    assert rule["resourceNames"] == names
    assert sorted(rule["verbs"]) == ["get", "update"]  # no create, no list: these names only
    assert kinds["RoleBinding"]["roleRef"]["name"] == kinds["Role"]["metadata"]["name"]
    assert kinds["RoleBinding"]["subjects"][0]["name"] == "sentinel"
