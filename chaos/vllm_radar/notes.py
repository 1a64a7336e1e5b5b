"""What was done about each item the radar reported (data): the reviewed half of its report.

Keyed by (kind, key) as :mod:`chaos.vllm_radar.extract` keys an item; the text
starts "handled: ...", "handled (issue 39): ..." or "not read because ...".
An item with no entry is printed ``UNREVIEWED``: the next release's work list.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

_I39 = "handled (issue 39): "
_NO_HEALTH = "not read because it says nothing about whether tokens are produced"
_KV = "not read because KV-connector traffic is not engine progress (sentinel reads NIXL's only)"
_PROMPT = "not read because the issue-39 discount reads prompt and generation counters only"

NOTES: Mapping[tuple[str, str], str] = MappingProxyType(
    {
        # 0.33
        ("middleware", "ScalingMiddleware"): _I39
        + "0.33 exempts /health and /is_scaling_elastic_ep: a scale is read from the canaries' "
        "scaling 503 and the polled phase, never from /health 503 (0.32 form still read)",
        ("body", "Generation is paused. Please retry after it resumes."): _I39
        + "refusal.py maps it to paused (503 and streamed error chunks); the lifecycle rule "
        "holds it as a pause, readiness red, liveness green",
        ("body", "The server had an error while processing your request."): _I39
        + "refusal.ENGINE_DEAD_MESSAGES: a 500 with it is engine death at once",
        ("body", "This data-parallel rank has been retired and is awaiting shutdown."): _I39
        + "refusal.py maps it to retired: unready with the reason, never restarted",
        ("body", "External Elastic EP status is temporarily unavailable"): _I39
        + "elastic_ep reads this 503 of /is_scaling_elastic_ep as 'there, but no word'",
        ("body", "Failed to pause generation: {}"): "not read because it answers the /pause "
        "caller (the orchestrator), never a canary",
        ("flag", "--watchdog-config"): "handled: diagnostics.watchdog reads its dump_dir; "
        "the bundle gathers the server's current processes' stack dumps",
        ("field", "WatchdogConfig.dump_dir"): "handled: the dump files' directory "
        "(VLLM_STACK_DUMP_for_engine_<dp>_<pid>.log, ..._for_worker_<rank>_<pid>.log)",
        ("field", "WatchdogConfig.timeout"): "not read because the dumps are gathered whatever "
        "their age; sentinel's own windows judge the hang",
        ("field", "WatchdogConfig.check_interval"): "not read: see WatchdogConfig.timeout",
        ("field", "VllmConfig.watchdog_config"): "handled: see --watchdog-config",
        ("flag", "--sleep-mode-backend"): "not read because sleep is read from /is_sleeping "
        "and vllm:engine_sleep_state whatever the backend",
        ("flag", "--max-inflight"): "not read because it belongs to run_batch, not the server",
        ("route", "POST /v1/decisions"): "not read because canaries use the completions routes",
        ("route", "POST /v1/embeddings"): "not read because canaries use the completions routes",
        ("metric", "vllm:kv_offload_config_info"): _KV,
        ("metric", "vllm:kv_offload_tiering_promotion_latency_seconds"): _KV,
        **{
            ("metric", f"vllm:mooncake_{name}"): _KV
            for name in (
                "bytes_transferred",
                "num_descriptors",
                "num_failed_recvs",
                "num_failed_transfers",
                "num_kv_expired_reqs",
                "xfer_time_seconds",
            )
        },
        **{
            ("metric", f"vllm:umbp_transfer_{name}_total"): _KV
            for name in ("bytes", "completed", "failed", "submitted")
        },
        # 0.34
        ("route", "GET /v1/fault_tolerance/status"): _I39
        + "fault_tolerance polls both paths (API key sent); 404 on both is 'not here', "
        "401/403 'cannot tell'; unhealthy and diagnosing are a recovery held to its timeout",
        ("route", "POST /v1/fault_tolerance/apply"): "not read because the orchestrator owns "
        "the recovery: sentinel never sends apply",
        ("route", "GET /fault_tolerance/status"): _I39 + "asked as well, for 0.32-0.33",
        ("route", "POST /fault_tolerance/apply"): "not read: never sent (the orchestrator's)",
        (
            "body",
            "The engine has faulted and cannot accept new requests. Please try again "
            "later or on a different instance.",
        ): _I39 + "refusal.py maps it to faulted by its first sentence (the tail is admission's)",
        ("route", "GET /checkpoint/status"): _I39 + "not polled (503 'running' in normal "
        "operation); a checkpoint-paused start is read from /is_paused and the paused 503, "
        "and startup waits for it",
        ("route", "POST /checkpoint/prepare"): _I39 + "its pause answers the paused 503, "
        "held like /pause",
        ("route", "POST /checkpoint/restore"): "not read because it is the orchestrator's; "
        "the pause it ends is read from /is_paused",
        ("flag", "--checkpoint-prepare-on-startup"): _I39 + "a start paused until restore is "
        "held by startup (paused 503, /is_paused), not judged a hang",
        ("field", "ModelConfig.checkpoint_prepare_on_startup"): "handled: see the flag",
        ("flag", "--cache-aware-admission-threshold"): "not read because its refusals are the "
        "admission 503s sentinel already maps",
        ("flag", "--cache-aware-admission-window"): "not read: see "
        "--cache-aware-admission-threshold",
        ("field", "SchedulerConfig.cache_aware_admission_threshold"): "not read: see the flag",
        ("field", "SchedulerConfig.cache_aware_admission_window"): "not read: see the flag",
        ("flag", "--max-num-inflight-kv-loads"): _KV,
        ("field", "SchedulerConfig.max_num_inflight_kv_loads"): _KV,
        ("flag", "--headless-client-handshake-address"): "not read because a headless "
        "engine has no API server for sentinel to ask",
        ("metric", "vllm:request_render_duration_seconds"): _PROMPT,
        ("metric", "vllm:kv_offload_tiering_deferred_release_chunks"): _KV,
        ("metric", "vllm:kv_offload_tiering_deferred_release_hold_seconds"): _KV,
        # Known surfaces no release declares.
        ("flag", "--sleep-idle-ttl"): "not in 0.32-0.34: vLLM's proposal (PR #47703) is "
        "still open; read for servers that carry it",
        ("flag", "--sleep-idle-seconds"): "not vLLM's: llama.cpp's server flag, read there",
    }
)


def disposition(kind: str, key: str) -> str:
    """The reviewed note for one item ("" when nobody wrote one)."""
    return NOTES.get((kind, key), "")
