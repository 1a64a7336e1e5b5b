"""Parsing vLLM's ``/metrics`` exposition into progress evidence; scrape and poll errors."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator

import httpx
import pytest

from sentinel.evidence.failure import EvidenceFailure
from sentinel.evidence.metrics import (
    MetricsSample,
    MetricsScraper,
    ScrapeError,
    ScrapeLimits,
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
        "engine_tokens": 5700.0,  # the histogram's _sum (tokens processed), not _count (steps)
        "preemptions": 2.0,
        "first_tokens": 49.0,  # the TTFT histogram's _count: requests past their prefill
    }
    assert dict(sample.gauges) == {
        "running": 3.0,
        "waiting": 7.0,
        "kv_cache_usage": 0.25,
        "waiting_capacity": 6.0,  # by reason: real requests waiting for room
        "waiting_deferred": 1.0,  # by reason: waiting for a grammar to compile
    }


def test_generation_lengths_tell_one_token_completions_apart() -> None:
    text = (
        'vllm:request_generation_tokens_bucket{engine="0",le="1.0",model_name="m"} 30.0\n'
        'vllm:request_generation_tokens_bucket{engine="0",le="2.0",model_name="m"} 31.0\n'
        'vllm:request_generation_tokens_bucket{engine="0",le="+Inf",model_name="m"} 35.0\n'
        'vllm:request_generation_tokens_count{engine="0",model_name="m"} 35.0\n'
    )
    sample = parse_vllm_metrics(text, at=1.0)
    assert dict(sample.counters) == {"finished": 35.0, "finished_one_token": 30.0}


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
    text = "vllm:generation_tokens_total 5\nvllm:iteration_tokens_total_sum 2\n"
    assert parse_vllm_metrics(text, at=0.0).counters == {
        "generation_tokens": 5.0,
        "engine_tokens": 2.0,
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
        'vllm:iteration_tokens_total_sum{engine="0"} 40.0',
        'vllm:generation_tokens_total{engine="0"} 33.0',
        'vllm:request_success_total{finished_reason="stop"} 2.0',
    ]
    sample = parse_vllm_metrics(text, 1.0)
    assert dict(sample.counters) == {
        "engine_tokens": 40.0,
        "generation_tokens": 33.0,
        "completions": 2.0,
    }


class _Chunks(httpx.AsyncByteStream):
    """A body that arrives in pieces, as from a socket (not read up front by httpx)."""

    def __init__(self, *chunks: bytes) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


async def _scrape(
    *chunks: bytes, headers: dict[str, str] | None = None, limits: ScrapeLimits | None = None
) -> MetricsSample:
    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers=headers, stream=_Chunks(*chunks))

    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
        scraper = MetricsScraper(client, "http://vllm:8000", clock=lambda: 1.0, limits=limits)
        return await scraper.scrape()


async def test_a_body_arriving_in_pieces_is_read_line_by_line() -> None:
    body = VLLM_EXPOSITION.encode()
    pieces = [body[i : i + 7] for i in range(0, len(body), 7)]  # lines split across chunks
    sample = await _scrape(*pieces)
    assert sample.counters["generation_tokens"] == 4200.0
    assert sample.gauges["running"] == 3.0


SMALL = ScrapeLimits(max_bytes=10_000, max_lines=50, max_line_bytes=1024, max_series=5)


@pytest.mark.parametrize(
    ("chunks", "words"),
    [
        pytest.param((b"# filler line\n" * 1000,), "bytes", id="bytes"),
        pytest.param((b"a 1\n" * 51,), "lines", id="lines"),
        pytest.param((b"vllm:num_requests_running" + b"x" * 600, b"y" * 600), "line", id="line"),
        pytest.param(
            (b"".join(b'vllm:num_requests_running{e="%d"} 1\n' % i for i in range(6)),),
            "series",
            id="series",
        ),
    ],
)
async def test_every_cap_is_an_evidence_error(chunks: tuple[bytes, ...], words: str) -> None:
    with pytest.raises(ScrapeError) as info:
        await _scrape(*chunks, limits=SMALL)
    assert info.value.reason is EvidenceFailure.TOO_LARGE
    assert words in info.value.detail


async def test_gzip_is_inflated_within_the_cap_and_a_bomb_is_refused() -> None:
    gzipped = gzip.compress(VLLM_EXPOSITION.encode())
    sample = await _scrape(gzipped[:10], gzipped[10:], headers={"Content-Encoding": "gzip"})
    assert sample.counters["generation_tokens"] == 4200.0
    bomb = gzip.compress(b"\n" * (50 * 1024 * 1024))  # 50 MB of blank lines, about 50 KB
    with pytest.raises(ScrapeError) as info:
        await _scrape(bomb, headers={"Content-Encoding": "gzip"})
    assert info.value.reason is EvidenceFailure.TOO_LARGE


@pytest.mark.parametrize(
    ("chunks", "headers"),
    [
        pytest.param((VLLM_EXPOSITION.encode(),), {"Content-Encoding": "gzip"}, id="not-gzip"),
        pytest.param((VLLM_EXPOSITION.encode(),), {"Content-Encoding": "br"}, id="unknown"),
        pytest.param((b'vllm:num_requests_running{m="\xff"} 1\n',), {}, id="bad-utf8"),
        pytest.param((b"# a comment \xc3",), {}, id="cut-utf8"),
    ],
)
async def test_an_undecodable_body_is_bad_body_never_an_exception(
    chunks: tuple[bytes, ...], headers: dict[str, str]
) -> None:
    with pytest.raises(ScrapeError) as info:
        await _scrape(*chunks, headers=headers)
    assert info.value.reason is EvidenceFailure.BAD_BODY


@pytest.mark.parametrize(
    ("status", "failing", "no_endpoint"),
    [
        (200, False, False),
        (503, True, False),
        (404, False, True),
        (302, False, True),
        (401, False, True),
        (403, False, True),
    ],
)
async def test_only_a_5xx_health_is_failing_and_redirects_are_not_followed(
    status: int, failing: bool, no_endpoint: bool
) -> None:
    paths: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.path)
        return httpx.Response(status, headers={"Location": "/elsewhere"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
        poll = await VllmHealthPoller(client, "http://vllm:8000", clock=lambda: 1.0).poll()
    assert (poll.status, poll.failing, poll.no_endpoint) == (status, failing, no_endpoint)
    assert paths == ["/health"]


async def test_an_oversized_health_body_keeps_its_status_and_says_why() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=_Chunks(*[b"x" * 65536] * 4))

    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
        poll = await VllmHealthPoller(client, "http://vllm:8000", clock=lambda: 1.0).poll()
    assert (poll.status, poll.failure) == (200, EvidenceFailure.TOO_LARGE)


def test_an_engine_step_that_processed_no_token_is_no_work() -> None:
    """Steps counted (``_count``) without tokens processed (``_sum``) leave the signal flat."""
    before = "vllm:iteration_tokens_total_count 10\nvllm:iteration_tokens_total_sum 40\n"
    after = "vllm:iteration_tokens_total_count 25\nvllm:iteration_tokens_total_sum 40\n"
    assert parse_vllm_metrics(before, 0.0).counters == parse_vllm_metrics(after, 1.0).counters
