"""The simulator's command line and the typed configuration both of its processes share.

Defaults are chosen so tests run fast while the numbers stay plausible for a
small model: 100 decode tokens/s per sequence (a 10 ms engine step), 16
concurrent sequences (vLLM's CPU default is lower, GPU default 256), and a KV
cache large enough (65,536 tokens) that preemption only happens when a test
configures it small. A step schedules at most ``max_num_batched_tokens``
(8192) tokens, so a prompt longer than that prefills in chunks, each chunk
lasting ``chunk / prefill_tps`` seconds (see :mod:`sentinel_sim.scheduler`).

``--dev-mode`` (or ``VLLM_SERVER_DEV_MODE=1`` in the environment, as vLLM
reads it) registers vLLM's development routes: ``/sleep``, ``/wake_up``,
``/is_sleeping``, ``/pause``, ``/resume``, ``/is_paused`` and the RL
weight-update routes. ``--reasoning-parser NAME`` makes chat replies think
first (see :mod:`sentinel_sim.model`). ``--no-chat-template`` is a base model
whose tokenizer defines no chat template: every chat request answers HTTP 400
with vLLM's message, while ``/v1/completions`` works.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sentinel_sim.expositions import EXPOSITIONS
from sentinel_sim.faults import Fault, FaultError, FaultSpec
from sentinel_sim.scheduler import DEFAULT_MAX_NUM_BATCHED_TOKENS

DEFAULT_MODEL = "sim-model"
DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"
REASONING_FIELDS = ("reasoning", "reasoning_content")


def dev_mode_from_env() -> bool:
    """vLLM's reading of ``VLLM_SERVER_DEV_MODE``: an integer, non-zero means on."""
    try:
        return bool(int(os.environ.get(DEV_MODE_ENV, "0")))
    except ValueError:
        return False


#: 0.34's --checkpoint-prepare-on-startup: the engine starts paused, as a prepared checkpoint.
CHECKPOINT_START = FaultSpec.build(Fault.PAUSE.value, {"mode": "abort", "checkpoint": True})


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Everything that shapes the simulated server; frozen, passed to the engine as JSON."""

    host: str = "127.0.0.1"
    port: int = 8000
    control_host: str = "127.0.0.1"
    control_port: int = 8001
    model: str = DEFAULT_MODEL
    max_num_seqs: int = 16
    # vLLM's admission control (--max-num-queued-reqs): past it a request is refused 503.
    max_num_queued_reqs: int | None = None
    kv_cache_tokens: int = 65536
    block_size: int = 16
    max_model_len: int = 4096
    decode_tps: float = 100.0  # tokens per second per running sequence
    prefill_tps: float = 20000.0  # prompt tokens per second: a chunk of N lasts N / prefill_tps
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS  # token budget per step
    scheduling_policy: str = "fcfs"
    text_only: bool = False
    image_refusal: str = "vllm"  # whose words refuse an image (sentinel_sim.foreign)
    image_refusal_status: int = 400
    completions: bool = True  # False: no /v1/completions route (a chat-only server)
    reply_tokens: int = 16  # natural length of an unconstrained reply, before end-of-sequence
    startup_delay: float = 0.0  # simulated model loading before the OpenAI port opens
    dead_exit_delay: float = 1.0  # how long /health answers 503 after the engine died
    ready_file: str | None = None
    data_parallel_size: int = 1  # engine children, VLLM::EngineCore_DP<i>, least loaded first
    tensor_parallel_size: int = 1  # worker children per engine, VLLM::Worker_TP<i>
    #: worker ranks in pods of their own (a multi-node group), HOST:PORT each: every step waits
    remote_ranks: tuple[str, ...] = ()
    api_server_count: int = 1  # API-server processes on one socket (sentinel_sim.satellite)
    dev_mode: bool = False  # vLLM's VLLM_SERVER_DEV_MODE routes (sleep, pause, weights)
    reasoning_parser: str | None = None  # chat replies think first (any parser name)
    reasoning_tokens: int = 64  # how many tokens the thinking lasts
    reasoning_field: str = "reasoning"  # 0.32's field; "reasoning_content" before it
    # A chat template that thinks whatever it is told (ignores enable_thinking=false).
    thinking_ignores_template: bool = False
    # A base model whose tokenizer defines no chat template: chat answers vLLM's 400.
    no_chat_template: bool = False
    elastic_scale_seconds: float = 45.0  # how long POST /scale_elastic_ep scales
    # Whose scaling middleware: "0.33" (the newest form: /health and the status route
    # exempt, phases, retired ranks) or "0.32" (every path 503); sentinel_sim.elastic_ep.
    elastic_ep_release: str = "0.33"
    # vLLM's proposed idle auto-sleep (sentinel_sim.auto_sleep); None: off.
    sleep_idle_ttl: float | None = None
    sleep_idle_level: int = 1
    wake_seconds: float = 1.0  # how long a wake on request takes
    # vLLM's --enable-fault-tolerance, in the release form given (sentinel_sim.fault_tolerance):
    # "0.33" (requests queue while unhealthy) or "0.34" (503 at once, routes under /v1); None: off.
    fault_tolerance: str | None = None
    engine_recovery_timeout: float = 120.0  # --fault-tolerance-config engine_recovery_timeout_sec
    api_key: str | None = None  # vLLM's --api-key: every /v1 path wants the bearer token
    # Whose front end answers pauses and engine death (sentinel_sim.refusals): "0.32"
    # (a pause queues; "EngineCore encountered an issue"), "0.33" (/pause abort|wait
    # rejects; the new engine-death text) or "0.34" (and /checkpoint/*).
    release: str = "0.32"
    # Whose /metrics (sentinel_sim.expositions): "0.10", "0.20", "0.32" (0.33, 0.34)
    # or "counters" (a relabelling proxy that drops every histogram).
    exposition: str = "0.32"
    faults: tuple[FaultSpec, ...] = field(default_factory=tuple)

    def engine_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("faults")
        data.pop("api_key")  # the API server's alone: never on an engine's command line
        return data


def build_parser() -> argparse.ArgumentParser:
    from sentinel_sim.fault_help import epilog

    parser = argparse.ArgumentParser(
        prog="python -m sentinel_sim",
        description="Simulated vLLM: OpenAI-compatible API + EngineCore child, fault injection.",
        epilog=epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    d = SimConfig()
    parser.add_argument("--host", default=d.host)
    parser.add_argument("--port", type=int, default=d.port, help="OpenAI port (0: any free port)")
    parser.add_argument("--control-host", default=d.control_host)
    parser.add_argument(
        "--control-port", type=int, default=d.control_port, help="fault-control port (0: any)"
    )
    parser.add_argument("--model", "--served-model-name", dest="model", default=d.model)
    parser.add_argument("--max-num-seqs", type=int, default=d.max_num_seqs)
    parser.add_argument(
        "--max-num-queued-reqs",
        type=int,
        default=d.max_num_queued_reqs,
        help="admission cap on unfinished requests: past it, 503 before the engine",
    )
    parser.add_argument(
        "--kv-cache-tokens", type=int, default=d.kv_cache_tokens, help="KV-cache capacity"
    )
    parser.add_argument("--block-size", type=int, default=d.block_size)
    parser.add_argument("--max-model-len", type=int, default=d.max_model_len)
    parser.add_argument(
        "--decode-tps", type=float, default=d.decode_tps, help="decode tokens/s per sequence"
    )
    parser.add_argument(
        "--prefill-tps", type=float, default=d.prefill_tps, help="prefill tokens/s per request"
    )
    parser.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=d.max_num_batched_tokens,
        help="token budget of one engine step (longer prompts prefill in chunks)",
    )
    parser.add_argument(
        "--scheduling-policy", choices=("fcfs", "priority"), default=d.scheduling_policy
    )
    parser.add_argument(
        "--text-only",
        nargs="?",
        const="vllm",
        default=None,
        choices=("vllm", "llama.cpp"),
        metavar="WORDS",
        help="refuse image input in vLLM's words (default) or llama.cpp's",
    )
    parser.add_argument(
        "--image-refusal-status",
        type=int,
        default=d.image_refusal_status,
        help="the status a text-only image refusal answers with (llama.cpp's own: 500)",
    )
    parser.add_argument(
        "--no-completions",
        action="store_true",
        help="no /v1/completions route: a chat-only server that is not vLLM",
    )
    parser.add_argument("--reply-tokens", type=int, default=d.reply_tokens)
    parser.add_argument("--startup-delay", type=float, default=d.startup_delay)
    parser.add_argument("--dead-exit-delay", type=float, default=d.dead_exit_delay)
    parser.add_argument(
        "--data-parallel-size", type=int, default=d.data_parallel_size, help="engine children"
    )
    parser.add_argument(
        "--tensor-parallel-size",
        type=int,
        default=d.tensor_parallel_size,
        help="worker children per engine (a stopped one stalls its engine)",
    )
    parser.add_argument(
        "--remote-rank",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="a worker rank in another pod that every engine step waits on (repeatable)",
    )
    parser.add_argument(
        "--api-server-count",
        type=int,
        default=d.api_server_count,
        help="API-server processes sharing the OpenAI socket, as vLLM's (server 0 owns the engine)",
    )
    parser.add_argument(
        "--dev-mode",
        action="store_true",
        help=f"register vLLM's dev routes (also: {DEV_MODE_ENV}=1 in the environment)",
    )
    parser.add_argument(
        "--reasoning-parser", default=None, metavar="NAME", help="chat replies think first"
    )
    parser.add_argument(
        "--reasoning-tokens", type=int, default=d.reasoning_tokens, help="thinking length"
    )
    parser.add_argument(
        "--reasoning-field",
        choices=REASONING_FIELDS,
        default=d.reasoning_field,
        help="the message field of the thinking (reasoning_content: vLLM before 0.11)",
    )
    parser.add_argument(
        "--thinking-ignores-template",
        action="store_true",
        help="chat replies think even when asked not to (a template without enable_thinking)",
    )
    parser.add_argument(
        "--no-chat-template",
        action="store_true",
        help="a base model without a chat template: every chat request answers vLLM's 400",
    )
    parser.add_argument(
        "--elastic-scale-seconds",
        type=float,
        default=d.elastic_scale_seconds,
        help="how long POST /scale_elastic_ep scales (every path answers 503 meanwhile)",
    )
    parser.add_argument(
        "--elastic-ep-release",
        choices=("0.32", "0.33"),
        default=d.elastic_ep_release,
        help="the elastic EP form: 0.33 (/health exempt, phases, retired ranks) or 0.32",
    )
    parser.add_argument(
        "--sleep-idle-ttl",
        type=float,
        default=None,
        metavar="SECONDS",
        help="sleep after this long without an inference request; a request wakes it",
    )
    parser.add_argument("--sleep-idle-level", type=int, choices=(1, 2), default=1)
    parser.add_argument(
        "--wake-seconds", type=float, default=d.wake_seconds, help="how long a wake takes"
    )
    parser.add_argument("--enable-fault-tolerance", action="store_true")
    parser.add_argument(
        "--fault-tolerance-config",
        default=None,
        metavar="JSON",
        help='{"engine_recovery_timeout_sec": 120}; turns fault tolerance on, as in vLLM',
    )
    parser.add_argument(
        "--fault-tolerance-release",
        choices=("0.33", "0.34"),
        default="0.33",
        help="0.33: requests queue while a rank is unhealthy; 0.34: 503 at once, /v1 routes",
    )
    parser.add_argument("--api-key", default=None, help="vLLM's --api-key: guards every /v1 path")
    parser.add_argument(
        "--release",
        choices=("0.32", "0.33", "0.34"),
        default=d.release,
        help="pauses and engine death as this release answers them (0.34: /checkpoint/* too)",
    )
    parser.add_argument(
        "--checkpoint-prepare-on-startup",
        action="store_true",
        help="0.34: start paused (a prepared checkpoint) until POST /checkpoint/restore",
    )
    parser.add_argument(
        "--exposition",
        choices=EXPOSITIONS,
        default=d.exposition,
        help="/metrics as this release line exposes it (counters: histograms dropped)",
    )
    parser.add_argument("--ready-file", default=None, help="write the ready JSON line here too")
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="NAME[:k=v,...]",
        help="fault active from the start (repeatable); duration=S is one of the keys",
    )
    return parser


def parse_args(argv: Sequence[str] | None = None) -> SimConfig:
    parser = build_parser()
    ns = parser.parse_args(argv)
    try:
        faults = tuple(FaultSpec.parse(text) for text in ns.fault)
    except FaultError as exc:
        parser.error(str(exc))
    if ns.max_num_seqs < 1 or ns.kv_cache_tokens < ns.block_size or ns.decode_tps <= 0:
        parser.error("max-num-seqs >= 1, kv-cache-tokens >= block-size and decode-tps > 0")
    if ns.data_parallel_size < 1 or ns.tensor_parallel_size < 1 or ns.api_server_count < 1:
        parser.error("data-parallel-size, tensor-parallel-size and api-server-count must be >= 1")
    for rank in ns.remote_rank:
        host, _, port = rank.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            parser.error(f"--remote-rank: HOST:PORT, not {rank!r}")
    if not 400 <= ns.image_refusal_status < 600:
        parser.error("--image-refusal-status: a 4xx or 5xx status")
    if ns.max_num_batched_tokens < 1 or ns.prefill_tps <= 0 or ns.reasoning_tokens < 0:
        parser.error("max-num-batched-tokens >= 1, prefill-tps > 0 and reasoning-tokens >= 0")
    recovery = 120.0
    if ns.fault_tolerance_config is not None:
        try:
            recovery = float(json.loads(ns.fault_tolerance_config)["engine_recovery_timeout_sec"])
        except (ValueError, TypeError, KeyError):
            parser.error("--fault-tolerance-config: a JSON object with engine_recovery_timeout_sec")
    fault_tolerant = ns.enable_fault_tolerance or ns.fault_tolerance_config is not None
    for spec in faults:
        try:
            check_fault_fits(spec, ns.kv_cache_tokens)
        except FaultError as exc:
            parser.error(str(exc))
    return SimConfig(
        host=ns.host,
        port=ns.port,
        control_host=ns.control_host,
        control_port=ns.control_port,
        model=ns.model,
        max_num_seqs=ns.max_num_seqs,
        max_num_queued_reqs=ns.max_num_queued_reqs,
        kv_cache_tokens=ns.kv_cache_tokens,
        block_size=ns.block_size,
        max_model_len=ns.max_model_len,
        decode_tps=ns.decode_tps,
        prefill_tps=ns.prefill_tps,
        max_num_batched_tokens=ns.max_num_batched_tokens,
        scheduling_policy=ns.scheduling_policy,
        text_only=ns.text_only is not None,
        image_refusal=ns.text_only or "vllm",
        image_refusal_status=ns.image_refusal_status,
        completions=not ns.no_completions,
        reply_tokens=ns.reply_tokens,
        startup_delay=ns.startup_delay,
        dead_exit_delay=ns.dead_exit_delay,
        ready_file=ns.ready_file,
        data_parallel_size=ns.data_parallel_size,
        tensor_parallel_size=ns.tensor_parallel_size,
        remote_ranks=tuple(ns.remote_rank),
        api_server_count=ns.api_server_count,
        dev_mode=ns.dev_mode or dev_mode_from_env(),
        reasoning_parser=ns.reasoning_parser,
        reasoning_tokens=ns.reasoning_tokens,
        reasoning_field=ns.reasoning_field,
        thinking_ignores_template=ns.thinking_ignores_template,
        no_chat_template=ns.no_chat_template,
        elastic_scale_seconds=ns.elastic_scale_seconds,
        elastic_ep_release=ns.elastic_ep_release,
        sleep_idle_ttl=ns.sleep_idle_ttl,
        sleep_idle_level=ns.sleep_idle_level,
        wake_seconds=ns.wake_seconds,
        fault_tolerance=ns.fault_tolerance_release if fault_tolerant else None,
        engine_recovery_timeout=recovery,
        api_key=ns.api_key,
        release="0.34" if ns.checkpoint_prepare_on_startup else ns.release,
        faults=faults + (CHECKPOINT_START,) * ns.checkpoint_prepare_on_startup,
        exposition=ns.exposition,
    )


def check_fault_fits(spec: FaultSpec, kv_cache_tokens: int) -> None:
    """Refuse a ``long_prefill`` whose request could never fit in the KV cache."""
    if spec.fault is not Fault.LONG_PREFILL:
        return
    needed = int(spec.params["tokens"]) + int(spec.params["max_tokens"])
    if needed > kv_cache_tokens:
        raise FaultError(
            f"long_prefill needs {needed} tokens of KV cache (tokens + max_tokens); "
            f"the simulator has {kv_cache_tokens}: start it with --kv-cache-tokens >= {needed}"
        )
