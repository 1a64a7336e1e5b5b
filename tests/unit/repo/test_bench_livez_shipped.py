"""The /livez-as-shipped bench's bounds: the figures it prints and when it exits 1.

The bench itself runs for minutes (``make bench-livez-shipped``); what decides
its exit status is a pure function of the client's records, tested here both
ways so a bound that can never fail (or never pass) is caught without a run.
"""

from __future__ import annotations

import pytest

from tests.bench.bench_livez_shipped import judge, quantiles, summarise


def records(latencies: list[float], status: int = 200) -> list[list[float]]:
    """Client records (scheduled, send lag, latency, status), 5 ms apart."""
    return [[100.0 + i * 0.005, 0.0001, lat, status] for i, lat in enumerate(latencies)]


def failed(latencies: list[float], status: int = 200) -> list[str]:
    return [c.name for c in judge(summarise(records(latencies, status))) if not c.passed]


def test_fast_answers_pass_every_bound() -> None:
    assert failed([0.002] * 2000) == []


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        # 0.5 % of answers at 150 ms: the p99.9 is over 100 ms, nothing over 1 s.
        ([0.150] * 10, ["/livez (n=2000)"]),
        # One answer of 1.2 s in 2000 sits above the p99.9 but is an answer over 1 s.
        ([1.2], ["answers over 1 s"]),
        ([3.5], ["answers over 1 s", "answers over 3 s (the probe's timeout)"]),
    ],
)
def test_a_slow_tail_fails_its_bound(tail: list[float], expected: list[str]) -> None:
    assert failed([0.002] * (2000 - len(tail)) + tail) == expected


def test_an_answer_other_than_200_fails() -> None:
    assert failed([0.002] * 100 + [0.001], status=0) == ["no answer, or not 200"]
    assert summarise(records([0.002], status=503))["not_200"] == 1


def test_quantiles_name_the_tail_and_survive_tiny_samples() -> None:
    q = quantiles([i / 1000 for i in range(1, 1001)])  # 1 ms .. 1000 ms
    assert q["p50"] == pytest.approx(0.5005, abs=1e-3)
    assert q["p99.9"] == pytest.approx(0.999, abs=2e-3)
    assert q["max"] == 1.0
    assert quantiles([0.004])["p99.9"] == 0.004
    assert quantiles([])["p99.9"] is None
    assert judge(summarise([]))[0].passed is False  # no answers is no figure
