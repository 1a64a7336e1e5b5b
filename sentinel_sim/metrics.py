"""vLLM's Prometheus metrics, kept in the API process and fed only by the engine's steps.

Names, types, label names and buckets follow vLLM 0.32's ``PrometheusStatLogger``:
labels ``model_name`` and ``engine`` (``"0"``), counters exposed with a
``_total`` suffix, ``request_success`` split by ``finished_reason``, and
``num_requests_waiting_by_reason`` split by ``reason`` (``capacity``,
``deferred``). Because only :meth:`VllmMetrics.record` changes them, and it
runs only when the engine publishes a step, a stopped or hung engine leaves
``/metrics`` answering with frozen values, as on real vLLM. Client aborts are
not finished requests: they never reach ``request_success``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from sentinel_sim.scheduler import EngineStats

LABELS = ("model_name", "engine")
FINISH_REASONS = ("stop", "length", "abort")

_TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
_ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
_REQUEST_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
    40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
_ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def _token_buckets(max_value: int) -> list[float]:
    """vLLM's 1-2-5 series up to ``max_model_len``."""
    buckets: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return buckets
            buckets.append(float(value))
        exponent += 1


class VllmMetrics:
    """One registry holding vLLM's series for a single engine (``engine="0"``)."""

    def __init__(self, model_name: str, *, max_model_len: int, kv_cache_tokens: int) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        values = (model_name, "0")
        self.running = Gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            LABELS,
            registry=r,
        ).labels(*values)
        self.waiting = Gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", LABELS,
            registry=r,
        ).labels(*values)  # fmt: skip
        by_reason = Gauge(
            "vllm:num_requests_waiting_by_reason",
            "Number of requests waiting to be processed, by reason.",
            (*LABELS, "reason"),
            registry=r,
        )
        self.waiting_capacity = by_reason.labels(*values, "capacity")
        self.waiting_deferred = by_reason.labels(*values, "deferred")
        self.kv_usage = Gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            LABELS,
            registry=r,
        ).labels(*values)
        self.preemptions = Counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.", LABELS,
            registry=r,
        ).labels(*values)  # fmt: skip
        self.prompt_tokens = Counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", LABELS, registry=r
        ).labels(*values)
        self.generation_tokens = Counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", LABELS, registry=r
        ).labels(*values)
        success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            (*LABELS, "finished_reason"),
            registry=r,
        )
        self.success = {reason: success.labels(*values, reason) for reason in FINISH_REASONS}
        self.iteration_tokens = Histogram(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            LABELS,
            buckets=_ITERATION_BUCKETS,
            registry=r,
        ).labels(*values)
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            LABELS,
            buckets=_TTFT_BUCKETS,
            registry=r,
        ).labels(*values)
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            LABELS,
            buckets=_ITL_BUCKETS,
            registry=r,
        ).labels(*values)
        self.tpot = Histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            LABELS,
            buckets=_ITL_BUCKETS,
            registry=r,
        ).labels(*values)

        def request_histogram(name: str, doc: str) -> Histogram:
            return Histogram(name, doc, LABELS, buckets=_REQUEST_BUCKETS, registry=r)

        self.e2e = request_histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds."
        ).labels(*values)
        self.queue_time = request_histogram(
            "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase."
        ).labels(*values)
        self.inference_time = request_histogram(
            "vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase."
        ).labels(*values)
        self.prefill_time = request_histogram(
            "vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase."
        ).labels(*values)
        self.decode_time = request_histogram(
            "vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase."
        ).labels(*values)
        token_buckets = _token_buckets(max_model_len)
        self.request_prompt_tokens = Histogram(
            "vllm:request_prompt_tokens",
            "Number of prefill tokens processed.",
            LABELS,
            buckets=token_buckets,
            registry=r,
        ).labels(*values)
        self.request_generation_tokens = Histogram(
            "vllm:request_generation_tokens",
            "Number of generation tokens processed.",
            LABELS,
            buckets=token_buckets,
            registry=r,
        ).labels(*values)
        self.request_max_tokens = Histogram(
            "vllm:request_params_max_tokens",
            "Histogram of the max_tokens request parameter.",
            LABELS,
            buckets=token_buckets,
            registry=r,
        ).labels(*values)
        Counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in queried tokens.",
            LABELS, registry=r,
        ).labels(*values)  # fmt: skip
        Counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
            LABELS, registry=r,
        ).labels(*values)  # fmt: skip
        Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            ("block_size", "engine", "kv_cache_size_tokens"),
            registry=r,
        ).labels("16", "0", str(kv_cache_tokens)).set(1)

    def record(self, stats: EngineStats, had_outputs: bool) -> None:
        self.running.set(stats.running)
        self.waiting.set(stats.waiting)
        self.waiting_capacity.set(stats.waiting - stats.waiting_deferred)
        self.waiting_deferred.set(stats.waiting_deferred)
        self.kv_usage.set(stats.kv_usage)
        if stats.preemptions:
            self.preemptions.inc(stats.preemptions)
        if not had_outputs and not stats.iteration_tokens:
            return  # a step that processed no token (vLLM records no iteration then)
        self.prompt_tokens.inc(stats.prompt_tokens)
        self.generation_tokens.inc(stats.generation_tokens)
        self.iteration_tokens.observe(stats.iteration_tokens)
        for ttft in stats.ttfts:
            self.ttft.observe(ttft)
        for itl in stats.itls:
            self.itl.observe(itl)
        for done in stats.finished:
            self.success[done.reason].inc()
            self.e2e.observe(done.e2e)
            self.queue_time.observe(done.queued)
            self.prefill_time.observe(done.prefill)
            self.decode_time.observe(done.decode)
            self.inference_time.observe(done.inference)
            self.request_prompt_tokens.observe(done.prompt_tokens)
            self.request_generation_tokens.observe(done.generation_tokens)
            self.request_max_tokens.observe(done.max_tokens)
            if done.generation_tokens > 1:
                self.tpot.observe(done.decode / (done.generation_tokens - 1))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
