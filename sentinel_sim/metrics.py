"""vLLM's Prometheus metrics, kept in the API process and fed only by the engine's steps.

Names, types, label names and buckets follow vLLM 0.32's ``PrometheusStatLogger``:
labels ``model_name`` and ``engine`` (``"0"``, and ``"0"`` to ``"N-1"`` under
``--data-parallel-size N``, each engine's series fed by its own steps), counters exposed with a
``_total`` suffix, ``request_success`` split by ``finished_reason``, and
``num_requests_waiting_by_reason`` split by ``reason`` (``capacity``,
``deferred``). Because only :meth:`VllmMetrics.record` changes them, and it
runs only when the engine publishes a step, a stopped or hung engine leaves
``/metrics`` answering with frozen values, as on real vLLM. Client aborts are
not finished requests: they never reach ``request_success``; requests the
engine itself aborts (a pause or sleep in ``abort`` mode) are, with
``finished_reason="abort"``, and leave the scheduler gauges as they were.

Two families live outside the engine's steps, set by the API process as
vLLM's front end sets them: ``vllm:engine_sleep_state`` (labels
``model_name``, ``engine``, ``sleep_state`` = ``awake`` | ``weights_offloaded``
| ``discard_all``; awake 1 until a sleep) and, from the first weight-transfer
operation on, ``vllm:rl_weight_update_operations_in_flight`` (gauge) and
``vllm:rl_weight_update_operation_duration_seconds`` (histogram), labelled by
``operation`` only, as vLLM 0.32's ``entrypoints/rl/online/metrics.py``
creates them lazily in the default registry. Under the ``remote_kv`` fault
with ``connector=nixl`` the NIXL connector's families appear from its first
step, as ``NixlPromMetrics`` (``kv_connector/v1/nixl/stats.py``) creates them
with the connector: ``vllm:nixl_xfer_time_seconds`` (one observation per
transfer landed) and the counters ``vllm:nixl_num_failed_transfers``,
``vllm:nixl_num_failed_notifications`` and ``vllm:nixl_num_kv_expired_reqs``
(the last tracked on the prefill side), labelled like the engine's series.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from sentinel_sim.expositions import DEFAULT_EXPOSITION, reshape
from sentinel_sim.scheduler import EngineStats

LABELS = ("model_name", "engine")
FINISH_REASONS = ("stop", "length", "abort")

# NixlPromMetrics' transfer-time buckets (its list less the first, 0.001).
_NIXL_XFER_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0)
_NIXL_COUNTERS = (
    ("vllm:nixl_num_failed_transfers", "Number of failed NIXL KV Cache transfers."),
    ("vllm:nixl_num_failed_notifications", "Number of failed NIXL KV Cache notifications."),
    ("vllm:nixl_num_kv_expired_reqs", "Number of requests that had their KV expire."),
)
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
_WEIGHT_OPERATION_BUCKETS = (0.01, 0.1, 1, 10, 30, 60, 120, 300, 600)
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
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


class _Families:
    """vLLM's metric families, declared once; each engine takes its own labelled children."""

    def __init__(self, r: CollectorRegistry, max_model_len: int) -> None:
        self.running = Gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.",
            LABELS, registry=r,
        )  # fmt: skip
        self.waiting = Gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", LABELS,
            registry=r,
        )  # fmt: skip
        self.by_reason = Gauge(
            "vllm:num_requests_waiting_by_reason",
            "Number of requests waiting to be processed, by reason.",
            (*LABELS, "reason"),
            registry=r,
        )
        self.kv_usage = Gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", LABELS,
            registry=r,
        )  # fmt: skip
        self.preemptions = Counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.", LABELS,
            registry=r,
        )  # fmt: skip
        self.prompt_tokens = Counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", LABELS, registry=r
        )
        self.generation_tokens = Counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", LABELS, registry=r
        )
        self.success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            (*LABELS, "finished_reason"),
            registry=r,
        )

        def histogram(name: str, doc: str, buckets: Sequence[float]) -> Histogram:
            return Histogram(name, doc, LABELS, buckets=buckets, registry=r)

        self.iteration_tokens = histogram(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            _ITERATION_BUCKETS,
        )
        self.ttft = histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            _TTFT_BUCKETS,
        )
        self.itl = histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            _ITL_BUCKETS,
        )
        self.tpot = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            _ITL_BUCKETS,
        )
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            _REQUEST_BUCKETS,
        )
        self.queue_time = histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase.",
            _REQUEST_BUCKETS,
        )
        self.inference_time = histogram(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase.",
            _REQUEST_BUCKETS,
        )
        self.prefill_time = histogram(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase.",
            _REQUEST_BUCKETS,
        )
        self.decode_time = histogram(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase.",
            _REQUEST_BUCKETS,
        )
        token_buckets = _token_buckets(max_model_len)
        self.request_prompt_tokens = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", token_buckets
        )
        self.request_generation_tokens = histogram(
            "vllm:request_generation_tokens",
            "Number of generation tokens processed.",
            token_buckets,
        )
        self.request_max_tokens = histogram(
            "vllm:request_params_max_tokens",
            "Histogram of the max_tokens request parameter.",
            token_buckets,
        )
        self.prefix_queries = Counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in queried tokens.",
            LABELS, registry=r,
        )  # fmt: skip
        self.prefix_hits = Counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
            LABELS, registry=r,
        )  # fmt: skip
        # Counted in the API process once an image's preprocessing finished
        # (vLLM's renderer updates its cache stats after the processor ran).
        self.mm_queries = Counter(
            "vllm:mm_cache_queries", "Multi-modal cache queries, in terms of number of items.",
            LABELS, registry=r,
        )  # fmt: skip
        self.mm_hits = Counter(
            "vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of items.",
            LABELS, registry=r,
        )  # fmt: skip
        self.sleep_state = Gauge(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine "
            "is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means "
            "sleep level 2.",
            (*LABELS, "sleep_state"),
            registry=r,
        )
        self.cache_config = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            ("block_size", "engine", "kv_cache_size_tokens"),
            registry=r,
        )


class EngineSeries:
    """One engine's labelled series (``engine="<index>"``), changed only by its steps."""

    def __init__(self, f: _Families, model_name: str, index: int, kv_cache_tokens: int) -> None:
        values = (model_name, str(index))
        self.running = f.running.labels(*values)
        self.waiting = f.waiting.labels(*values)
        self.waiting_capacity = f.by_reason.labels(*values, "capacity")
        self.waiting_deferred = f.by_reason.labels(*values, "deferred")
        self.kv_usage = f.kv_usage.labels(*values)
        self.preemptions = f.preemptions.labels(*values)
        self.prompt_tokens = f.prompt_tokens.labels(*values)
        self.generation_tokens = f.generation_tokens.labels(*values)
        self.success = {reason: f.success.labels(*values, reason) for reason in FINISH_REASONS}
        self.iteration_tokens = f.iteration_tokens.labels(*values)
        self.ttft = f.ttft.labels(*values)
        self.itl = f.itl.labels(*values)
        self.tpot = f.tpot.labels(*values)
        self.e2e = f.e2e.labels(*values)
        self.queue_time = f.queue_time.labels(*values)
        self.inference_time = f.inference_time.labels(*values)
        self.prefill_time = f.prefill_time.labels(*values)
        self.decode_time = f.decode_time.labels(*values)
        self.request_prompt_tokens = f.request_prompt_tokens.labels(*values)
        self.request_generation_tokens = f.request_generation_tokens.labels(*values)
        self.request_max_tokens = f.request_max_tokens.labels(*values)
        f.prefix_queries.labels(*values)
        f.prefix_hits.labels(*values)
        self.mm_queries = f.mm_queries.labels(*values)
        f.mm_hits.labels(*values)
        f.cache_config.labels("16", str(index), str(kv_cache_tokens)).set(1)
        self.sleep_state = {state: f.sleep_state.labels(*values, state) for state in SLEEP_STATES}
        self.record_sleep_state(0, 0)

    def record_sleep_state(self, sleep: int, level: int) -> None:
        """vLLM's ``record_sleep_state``: awake 1, or 0 with the level's state set to 1."""
        awake, offloaded, discarded = 1, 0, 0
        if sleep:
            awake = 0
            offloaded = 1 if level == 1 else 0
            discarded = 1 if level == 2 else 0
        self.sleep_state["discard_all"].set(discarded)
        self.sleep_state["weights_offloaded"].set(offloaded)
        self.sleep_state["awake"].set(awake)

    def record(self, stats: EngineStats, had_outputs: bool) -> None:
        if stats.scheduler:
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


# vllm/v1/metrics/loggers.py (0.32): the reasons an admission is refused.
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")
# vllm/exceptions.py QueueOverflowError: HTTP 503, these words.
QUEUE_FULL = (
    "The engine is currently busy and cannot accept new requests. "
    "Please try again later or on a different instance."
)


class VllmMetrics:
    """One registry holding vLLM's series for each engine (``engine="0"`` ... ``"N-1"``)."""

    def __init__(
        self, model_name: str, *, max_model_len: int, kv_cache_tokens: int, engines: int = 1
    ) -> None:
        self.registry = CollectorRegistry()
        families = _Families(self.registry, max_model_len)
        self.engines = [
            EngineSeries(families, model_name, index, kv_cache_tokens) for index in range(engines)
        ]
        self._weight_in_flight: Gauge | None = None
        self._weight_duration: Histogram | None = None
        self._model_name = model_name
        self._nixl_xfer: Histogram | None = None
        # vLLM's frontend admission counter, both reasons present from the start.
        self.admission_rejections = Counter(
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            ("model_name", "reason"),
            registry=self.registry,
        )
        for reason in ADMISSION_REASONS:
            self.admission_rejections.labels(model_name, reason)

    def record(self, stats: EngineStats, had_outputs: bool, engine: int = 0) -> None:
        if stats.kv_connector == "nixl":
            xfer = self._nixl_families()
            for seconds in stats.kv_landed:
                xfer.labels(self._model_name, str(engine)).observe(seconds)
        self.engines[engine].record(stats, had_outputs)

    def _nixl_families(self) -> Histogram:
        """The NIXL connector's series, every engine's at 0, from the connector's start."""
        if self._nixl_xfer is None:
            self._nixl_xfer = Histogram(
                "vllm:nixl_xfer_time_seconds",
                "Histogram of transfer duration for NIXL KV Cache transfers.",
                LABELS,
                buckets=_NIXL_XFER_BUCKETS,
                registry=self.registry,
            )
            counters = [Counter(n, d, LABELS, registry=self.registry) for n, d in _NIXL_COUNTERS]
            for index in range(len(self.engines)):
                values = (self._model_name, str(index))
                self._nixl_xfer.labels(*values)
                for counter in counters:
                    counter.labels(*values)
        return self._nixl_xfer

    def images_preprocessed(self, count: int) -> None:
        """Images through preprocessing: vLLM records them against the first engine."""
        self.engines[0].mm_queries.inc(count)

    def record_sleep_state(self, sleep: int, level: int, engine: int | None = None) -> None:
        """Set the sleep gauge of one engine, or of every engine (vLLM sets them all)."""
        for index, series in enumerate(self.engines):
            if engine is None or index == engine:
                series.record_sleep_state(sleep, level)

    def _weight_families(self) -> tuple[Gauge, Histogram]:
        """Created on first use, as vLLM creates them at the first weight operation."""
        if self._weight_in_flight is None or self._weight_duration is None:
            self._weight_duration = Histogram(
                "vllm:rl_weight_update_operation_duration_seconds",
                "Duration of one weight-transfer operation.",
                ("operation",),
                buckets=_WEIGHT_OPERATION_BUCKETS,
                registry=self.registry,
            )
            self._weight_in_flight = Gauge(
                "vllm:rl_weight_update_operations_in_flight",
                "Weight-transfer operations currently awaited.",
                ("operation",),
                registry=self.registry,
            )
        return self._weight_in_flight, self._weight_duration

    def weight_operation_started(self, operation: str) -> None:
        self._weight_families()[0].labels(operation).inc()

    def weight_operation_ended(self, operation: str, seconds: float) -> None:
        in_flight, duration = self._weight_families()
        in_flight.labels(operation).dec()
        duration.labels(operation).observe(seconds)

    def exposition(self, form: str = DEFAULT_EXPOSITION) -> bytes:
        """The registry as the release line ``form`` exposes it (:data:`EXPOSITIONS`)."""
        text = generate_latest(self.registry)
        return text if form == DEFAULT_EXPOSITION else reshape(text, form)
