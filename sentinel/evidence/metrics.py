"""vLLM ``/metrics``: the progress evidence that tells a busy server from a hung one.

Owns the scrape of the inference server's Prometheus endpoint and its reduction
to the few signals the verdict compares over time (work, first-token,
generation-length and path counters; running, waiting, KV-cache, sleep and
weight-update gauges), matched on *sample* names with prometheus-client's
parser: ``vllm:iteration_tokens_total_sum`` is the tokens engine steps
processed (never ``_count``: a step that processed no token is no work). A
signal the server does not expose is absent from the sample (no evidence),
never zero.

The target may be hostile or merely huge, so the scrape is bounded: one total
deadline from connect to last byte, caps on decoded bytes, lines, one line's
length and the series kept; the body is read incrementally and only the kept
lines are held. Every cap that is hit is a :class:`ScrapeError`, never a crash.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sentinel.evidence.exposition import ExpositionReader
from sentinel.evidence.exposition import ScrapeError as ScrapeError  # re-exported: the scrape's
from sentinel.evidence.exposition import ScrapeLimits as ScrapeLimits  # callers import them here
from sentinel.evidence.failure import EvidenceFailure, classify_transport_error
from sentinel.transport import BodyDecodingError, BodyTooLarge, iter_capped

# Sample names as vLLM 0.32 exposes them (vllm/v1/metrics/loggers.py,
# PrometheusStatLogger). Every one is labelled by model_name and engine; the
# sample sums over label sets so data-parallel engines add up, and keeps each
# engine's own counters apart as well (one stuck engine among several).
COUNTER_SAMPLES: Mapping[str, str] = MappingProxyType(
    {
        "vllm:generation_tokens_total": "generation_tokens",
        "vllm:prompt_tokens_total": "prompt_tokens",
        "vllm:iteration_tokens_total_sum": "engine_tokens",
        "vllm:num_preemptions_total": "preemptions",
        # One observation per request that got its first token (prefill
        # done), so generated tokens minus this count are the tokens decoded.
        "vllm:time_to_first_token_seconds_count": "first_tokens",
        # Finished requests, and of them those that generated at most one token
        # (the le="1.0" bucket, read below): decode completions are the rest,
        # which one-token requests (classifiers, scorers) cannot fake.
        "vllm:request_generation_tokens_count": "finished",
        # Images through preprocessing (counted once the processor ran): the
        # multimodal path's own traffic. Never progress of the engine.
        "vllm:mm_cache_queries_total": "mm_queries",
        # NaN-logit requests, finished weight transfers: sentinel.fingerprint.book's.
        "vllm:corrupted_requests_total": "corrupted_requests",
        "vllm:rl_weight_update_operation_duration_seconds_count": "weight_operations",
        # The NIXL connector's (kv_connector/v1/nixl/stats.py, NixlPromMetrics): one
        # observation per transfer that completed, and the failed ones. A decode node
        # pulls its KV, so its own transfers land here (sentinel.record.kv_transfer).
        "vllm:nixl_xfer_time_seconds_count": "kv_transfers",
        "vllm:nixl_num_failed_transfers_total": "kv_failed_transfers",
    }
)
GAUGE_SAMPLES: Mapping[str, str] = MappingProxyType(
    {
        "vllm:num_requests_running": "running",
        "vllm:num_requests_waiting": "waiting",
        "vllm:kv_cache_usage_perc": "kv_cache_usage",
        # RL weight synchronisation holding requests while weights load.
        "vllm:rl_weight_update_operations_in_flight": "weight_updates",
    }
)
COMPLETIONS_SAMPLE = "vllm:request_success_total"
# Sleep mode, one series per ``sleep_state`` label ("awake", "weights_offloaded",
# "discard_all"), 1 for the current one; kept as gauges ``sleep_<state>``.
# Releases before late 2025 do not export it: absent is no evidence.
SLEEP_SAMPLE = "vllm:engine_sleep_state"
SLEEP_LABEL = "sleep_state"
SLEEP_PREFIX = "sleep_"
GENERATION_BUCKET = "vllm:request_generation_tokens_bucket"
WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"
# Prompt tokens by where their KV came from; ``external_kv_transfer`` is a KV
# connector's (NIXL, Mooncake, ...): counted once a transferred request runs.
BY_SOURCE = "vllm:prompt_tokens_by_source_total"
EXTERNAL_KV_SOURCE = "external_kv_transfer"
ENGINE_LABEL = "engine"  # the data-parallel engine index on every vLLM sample
# Finished reasons that prove the engine produced an answer. ``abort`` is a
# client (or sentinel) giving up, ``error`` is a failure: neither is progress.
PROGRESS_FINISH_REASONS = frozenset({"stop", "length"})

PROGRESS_COUNTERS = (*COUNTER_SAMPLES.values(), "completions")


@dataclass(frozen=True, slots=True)
class MetricsSample:
    """The progress signals of one scrape, at the scrape's monotonic time.

    ``counters`` and ``gauges`` hold only signals that were present; a missing
    key means the server did not expose it. ``engines`` holds the counters
    again per value of vLLM's ``engine`` label (data-parallel engines, ``"0"``
    for a single engine); samples without that label appear only in the sums.
    """

    at: float
    counters: Mapping[str, float] = field(default_factory=dict)
    gauges: Mapping[str, float] = field(default_factory=dict)
    engines: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # The gauges again per ``engine`` label (a long prefill on one engine).
    engine_gauges: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # When the scrape began (None: ``at``): the server read its gauges in between.
    read_from: float | None = None


_WANTED = (
    *COUNTER_SAMPLES,
    *GAUGE_SAMPLES,
    COMPLETIONS_SAMPLE,
    SLEEP_SAMPLE,
    GENERATION_BUCKET,
    WAITING_BY_REASON,
    BY_SOURCE,
)
_KEPT = frozenset(_WANTED)


def relevant_lines(text: str) -> str:
    """Only the sample lines of the signals sentinel reads.

    A vLLM exposition runs to hundreds of lines (histogram buckets above all);
    parsing all of it every scrape costs the event loop milliseconds that
    ``/livez`` cannot spare. The kept lines are parsed by prometheus-client's
    parser as usual; without their ``# TYPE`` lines the samples keep their
    exposed names, which is what the signals are matched on.
    """
    kept = []
    for line in text.splitlines():
        if line.startswith(_WANTED):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in _KEPT:
                kept.append(line)
    return "\n".join(kept) + "\n"


def parse_vllm_metrics(text: str, at: float) -> MetricsSample:
    """Reduce a Prometheus text exposition to a :class:`MetricsSample`.

    Raises ``ValueError`` when the text is not a valid exposition.
    """
    counters, gauges = _Sums(), _Sums()
    count, gauge = counters.add, gauges.add

    # Nothing of vLLM's in it: parse it whole, so garbage is still reported.
    wanted = relevant_lines(text)
    for family in text_string_to_metric_families(wanted if wanted.strip() else text):
        for sample in family.samples:
            value = float(sample.value)
            if math.isnan(value):
                continue
            if sample.name in COUNTER_SAMPLES:
                count(COUNTER_SAMPLES[sample.name], value, sample.labels)
            elif sample.name in GAUGE_SAMPLES:
                gauge(GAUGE_SAMPLES[sample.name], value, sample.labels)
            elif sample.name == GENERATION_BUCKET:
                if _bucket_is_one(sample.labels.get("le", "")):
                    count("finished_one_token", value, sample.labels)
            elif sample.name == WAITING_BY_REASON:
                reason = sample.labels.get("reason", "")
                if reason in ("capacity", "deferred"):
                    gauge("waiting_" + reason, value, sample.labels)
            elif sample.name == BY_SOURCE:
                if sample.labels.get("source") == EXTERNAL_KV_SOURCE:
                    count("kv_external_tokens", value, sample.labels)
            elif sample.name == SLEEP_SAMPLE:
                state = sample.labels.get(SLEEP_LABEL, "")
                if state.isidentifier() and len(state) <= 32:
                    gauge(SLEEP_PREFIX + state, value, sample.labels)
            elif sample.name == COMPLETIONS_SAMPLE:
                # The series exists even when no request of that reason has
                # finished yet, so presence of any reason makes the signal present.
                reason = sample.labels.get("finished_reason", "")
                count(
                    "completions",
                    value if reason in PROGRESS_FINISH_REASONS else 0.0,
                    sample.labels,
                )
    return MetricsSample(
        at=at,
        counters=MappingProxyType(counters.total),
        gauges=MappingProxyType(gauges.total),
        engines=counters.frozen_by_engine(),
        engine_gauges=gauges.frozen_by_engine(),
    )


class _Sums:
    """One kind of series (counters or gauges) summed per key: over all engines, and per engine.

    A sample labelled with an engine counts in both sums; one without counts
    in the total alone.
    """

    def __init__(self) -> None:
        self.total: dict[str, float] = {}
        self.by_engine: dict[str, dict[str, float]] = {}

    def add(self, key: str, value: float, labels: Mapping[str, str]) -> None:
        self.total[key] = self.total.get(key, 0.0) + value
        engine = labels.get(ENGINE_LABEL)
        if engine is not None:
            own = self.by_engine.setdefault(engine, {})
            own[key] = own.get(key, 0.0) + value

    def frozen_by_engine(self) -> Mapping[str, Mapping[str, float]]:
        return MappingProxyType({k: MappingProxyType(v) for k, v in self.by_engine.items()})


def _bucket_is_one(le: str) -> bool:
    try:
        return float(le) == 1.0
    except ValueError:
        return False


class MetricsScraper:
    """Scrapes ``{base_url}/metrics`` with the client it is given.

    ``timeout`` is the total deadline of one scrape, connect to last byte
    (httpx's own timeouts are per read, so a body trickled a byte at a time
    would never trip them). The raw text of the last answered scrape is kept,
    capped, for diagnostics bundles.
    """

    def __init__(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        clock: Callable[[], float],
        *,
        timeout: float = 10.0,
        path: str = "/metrics",
        limits: ScrapeLimits | None = None,
    ) -> None:
        self._client = client
        self._url = base_url.rstrip("/") + path
        self._clock = clock
        self._timeout = timeout
        self._limits = limits or ScrapeLimits()
        self.last_text: str | None = None
        self.last_at: float | None = None

    @property
    def url(self) -> str:
        return self._url

    async def scrape(self) -> MetricsSample:
        """Fetch and parse one exposition; raise :class:`ScrapeError` on failure."""
        started = self._clock()
        try:
            async with asyncio.timeout(self._timeout):
                kept, text, status = await self._read()
        except ScrapeError:
            raise
        except TimeoutError:
            raise ScrapeError(
                EvidenceFailure.TIMEOUT,
                f"GET {self._url} not complete within {self._timeout:g}s",
            ) from None
        except (httpx.HTTPError, BodyTooLarge, BodyDecodingError) as exc:
            raise ScrapeError(
                classify_transport_error(exc), f"{type(exc).__name__}: {exc}"
            ) from None
        at = self._clock()
        # Kept even when it does not parse: a broken exposition is evidence too.
        self.last_text = text
        self.last_at = at
        # Nothing of vLLM's kept: the (capped) text is parsed whole, so garbage
        # is still reported as such rather than read as a server without metrics.
        source = kept if kept.strip() or len(text) >= self._limits.keep_bytes else text
        try:
            if source.count("\n") > self._limits.inline_parse_lines:
                sample = await asyncio.to_thread(parse_vllm_metrics, source, at)
            else:
                sample = parse_vllm_metrics(source, at)
            return replace(sample, read_from=started)
        except (ValueError, IndexError, KeyError) as exc:
            # The parser reports malformed lines as ValueError; the others guard
            # against its edge cases so garbage never escapes as a crash.
            raise ScrapeError(EvidenceFailure.BAD_BODY, str(exc), status) from None

    async def _read(self) -> tuple[str, str, int]:
        # Only gzip is offered: its inflation is bounded by iter_capped.
        headers = {"Accept-Encoding": "gzip"}
        async with self._client.stream(
            "GET", self._url, headers=headers, timeout=self._timeout, follow_redirects=False
        ) as response:
            if not response.is_success:
                raise ScrapeError(
                    EvidenceFailure.HTTP_STATUS,
                    f"GET {self._url} answered {response.status_code}",
                    status=response.status_code,
                    body=await _head(response),
                )
            reader = ExpositionReader(self._limits, _WANTED)
            async for chunk in iter_capped(response, self._limits.max_bytes):
                reader.feed(chunk)
            kept, text = reader.finish()
            return kept, text, response.status_code


ERROR_HEAD_BYTES = 1024  # of a non-2xx answer's body: enough for any JSON error vLLM sends
ERROR_HEAD_SECONDS = 1.0  # to read it in


async def _head(response: httpx.Response) -> str:
    """The first :data:`ERROR_HEAD_BYTES` of an error answer's body ("" if unreadable).

    Read within the scrape's deadline and inflated a slice at a time
    (:func:`~sentinel.transport.iter_capped`); a body that trickles, is endless
    or breaks off leaves what arrived, since only its first sentence is ever read.
    """
    head = bytearray()
    try:
        async with asyncio.timeout(ERROR_HEAD_SECONDS):  # the status still counts if it trickles
            async for chunk in iter_capped(response, 64 * ERROR_HEAD_BYTES):
                head.extend(chunk)
                if len(head) >= ERROR_HEAD_BYTES:
                    break
    except (TimeoutError, httpx.HTTPError, BodyTooLarge, BodyDecodingError):
        pass
    return bytes(head[:ERROR_HEAD_BYTES]).decode("utf-8", "replace")
