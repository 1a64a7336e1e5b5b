"""The fingerprint book and its file: when a fingerprint is taken, kept, refused and read back.

Taken by the first check of a model and weights; never again on its own
(wake-up, resume, restarts of either side leave the key as it is); taken
anew after a declared weight change (a new version, a finished weight
transfer) once it settled, or an operator's command, unless the new one
is one token repeated where the old was not. The file survives a sidecar
restart and whatever else is written there is read as hostile.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sentinel.canary.correctness import CORRECTNESS, CorrectnessEvidence, Fingerprint
from sentinel.canary.result import CanaryResult, Generation, Reason
from sentinel.canary.spec import COMPLETIONS_ENDPOINT, CanarySpec
from sentinel.evidence.metrics import MetricsSample
from sentinel.evidence.weights import Identity, model_of
from sentinel.fingerprint.book import SETTLE, FingerprintBook, bundle_section
from sentinel.fingerprint.store import MAX_FILE_BYTES, FingerprintStore, fingerprint_json

SPEC = CanarySpec(
    "correctness", CORRECTNESS, COMPLETIONS_ENDPOINT, {"prompt": ["a", "b"], "max_tokens": 4}
)
GOOD = (
    Generation((1, 2, 3, 4), (-0.1, -0.2, -0.3, -0.4), (2.0,) * 4, (9,) * 4),
    Generation((5, 6, 7, 8), (-0.5, -0.5, -0.5, -0.5), (1.0,) * 4, (9,) * 4),
)
OTHER = (Generation((3, 3, 4, 5), (-0.2,) * 4, (), ()), GOOD[1])
LOST = (Generation((0,) * 4, (-6.2,) * 4, (), ()), Generation((0,) * 4, (-6.2,) * 4, (), ()))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def result(at: float, generations: tuple[Generation, ...] = GOOD) -> CanaryResult:
    return CanaryResult("correctness", CORRECTNESS, Reason.OK, at, 0.1, generations=generations)


V1 = Identity("m", "v1")


def book(path: Path, clock: Clock, identity: Identity | None = V1) -> FingerprintBook:
    made = FingerprintBook(FingerprintStore(path), SPEC, clock=clock, wall_clock=lambda: 1.7e9)
    if identity is not None:
        made.observe_identity(identity)
    return made


def taken(b: FingerprintBook) -> Fingerprint:
    current = b.current()
    assert current is not None
    return current


def facts(b: FingerprintBook) -> CorrectnessEvidence:
    found = b.evidence()
    assert found is not None
    return found


def test_first_check_is_the_fingerprint_and_later_ones_never_replace_it(tmp_path: Path) -> None:
    clock = Clock()
    b = book(tmp_path / "f.json", clock)
    assert facts(b).fingerprint is None
    b.observe_result(result(101))
    first = taken(b)
    assert first.generations == GOOD
    b.observe_result(result(111, OTHER))
    b.observe_result(result(121, LOST))
    assert taken(b) == first
    assert facts(b).fingerprint == first


def test_nothing_is_taken_before_the_model_and_weights_are_known(tmp_path: Path) -> None:
    b = book(tmp_path / "f.json", Clock(), identity=None)
    b.observe_result(result(101))
    assert b.prints == []
    b.observe_identity(Identity("m", None))  # weights still unknown
    b.observe_result(result(102))
    assert b.prints == []


def test_a_restarted_sidecar_keeps_the_fingerprint_and_never_takes_garbage(tmp_path: Path) -> None:
    clock = Clock()
    first = book(tmp_path / "f.json", clock)
    first.observe_result(result(101))
    again = book(tmp_path / "f.json", clock)  # the sidecar restarted beside the server
    again.observe_result(result(201, LOST))
    assert again.current() == first.current()


def test_a_declared_weight_version_takes_a_new_fingerprint_once_settled(tmp_path: Path) -> None:
    clock = Clock()
    b = book(tmp_path / "f.json", clock)
    b.observe_result(result(101))
    clock.now = 150
    b.observe_identity(Identity("m", "v2"))
    assert facts(b).fingerprint is None
    b.observe_result(result(151, OTHER))  # inside the settle time: other weights in flux
    assert b.current() is None
    b.observe_result(result(150 + SETTLE + 1, OTHER))
    current = taken(b)
    assert (current.weights, current.generations) == ("v2", OTHER)
    assert "v2" in current.why
    stored = json.loads((tmp_path / "f.json").read_text())
    assert [p["weights"] for p in stored["fingerprints"]] == ["v2", "v1"]


def test_a_finished_weight_transfer_retakes_the_fingerprint(tmp_path: Path) -> None:
    clock = Clock()
    b = book(tmp_path / "f.json", clock)
    b.observe_result(result(101))
    b.observe_sample(MetricsSample(at=110, counters={"weight_operations": 3.0}))
    b.observe_sample(MetricsSample(at=112, counters={"weight_operations": 3.0}))
    assert b.pending is None  # a first sample and an unmoved counter are no update
    b.observe_sample(MetricsSample(at=120, counters={"weight_operations": 4.0}))
    assert b.pending is not None
    b.observe_result(result(120 + SETTLE + 1, OTHER))
    assert taken(b).generations == OTHER


def test_a_declared_update_that_answers_one_token_repeated_is_refused(tmp_path: Path) -> None:
    clock = Clock()
    b = book(tmp_path / "f.json", clock)
    b.observe_result(result(101))
    clock.now = 150
    b.observe_identity(Identity("m", "v2"))
    b.observe_result(result(150 + SETTLE + 1, LOST))
    kept = taken(b)
    assert (kept.weights, kept.generations) == ("v2", GOOD)
    assert facts(b).fingerprint == kept


def test_an_operator_rebaseline_takes_the_next_check(tmp_path: Path) -> None:
    clock = Clock()
    b = book(tmp_path / "f.json", clock)
    b.observe_result(result(101))
    clock.now = 130
    b.request_rebaseline("new checkpoint under the same name")
    assert facts(b).fingerprint is None
    b.observe_result(result(131, OTHER))
    assert taken(b).generations == OTHER
    assert "operator" in taken(b).why


def test_vllm_nan_counter_moving_is_noted(tmp_path: Path) -> None:
    b = book(tmp_path / "f.json", Clock())
    b.observe_sample(MetricsSample(at=10, counters={"corrupted_requests": 0.0}))
    assert b.corrupted_at is None
    b.observe_sample(MetricsSample(at=12, counters={"corrupted_requests": 2.0}))
    assert b.corrupted_at == 12
    assert facts(b).corrupted_at == 12


def test_bundle_section_has_the_fingerprint_and_the_departing_checks(tmp_path: Path) -> None:
    b = book(tmp_path / "f.json", Clock())
    b.observe_result(result(101))
    b.observe_result(result(111, LOST))
    section = bundle_section(b)
    assert section["fingerprint"]["generations"][0]["token_ids"] == [1, 2, 3, 4]
    assert section["checks"][-1]["token_ids"][0] == [0, 0, 0, 0]
    assert any("degenerate" in d for d in section["checks"][-1]["departures"])
    json.dumps(section, allow_nan=False)


def test_model_identity_names_the_weights_path() -> None:
    listed = {"data": [{"id": "a", "root": "/m/a"}, {"id": "b", "root": "b"}]}
    assert model_of(listed, None) == "a @ /m/a"
    assert model_of(listed, "b") == "b"
    assert model_of({"data": "x"}, None) is None
    assert model_of([], None) is None


# -- the file ---------------------------------------------------------------------------------

PRINT = Fingerprint("m", "v1", "req", GOOD, 1.7e9, "first")


def test_round_trip_is_atomic_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    store = FingerprintStore(tmp_path / "d" / "f.json")
    store.save([PRINT])
    assert store.load() == [PRINT]
    assert os.listdir(tmp_path / "d") == ["f.json"]


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        b"\xff\xfe garbage",
        b'{"fingerprints": [{"model": "m", "generations": NaN}]}',
        b"[]",
        b'{"fingerprints": "x"}',
        b" " * (MAX_FILE_BYTES + 10),
    ],
)
def test_an_unusable_file_is_no_fingerprint(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "f.json"
    path.write_bytes(content)
    assert FingerprintStore(path).load() == []


@pytest.mark.parametrize(
    "change",
    [
        {"model": 3},
        {"recorded_at": -5},
        {"recorded_at": True},
        {"generations": []},
        {"generations": [{"token_ids": [-1], "logprobs": [-0.1], "margins": []}]},
        {"generations": [{"token_ids": [1], "logprobs": [5.0], "margins": []}]},
        {"generations": [{"token_ids": [1, 2], "logprobs": [-0.1], "margins": []}]},
        {"generations": [{"token_ids": [True], "logprobs": [-0.1], "margins": []}]},
        {"generations": [{"token_ids": [1], "logprobs": [-0.1], "margins": ["x"]}]},
        {
            "generations": [
                {"token_ids": [1], "logprobs": [-0.1], "margins": [], "runner_ups": [-2]}
            ]
        },
        {
            "generations": [
                {"token_ids": [1], "logprobs": [-0.1], "margins": [], "candidates": [[[2]]]}
            ]
        },
        {
            "generations": [
                {"token_ids": [1], "logprobs": [-0.1], "margins": [], "candidates": [[], []]}
            ]
        },
        {"why": "x" * 10_000},
    ],
)
def test_a_malformed_entry_is_dropped_and_the_rest_kept(tmp_path: Path, change: dict) -> None:  # type: ignore[type-arg]
    path = tmp_path / "f.json"
    bad = {**fingerprint_json(PRINT), **change}
    path.write_text(json.dumps({"format": 1, "fingerprints": [bad, fingerprint_json(PRINT)]}))
    assert FingerprintStore(path).load() == [PRINT]


def test_an_unwritable_directory_keeps_the_fingerprint_in_memory(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    b = FingerprintBook(FingerprintStore(blocker / "f.json"), SPEC, clock=Clock())
    b.observe_identity(Identity("m", "v1"))
    b.observe_result(result(101))
    assert b.current() is not None


def test_candidates_round_trip_and_a_file_without_them_still_reads(tmp_path: Path) -> None:
    """A fingerprint written before every candidate was kept (one runner-up) stays usable."""
    ranked = Generation((1, 2), (-0.1, -0.2), (0.2, 2.0), (7, 8), (((7, 0.2), (6, 0.4)), ()))
    store = FingerprintStore(tmp_path / "f.json")
    store.save([Fingerprint("m", "v1", "req", (ranked,), 1.7e9, "first")])
    assert store.load()[0].generations == (ranked,)
    old = fingerprint_json(PRINT)
    for g in old["generations"]:
        del g["candidates"]
    (tmp_path / "old.json").write_text(json.dumps({"format": 1, "fingerprints": [old]}))
    assert FingerprintStore(tmp_path / "old.json").load() == [PRINT]
