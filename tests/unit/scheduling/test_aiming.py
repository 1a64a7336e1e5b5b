"""Aiming canaries at data-parallel engines, on its own: labels to ranks, turns, refusals."""

from __future__ import annotations

import pytest

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.evidence.metrics import MetricsSample
from sentinel.record.ledger import Ledger
from sentinel.scheduling.aiming import MAX_ENGINE_INDEX, Aiming, rank
from sentinel.verdict import Action

TEXT = CanaryKind("text")


def _ledger(*labels: str) -> Ledger:
    ledger = Ledger([(TEXT, Action.RESTART, None)], 0.0)
    engines = {label: {"generation_tokens": 1.0} for label in labels}
    ledger.progress.observe(
        MetricsSample(0.0, counters={"generation_tokens": 1.0}, engines=engines)
    )
    return ledger


def _answer(reason: Reason, status: int | None = None) -> CanaryResult:
    return CanaryResult("text", TEXT, reason, 0.0, 0.1, http_status=status, engine=1)


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("0", 0),
        ("7", 7),
        (str(MAX_ENGINE_INDEX), MAX_ENGINE_INDEX),
        (str(MAX_ENGINE_INDEX + 1), None),
        ("123456", None),
        ("-1", None),
        ("gpu0", None),
        ("", None),
        ("\u0663", None),  # an Arabic-Indic three: a digit, not ASCII
    ],
)
def test_only_small_ascii_integers_are_ranks(label: str, expected: int | None) -> None:
    assert rank(label) == expected


@pytest.mark.parametrize(
    ("labels", "engines"),
    [
        ((), ()),
        (("0",), ()),  # one engine: never aimed
        (("1", "0", "2"), (0, 1, 2)),
        (("0", "gpu1"), ()),  # a label that is no rank: never aimed
    ],
)
def test_aimed_only_at_two_or_more_engines_that_are_all_ranks(
    labels: tuple[str, ...], engines: tuple[int, ...]
) -> None:
    assert Aiming(_ledger(*labels)).engines() == engines


def test_each_loop_takes_the_engines_in_turn_on_its_own() -> None:
    aim = Aiming(_ledger("0", "1", "2"))
    engines = aim.engines()
    turns = [aim.in_turn("structured", engines) for _ in range(4)]
    assert turns == [0, 1, 2, 0]
    assert aim.in_turn("multimodal", engines) == 0
    assert aim.in_turn("structured", (0, 2)) == 2  # after 0, whatever vanished meanwhile


def test_a_refused_rank_goes_unaimed_until_the_server_restarts() -> None:
    ledger = _ledger("0", "1")
    aim = Aiming(ledger)
    assert aim.targets(aim.engines()) == (0, 1)
    assert not aim.refused(1, _answer(Reason.HTTP_STATUS, 503))
    assert not aim.refused(1, _answer(Reason.TIMEOUT))
    assert aim.targets((0, 1)) == (0, 1)

    assert aim.refused(1, _answer(Reason.HTTP_STATUS, 400))
    assert aim.targets((0, 1)) == (0, None)
    assert aim.refused(0, _answer(Reason.HTTP_STATUS, 400))
    assert aim.targets((0, 1)) == (None,)  # one unaimed canary per step is enough

    ledger.new_epoch("API server restarted", 1.0)
    ledger.progress.observe(
        MetricsSample(2.0, counters={}, engines={"0": {"completions": 1.0}, "1": {}})
    )
    assert aim.engines() == (0, 1)
    assert aim.targets((0, 1)) == (0, 1)
