"""vLLM ``/metrics``: the progress evidence that tells a busy server from a hung one.

Owns the scrape of the inference server's Prometheus endpoint and its reduction
to the handful of signals the verdict compares over time (token, completion,
engine-step and preemption counters; running, waiting and KV-cache gauges).

Parsing is done by prometheus-client's parser, never by hand. Signals are
matched on *sample* names, which is what a server exposes: the parser drops
``_total`` from a counter family's name but keeps it on the samples, and
vLLM's histogram ``vllm:iteration_tokens_total`` exposes
``vllm:iteration_tokens_total_count``. A signal the server does not expose is
absent from the sample (no evidence), never zero: a renamed or disabled metric
must not read as "flat".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sentinel.evidence.failure import EvidenceFailure, classify_transport_error

# Sample names as vLLM 0.32 exposes them (vllm/v1/metrics/loggers.py,
# PrometheusStatLogger). Every one is labelled by model_name and engine; the
# sample sums over label sets so data-parallel engines add up.
COUNTER_SAMPLES: Mapping[str, str] = MappingProxyType(
    {
        "vllm:generation_tokens_total": "generation_tokens",
        "vllm:prompt_tokens_total": "prompt_tokens",
        "vllm:iteration_tokens_total_count": "engine_steps",
        "vllm:num_preemptions_total": "preemptions",
    }
)
GAUGE_SAMPLES: Mapping[str, str] = MappingProxyType(
    {
        "vllm:num_requests_running": "running",
        "vllm:num_requests_waiting": "waiting",
        "vllm:kv_cache_usage_perc": "kv_cache_usage",
    }
)
COMPLETIONS_SAMPLE = "vllm:request_success_total"
# Finished reasons that prove the engine produced an answer. ``abort`` is a
# client (or sentinel) giving up, ``error`` is a failure: neither is progress.
PROGRESS_FINISH_REASONS = frozenset({"stop", "length"})

PROGRESS_COUNTERS = (*COUNTER_SAMPLES.values(), "completions")
PROGRESS_GAUGES = tuple(GAUGE_SAMPLES.values())


@dataclass(frozen=True, slots=True)
class MetricsSample:
    """The progress signals of one scrape, at the scrape's monotonic time.

    ``counters`` and ``gauges`` hold only signals that were present; a missing
    key means the server did not expose it.
    """

    at: float
    counters: Mapping[str, float] = field(default_factory=dict)
    gauges: Mapping[str, float] = field(default_factory=dict)


_WANTED = (*COUNTER_SAMPLES, *GAUGE_SAMPLES, COMPLETIONS_SAMPLE)


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
            if name in COUNTER_SAMPLES or name in GAUGE_SAMPLES or name == COMPLETIONS_SAMPLE:
                kept.append(line)
    return "\n".join(kept) + "\n"


def parse_vllm_metrics(text: str, at: float) -> MetricsSample:
    """Reduce a Prometheus text exposition to a :class:`MetricsSample`.

    Raises ``ValueError`` when the text is not a valid exposition.
    """
    counters: dict[str, float] = {}
    gauges: dict[str, float] = {}
    # Nothing of vLLM's in it: parse it whole, so garbage is still reported.
    wanted = relevant_lines(text)
    for family in text_string_to_metric_families(wanted if wanted.strip() else text):
        for sample in family.samples:
            value = float(sample.value)
            if math.isnan(value):
                continue
            if sample.name in COUNTER_SAMPLES:
                key = COUNTER_SAMPLES[sample.name]
                counters[key] = counters.get(key, 0.0) + value
            elif sample.name in GAUGE_SAMPLES:
                key = GAUGE_SAMPLES[sample.name]
                gauges[key] = gauges.get(key, 0.0) + value
            elif sample.name == COMPLETIONS_SAMPLE:
                # The series exists even when no request of that reason has
                # finished yet, so presence of any reason makes the signal present.
                reason = sample.labels.get("finished_reason", "")
                counters["completions"] = counters.get("completions", 0.0) + (
                    value if reason in PROGRESS_FINISH_REASONS else 0.0
                )
    return MetricsSample(
        at=at, counters=MappingProxyType(counters), gauges=MappingProxyType(gauges)
    )


class ScrapeError(Exception):
    """A scrape that produced no sample, and why.

    The scraper does not interpret the failure; the caller does (a refused
    connection means the server restarted or is gone).
    """

    def __init__(self, reason: EvidenceFailure, detail: str, status: int | None = None) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.status = status


class MetricsScraper:
    """Scrapes ``{base_url}/metrics`` with the client it is given.

    The client's timeout applies unless ``timeout`` is given. The raw text of
    the last answered scrape is kept for diagnostics bundles.
    """

    def __init__(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        clock: Callable[[], float],
        *,
        timeout: float | None = None,
        path: str = "/metrics",
    ) -> None:
        self._client = client
        self._url = base_url.rstrip("/") + path
        self._clock = clock
        self._timeout = timeout
        self.last_text: str | None = None
        self.last_at: float | None = None

    @property
    def url(self) -> str:
        return self._url

    async def scrape(self) -> MetricsSample:
        """Fetch and parse one exposition; raise :class:`ScrapeError` on failure."""
        try:
            if self._timeout is None:
                response = await self._client.get(self._url)
            else:
                response = await self._client.get(self._url, timeout=self._timeout)
        except httpx.TransportError as exc:
            raise ScrapeError(classify_transport_error(exc), repr(exc)) from exc
        at = self._clock()
        if not response.is_success:
            raise ScrapeError(
                EvidenceFailure.HTTP_STATUS,
                f"GET {self._url} answered {response.status_code}",
                status=response.status_code,
            )
        text = response.text
        # Kept even when it does not parse: a broken exposition is evidence too.
        self.last_text = text
        self.last_at = at
        try:
            return parse_vllm_metrics(text, at)
        except (ValueError, IndexError, KeyError) as exc:
            # The parser reports malformed lines as ValueError; the others guard
            # against its edge cases so garbage never escapes as a crash.
            raise ScrapeError(EvidenceFailure.BAD_BODY, str(exc), response.status_code) from exc
