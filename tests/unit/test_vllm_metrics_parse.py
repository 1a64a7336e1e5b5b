"""Parsing vLLM's ``/metrics`` exposition into progress evidence; scrape and poll errors."""

from __future__ import annotations

import httpx
import pytest

from sentinel.evidence.failure import EvidenceFailure
from sentinel.evidence.metrics import (
    MetricsScraper,
    ScrapeError,
    parse_vllm_metrics,
    relevant_lines,
)
from sentinel.evidence.vllm_health import VllmHealthPoller

# Shaped like vLLM 0.32's exposition (prometheus-client text format 0.0.4):
# counters with `_total` samples and `_created` gauges, labels model_name and
# engine, request_success split by finished_reason, the iteration-tokens
# histogram whose own name ends in `_total`, and unrelated process metrics.
VLLM_EXPOSITION = """\
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12345.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 7.0
# HELP vllm:num_requests_waiting_by_reason Number of requests waiting, by reason.
# TYPE vllm:num_requests_waiting_by_reason gauge
vllm:num_requests_waiting_by_reason{engine="0",model_name="tiny",reason="capacity"} 6.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="tiny",reason="deferred"} 1.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.25
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="tiny"} 2.0
# HELP vllm:num_preemptions_created Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_created gauge
vllm:num_preemptions_created{engine="0",model_name="tiny"} 1.7646e+09
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="tiny"} 1500.0
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="tiny"} 1.7646e+09
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="tiny"} 4200.0
# HELP vllm:generation_tokens_created Number of generation tokens processed.
# TYPE vllm:generation_tokens_created gauge
vllm:generation_tokens_created{engine="0",model_name="tiny"} 1.7646e+09
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 40.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 9.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="tiny"} 100.0
vllm:request_success_total{engine="0",finished_reason="error",model_name="tiny"} 5.0
# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_sum{engine="0",model_name="tiny"} 5700.0
vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="tiny"} 300.0
vllm:iteration_tokens_total_bucket{engine="0",le="8.0",model_name="tiny"} 800.0
vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="tiny"} 812.0
vllm:iteration_tokens_total_count{engine="0",model_name="tiny"} 812.0
# HELP vllm:iteration_tokens_total_created Histogram of number of tokens per engine_step.
# TYPE vllm:iteration_tokens_total_created gauge
vllm:iteration_tokens_total_created{engine="0",model_name="tiny"} 1.7646e+09
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_sum{engine="0",model_name="tiny"} 3.5
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="tiny"} 49.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny"} 49.0
"""


def test_every_progress_signal_is_read_from_a_vllm_exposition() -> None:
    sample = parse_vllm_metrics(VLLM_EXPOSITION, at=12.5)

    assert sample.at == 12.5
    assert dict(sample.counters) == {
        "generation_tokens": 4200.0,
        "prompt_tokens": 1500.0,
        "completions": 49.0,  # stop + length; abort and error are not progress
        "engine_steps": 812.0,  # the histogram's _count, not a bucket or _sum
        "preemptions": 2.0,
    }
    assert dict(sample.gauges) == {"running": 3.0, "waiting": 7.0, "kv_cache_usage": 0.25}


def test_label_sets_of_data_parallel_engines_are_summed() -> None:
    text = """\
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 10.0
vllm:generation_tokens_total{engine="1",model_name="m"} 32.0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 1.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
"""
    sample = parse_vllm_metrics(text, at=0.0)
    assert sample.counters == {"generation_tokens": 42.0}
    assert sample.gauges == {"running": 3.0}


def test_absent_signals_are_absent_not_zero() -> None:
    text = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 0.0
"""
    sample = parse_vllm_metrics(text, at=0.0)
    assert sample.counters == {}
    assert sample.gauges == {"running": 0.0}
    assert "generation_tokens" not in sample.counters


def test_completions_present_at_zero_when_only_aborts_finished() -> None:
    text = """\
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="abort",model_name="m"} 7.0
"""
    assert parse_vllm_metrics(text, at=0.0).counters == {"completions": 0.0}


def test_untyped_exposition_without_metadata_still_parses() -> None:
    # A server (or the simulator) that omits HELP/TYPE lines exposes the same sample names.
    text = "vllm:generation_tokens_total 5\nvllm:iteration_tokens_total_count 2\n"
    assert parse_vllm_metrics(text, at=0.0).counters == {
        "generation_tokens": 5.0,
        "engine_steps": 2.0,
    }


def test_garbage_raises_value_error() -> None:
    with pytest.raises(ValueError, match="invalid metric name"):
        parse_vllm_metrics("<html><body>502 Bad Gateway</body></html>", at=0.0)


def _scraper(handler: httpx.MockTransport) -> tuple[MetricsScraper, httpx.AsyncClient]:
    client = httpx.AsyncClient(transport=handler)
    return MetricsScraper(client, "http://vllm:8000/", clock=lambda: 99.0), client


async def test_scraper_returns_sample_and_keeps_the_raw_text() -> None:
    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, text=VLLM_EXPOSITION)

    scraper, client = _scraper(httpx.MockTransport(handle))
    async with client:
        sample = await scraper.scrape()
    assert seen == ["http://vllm:8000/metrics"]
    assert sample.at == 99.0
    assert sample.counters["generation_tokens"] == 4200.0
    assert scraper.last_text == VLLM_EXPOSITION
    assert scraper.last_at == 99.0


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (httpx.ConnectError("refused"), EvidenceFailure.CONNECT),
        (httpx.ConnectTimeout("slow accept"), EvidenceFailure.TIMEOUT),
        (httpx.ReadTimeout("no answer"), EvidenceFailure.TIMEOUT),
        (httpx.RemoteProtocolError("peer closed"), EvidenceFailure.PROTOCOL),
    ],
)
async def test_scraper_classifies_transport_errors(
    exc: httpx.TransportError, reason: EvidenceFailure
) -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        raise exc

    scraper, client = _scraper(httpx.MockTransport(handle))
    async with client:
        with pytest.raises(ScrapeError) as info:
            await scraper.scrape()
    assert info.value.reason is reason
    assert scraper.last_text is None


async def test_scraper_reports_bad_status_and_bad_body() -> None:
    answers = iter(
        [httpx.Response(500, text="engine dead"), httpx.Response(200, text="<html>oops</html>")]
    )

    def handle(request: httpx.Request) -> httpx.Response:
        return next(answers)

    scraper, client = _scraper(httpx.MockTransport(handle))
    async with client:
        with pytest.raises(ScrapeError) as status_error:
            await scraper.scrape()
        with pytest.raises(ScrapeError) as body_error:
            await scraper.scrape()
    assert status_error.value.reason is EvidenceFailure.HTTP_STATUS
    assert status_error.value.status == 500
    assert body_error.value.reason is EvidenceFailure.BAD_BODY
    assert scraper.last_text == "<html>oops</html>"


async def test_health_poller_reports_status_or_failure_without_raising() -> None:
    answers: list[httpx.Response | Exception] = [
        httpx.Response(200),
        httpx.Response(503),
        httpx.ConnectError("refused"),
    ]

    def handle(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/health"
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
        poller = VllmHealthPoller(client, "http://vllm:8000", clock=lambda: 1.0, timeout=0.5)
        polls = [await poller.poll() for _ in range(3)]
    assert [(p.status, p.failure, p.ok) for p in polls] == [
        (200, None, True),
        (503, None, False),
        (None, EvidenceFailure.CONNECT, False),
    ]


def test_only_the_signal_lines_are_parsed() -> None:
    """Buckets and unrelated families are dropped before parsing, values unchanged."""
    text = (
        "# TYPE vllm:iteration_tokens_total histogram\n"
        'vllm:iteration_tokens_total_bucket{engine="0",le="1.0"} 3.0\n'
        'vllm:iteration_tokens_total_count{engine="0"} 7.0\n'
        'vllm:iteration_tokens_total_sum{engine="0"} 40.0\n'
        "# TYPE vllm:generation_tokens_total counter\n"
        'vllm:generation_tokens_total{engine="0"} 33.0\n'
        'vllm:generation_tokens_created{engine="0"} 1.7e9\n'
        'vllm:request_success_total{finished_reason="stop"} 2.0\n'
        "process_cpu_seconds_total 9.0\n"
    )
    kept = relevant_lines(text).splitlines()
    assert kept == [
        'vllm:iteration_tokens_total_count{engine="0"} 7.0',
        'vllm:generation_tokens_total{engine="0"} 33.0',
        'vllm:request_success_total{finished_reason="stop"} 2.0',
    ]
    sample = parse_vllm_metrics(text, 1.0)
    assert dict(sample.counters) == {
        "engine_steps": 7.0,
        "generation_tokens": 33.0,
        "completions": 2.0,
    }
