"""The surfaces of vLLM sentinel knows: the radar's side of every comparison (data only).

One :class:`Known` per route sentinel asks (or whose behaviour it relies on),
error body it recognises, metric sample it reads, process title it matches,
command-line flag it reads and config field it reads out of a JSON flag. Keys
are written the way :mod:`chaos.vllm_radar.extract` keys a release's surfaces
(``GET /health``; a body's first sentence; an exposed sample name; a title
without its ``VLLM::`` prefix is matched by prefix; ``Class.field``).

tests/unit/chaos/test_vllm_radar_known.py keeps this table and the code in step:
every body, route, sample, title and flag the code matches is here and every
entry marked ``read`` is still in the code. When that test fails after a
change elsewhere, the entry to add or drop is named in its message.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Known:
    """One surface sentinel depends on.

    ``read``: sentinel itself sends, matches or parses it (the code must hold
    it); False for behaviour relied on without a request of sentinel's own.
    ``since``/``until``: the first and last release lines expected to declare
    it (a release outside them that lacks it is not reported).
    """

    kind: str
    key: str
    use: str
    read: bool = True
    since: str = ""
    until: str = ""


R, B, M, T, F, D = "route", "body", "metric", "title", "flag", "field"

KNOWN: tuple[Known, ...] = (
    # Routes (sentinel/evidence/*, sentinel/canary/spec.py).
    Known(R, "GET /health", "vllm_health: the API server still reaches its engine"),
    Known(R, "GET /metrics", "metrics: progress evidence, own work discounted"),
    Known(R, "GET /v1/models", "weights and the canary runner: the served model"),
    Known(R, "GET /weight_info", "weights: weight identity (dev mode)"),
    Known(R, "GET /is_sleeping", "lifecycle_poll: sleep is a state, not a hang"),
    Known(R, "GET /is_paused", "lifecycle_poll: pause is a state, not a hang"),
    Known(R, "POST /v1/chat/completions", "canaries (chat)"),
    Known(R, "POST /v1/completions", "canaries (completions)"),
    Known(R, "POST /is_scaling_elastic_ep", "elastic_ep: scale phase and bound"),
    Known(R, "GET /fault_tolerance/status", "fault_tolerance: 0.32-0.33 status", until="0.33"),
    Known(R, "GET /v1/fault_tolerance/status", "fault_tolerance: 0.34+ status", since="0.34"),
    Known(R, "POST /pause", "relied on: a pause answers 503 or waits (lifecycle)", read=False),
    Known(R, "POST /sleep", "relied on: sleep queues canaries (lifecycle)", read=False),
    Known(R, "POST /fault_tolerance/apply", "never sent", read=False, until="0.33"),
    Known(R, "POST /v1/fault_tolerance/apply", "never sent", read=False, since="0.34"),
    # Bodies (sentinel/canary/refusal.py, sentinel/evidence/vllm_health.py).
    Known(B, "The engine is currently busy and cannot accept new requests", "refusal: admission"),
    Known(B, "The engine has reached its prefill token backlog limit", "refusal: admission"),
    Known(B, "Generation is paused", "refusal: paused", since="0.33"),
    Known(B, "The engine has faulted and cannot accept new requests", "refusal", since="0.34"),
    Known(B, "The model is currently scaling", "refusal: scaling; vllm_health SCALING_MARK"),
    Known(B, "This data-parallel rank has been retired", "refusal: retired", since="0.33"),
    Known(B, "EngineCore encountered an issue", "engine_dead (0.10-0.32)", until="0.32"),
    Known(B, "The server had an error while processing your request", "engine_dead", since="0.33"),
    # Metric samples (sentinel/evidence/metrics.py, sentinel/evidence/vllm_releases.py).
    Known(M, "vllm:generation_tokens_total", "progress: tokens generated"),
    Known(M, "vllm:prompt_tokens_total", "progress: prompt tokens"),
    Known(M, "vllm:iteration_tokens_total_sum", "progress: engine-step tokens"),
    Known(M, "vllm:num_preemptions_total", "progress: preemptions"),
    Known(M, "vllm:time_to_first_token_seconds_count", "progress: first tokens"),
    Known(M, "vllm:request_generation_tokens_count", "progress: finished requests"),
    Known(M, "vllm:request_generation_tokens_bucket", "progress: one-token requests (le=1)"),
    Known(M, "vllm:mm_cache_queries_total", "multimodal path traffic"),
    Known(M, "vllm:corrupted_requests_total", "fingerprint: NaN-logit requests"),
    Known(M, "vllm:rl_weight_update_operation_duration_seconds_count", "weight transfers"),
    Known(M, "vllm:nixl_xfer_time_seconds_count", "KV transfers (P/D decode node)"),
    Known(M, "vllm:nixl_num_failed_transfers_total", "failed KV transfers"),
    Known(M, "vllm:num_requests_running", "gauge: running"),
    Known(M, "vllm:num_requests_waiting", "gauge: waiting"),
    Known(M, "vllm:kv_cache_usage_perc", "gauge: KV-cache usage"),
    Known(M, "vllm:rl_weight_update_operations_in_flight", "gauge: weight update held"),
    Known(M, "vllm:request_success_total", "completions by finished_reason"),
    Known(M, "vllm:engine_sleep_state", "sleep state by sleep_state label"),
    Known(M, "vllm:num_requests_waiting_by_reason", "waiting by reason; release marker"),
    Known(M, "vllm:prompt_tokens_by_source_total", "external KV prompt tokens"),
    Known(M, "vllm:admission_rejections_total", "release marker (0.32 line)"),
    Known(M, "vllm:gpu_cache_usage_perc", "release marker (0.9-0.10)", until="0.19"),
    Known(
        M,
        "vllm:time_per_output_token_seconds_count",
        "release marker (0.9-0.10)",
        until="0.19",
    ),
    Known(M, "vllm:inter_token_latency_seconds_count", "release marker (0.10+)"),
    # Process titles (sentinel/evidence/process_model.py, vllm_releases.py).
    Known(T, "VLLM::EngineCore", "engine role; _DP<n> suffix is the engine"),
    Known(T, "VLLM::Worker", "worker role; _DP/_PP/_TP/_EP suffixes place it"),
    Known(T, "VLLM::DPCoordinator", "coordinator role"),
    Known(T, "VLLM::APIServer", "API-server processes of --api-server-count"),
    # Flags read from the server's command line.
    Known(F, "--port", "server_port: the port to probe"),
    Known(F, "--config", "server_port: a YAML config holding the port"),
    Known(F, "--scheduling-policy", "process_model: priority canaries"),
    Known(F, "--reasoning-parser", "process_model: reasoning kinds"),
    Known(F, "--structured-outputs-config.reasoning-parser", "process_model: reasoning kinds"),
    Known(F, "--sleep-idle-ttl", "sleep_flags: idle auto-sleep"),
    Known(F, "--sleep-idle-seconds", "sleep_flags: idle auto-sleep"),
    Known(F, "--enable-fault-tolerance", "ft_status: fault tolerance is on"),
    Known(F, "--fault-tolerance-config", "ft_status: engine_recovery_timeout_sec"),
    Known(F, "--watchdog-config", "diagnostics.watchdog: stack dumps", since="0.33"),
    Known(F, "--watchdog-config.dump-dir", "diagnostics.watchdog: the same", since="0.33"),
    # Config fields read out of a JSON flag.
    Known(D, "FaultToleranceConfig.engine_recovery_timeout_sec", "ft_status: the recovery bound"),
    Known(D, "WatchdogConfig.dump_dir", "diagnostics.watchdog: dumps", since="0.33"),
)


def of_kind(kind: str) -> tuple[Known, ...]:
    """The entries of one kind, in table order."""
    return tuple(k for k in KNOWN if k.kind == kind)
