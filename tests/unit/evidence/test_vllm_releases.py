"""The release table tells vLLM lines apart by the samples an exposition carries."""

from __future__ import annotations

from sentinel.evidence.vllm_releases import BY_LINE, RELEASES, recognise

CORE = {
    "vllm:generation_tokens_total",
    "vllm:prompt_tokens_total",
    "vllm:iteration_tokens_total_sum",
    "vllm:num_preemptions_total",
    "vllm:request_success_total",
    "vllm:time_to_first_token_seconds_count",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
}


def test_old_line_is_told_from_new_by_its_deprecated_gauge() -> None:
    deprecated = {"vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds_count"}
    old = recognise(CORE | deprecated)
    newer = recognise(CORE | deprecated | {"vllm:inter_token_latency_seconds_count"})
    assert old.lines == ("0.9",)
    assert newer.lines == ("0.10",)


def test_newest_line_is_told_by_admission_rejections() -> None:
    waiting = {"vllm:num_requests_waiting_by_reason"}
    assert recognise(CORE | waiting).lines == ("0.20", "0.27", "0.29")
    assert recognise(CORE | waiting | {"vllm:admission_rejections_total"}).lines == ("0.32",)


def test_every_signal_maps_to_a_present_sample_and_absent_ones_are_missing() -> None:
    found = recognise(CORE - {"vllm:iteration_tokens_total_sum"}, engines=["1", "0", "10"])
    assert found.signals["generation_tokens"] == "vllm:generation_tokens_total"
    assert "engine_tokens" not in found.signals
    assert found.missing == ("engine_tokens",)
    assert found.engines == ("0", "1", "10")


def test_an_exposition_without_vllm_samples_fits_no_line() -> None:
    found = recognise({"process_cpu_seconds_total"})
    assert found.lines == ()
    assert dict(found.signals) == {}


def test_table_is_keyed_by_line_and_lines_are_ordered() -> None:
    assert list(BY_LINE) == [r.line for r in RELEASES]
    numbers = [tuple(int(p) for p in r.line.split(".")) for r in RELEASES]
    assert numbers == sorted(numbers)


def test_oldest_live_line_says_which_structured_field_it_honours_and_what_it_needs() -> None:
    old = BY_LINE["0.10"]
    assert "live" in old.checked
    assert "guided_json" in old.structured_fields
    assert "structured_outputs" in old.ignored_fields
    assert old.server_flags == ("--dtype", "float32")
    # sentinel's structured canary sends response_format: honoured by every line.
    assert all("response_format" in r.structured_fields for r in RELEASES)
    assert not set(old.structured_fields) & set(old.ignored_fields)
