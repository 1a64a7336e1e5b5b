"""The simulator's ``--exposition`` forms are the release lines sentinel knows, sample for sample.

Pure (no process): the registry's 0.32 exposition reshaped as each form, read
back by sentinel's own release recognition and metrics parser.
"""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sentinel.evidence.metrics import parse_vllm_metrics
from sentinel.evidence.vllm_releases import recognise
from sentinel_sim.expositions import EXPOSITIONS, reshape
from sentinel_sim.metrics import VllmMetrics


def _text(form: str) -> str:
    metrics = VllmMetrics("m", max_model_len=4096, kv_cache_tokens=65536)
    return metrics.exposition(form).decode()


def _samples(text: str) -> set[str]:
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


@pytest.mark.parametrize(
    ("form", "lines"),
    [("0.10", ("0.10",)), ("0.20", ("0.20", "0.27", "0.29")), ("0.32", ("0.32",))],
)
def test_each_release_form_is_recognised_as_its_line(form: str, lines: tuple[str, ...]) -> None:
    recognition = recognise(_samples(_text(form)))
    assert recognition.lines == lines
    assert recognition.missing == ()


def test_the_proxy_form_tells_no_decode_and_no_step() -> None:
    sample = parse_vllm_metrics(_text("counters"), 0.0)
    assert "first_tokens" not in sample.counters  # nothing tells decode from first tokens
    assert "engine_tokens" not in sample.counters  # nor shows an engine step
    assert {"generation_tokens", "prompt_tokens", "completions"} <= set(sample.counters)
    assert {"running", "waiting", "kv_cache_usage"} <= set(sample.gauges)


def test_every_form_parses_and_an_unknown_one_is_refused() -> None:
    for form in EXPOSITIONS:
        assert parse_vllm_metrics(_text(form), 0.0).counters
    with pytest.raises(ValueError, match="unknown exposition"):
        reshape(b"", "0.99")
