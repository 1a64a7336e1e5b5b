"""Wide data parallelism (issue 30): the series cap scales with the engines shown.

vLLM adds about 30 of the series sentinel reads per data-parallel engine, so a
fixed cap of 1,000 refused every scrape from about 33 engines on and left
sentinel blind. The cap is the base plus an allowance per engine the
exposition itself shows (its ``engine`` label), bounded; an exposition over
it is still refused, with a reason naming the engines and the cap.
"""

from __future__ import annotations

import pytest

from sentinel.evidence.exposition import ExpositionReader, ScrapeError, ScrapeLimits
from sentinel.evidence.failure import EvidenceFailure
from sentinel.evidence.metrics import COUNTER_SAMPLES, GAUGE_SAMPLES, parse_vllm_metrics

WANTED = (*COUNTER_SAMPLES, *GAUGE_SAMPLES)
PER_ENGINE = 30  # what vLLM 0.32 (and the simulator) expose of WANTED-like series


def _exposition(engines: int, per_engine: int = PER_ENGINE) -> bytes:
    names = [*COUNTER_SAMPLES, *GAUGE_SAMPLES]
    lines = []
    for engine in range(engines):
        for i in range(per_engine):
            name = names[i % len(names)]
            lines.append(f'{name}{{model_name="m",engine="{engine}",n="{i}"}} {i}.0')
    return ("\n".join(lines) + "\n").encode()


def _read(body: bytes, limits: ScrapeLimits) -> str:
    reader = ExpositionReader(limits, WANTED)
    for start in range(0, len(body), 4096):
        reader.feed(body[start : start + 4096])
    return reader.finish()[0]


def test_dp_64_is_read_with_the_shipped_caps() -> None:
    kept = _read(_exposition(64), ScrapeLimits())
    sample = parse_vllm_metrics(kept, 1.0)
    assert len(sample.engines) == 64


def test_a_fixed_cap_would_have_refused_dp_64() -> None:
    with pytest.raises(ScrapeError) as refused:
        _read(_exposition(64), ScrapeLimits(series_per_engine=0))
    assert refused.value.reason is EvidenceFailure.TOO_LARGE


def test_an_exposition_truly_over_the_cap_is_refused_naming_the_engines() -> None:
    # 4 engines with 400 series each: far beyond what vLLM exposes per engine
    with pytest.raises(ScrapeError) as refused:
        _read(_exposition(4, per_engine=400), ScrapeLimits())
    assert refused.value.reason is EvidenceFailure.TOO_LARGE
    assert "engines seen" in refused.value.detail
    assert "1000 + 100 per engine" in refused.value.detail


def test_the_engine_allowance_is_bounded() -> None:
    limits = ScrapeLimits(max_series=10, series_per_engine=1, max_engines=8)
    with pytest.raises(ScrapeError):
        _read(_exposition(64, per_engine=1), limits)  # 64 series > 10 + 8
    assert _read(_exposition(8, per_engine=2), limits).count("\n") == 16


def test_the_canary_history_holds_rounds_of_every_engine() -> None:
    from sentinel.canary.result import CanaryResult, Reason
    from sentinel.canary.spec import CanaryKind
    from sentinel.record.ledger import HISTORY, ROUNDS_KEPT, KindRecord
    from sentinel.verdict import Action

    record = KindRecord(CanaryKind.TEXT, Action.RESTART)
    record.make_room(2)
    assert record.results.maxlen == HISTORY  # small DP keeps the fixed history
    timed_out = CanaryResult("text", CanaryKind.TEXT, Reason.TIMEOUT, 0.0, 2.0, engine=37)
    record.results.append(timed_out)
    record.controls.append(None)
    record.make_room(64)
    for engine in range(64):  # the next round, one canary aimed at each engine
        ok = CanaryResult("text", CanaryKind.TEXT, Reason.OK, 2.0, 0.1, engine=engine)
        record.results.append(ok)
        record.controls.append(None)
    assert record.results.maxlen == ROUNDS_KEPT * 64
    assert timed_out in record.results, "one engine's timeout survives its round's answers"
    assert len(record.controls) == len(record.results)
