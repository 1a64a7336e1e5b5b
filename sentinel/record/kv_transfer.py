"""Deferred requests and landed KV transfers: the ``kv_transfer`` evidence section.

Told every ``/metrics`` sample (after the ledger), this provider follows
vLLM's ``vllm:num_requests_waiting_by_reason{reason="deferred"}`` (requests
in ``WAITING_FOR_REMOTE_KVS`` on a disaggregated decode node; a grammar
compiling or a LoRA slot defers one too, for moments), less sentinel's own
structured canaries in flight (a canary is never remote, but its grammar may
compile), and the counters that move when a KV transfer lands: the NIXL
connector's
``vllm:nixl_xfer_time_seconds`` observations (the decode node pulls its KV,
so its transfers are counted there) or, connector-agnostic, prompt tokens of
source ``external_kv_transfer``. The rule
(:mod:`sentinel.verdict.hangs.kv_transfer`) judges the frozen section;
``/status`` shows it under ``sections.kv_transfer``. A new server epoch (the
ledger's) forgets what the old one showed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from sentinel.canary.spec import CanaryKind
from sentinel.config.settings import Settings
from sentinel.evidence.metrics import MetricsSample
from sentinel.record.observers import Observers
from sentinel.record.reading import LedgerReading
from sentinel.verdict.hangs.kv_transfer import SECTION, KvTransferSection
from sentinel.verdict.sections import SectionKey

#: Counters that move when a transfer lands, by the words ``/status`` names them with.
LANDING_COUNTERS: Mapping[str, str] = {
    "kv_transfers": "vllm:nixl_xfer_time_seconds",
    "kv_external_tokens": 'vllm:prompt_tokens_by_source{source="external_kv_transfer"}',
}
FAILED_COUNTER = "kv_failed_transfers"


class KvTransferWatch:
    """The provider of the ``kv_transfer`` section; :meth:`observe_sample` is a sample listener."""

    key: SectionKey[KvTransferSection] = SECTION

    def __init__(self, ledger: LedgerReading, bound: float) -> None:
        self._ledger = ledger
        self._bound = bound  # kv_transfer_bound: /status shows it beside the age
        self._epoch = ledger.epoch
        self._section = KvTransferSection()
        self._last: dict[str, float] = {}  # each landing counter at the previous sample
        self._failed_from: float | None = None  # the failed counter when deferral began

    @classmethod
    def listening(cls, observers: Observers, settings: Settings) -> KvTransferWatch:
        """A watch told every sample ``observers`` take, after the ledger; of the settings it
        reads ``kv_transfer_bound``."""
        watch = cls(observers.ledger, settings.kv_transfer_bound)
        observers.sample_listeners.append(watch.observe_sample)
        return watch

    def observe_sample(self, sample: MetricsSample) -> None:
        if self._ledger.epoch != self._epoch:
            self._epoch = self._ledger.epoch
            self._section, self._last, self._failed_from = KvTransferSection(), {}, None
        before = self._section
        deferred = sample.gauges.get("waiting_deferred")
        if deferred is not None:  # less sentinel's own structured canaries (a grammar compiling)
            deferred = max(deferred - self._grammar_canaries(), 0.0)
        since = before.deferred_since
        if deferred is None or deferred < 1.0:
            since = None
        elif since is None:
            since = sample.at
        landing, landed_at = "", before.landed_at
        for key, words in LANDING_COUNTERS.items():
            value = sample.counters.get(key)
            if value is None:
                continue
            landing = landing or words
            if key in self._last and value > self._last[key]:
                landed_at = sample.at
            self._last[key] = value
        failed_now = sample.counters.get(FAILED_COUNTER)
        if since is None or failed_now is None:
            self._failed_from = None if since is None else failed_now
        elif self._failed_from is None:
            self._failed_from = failed_now
        failed = 0.0
        if failed_now is not None and self._failed_from is not None:
            failed = max(failed_now - self._failed_from, 0.0)
        self._section = replace(
            before,
            counted=deferred is not None,
            deferred=0.0 if deferred is None else deferred,
            deferred_since=since,
            landing=landing,
            landed_at=landed_at,
            failed=failed,
        )

    def _grammar_canaries(self) -> int:
        """Sentinel's structured canaries in the engine: the only ones vLLM may defer."""
        record = self._ledger.records.get(CanaryKind.STRUCTURED)
        return 0 if record is None else len(record.outstanding) + len(record.awaited)

    def section(self, now: float) -> KvTransferSection:
        if self._ledger.epoch != self._epoch:
            return KvTransferSection()  # the old server's deferrals are no evidence
        return self._section

    def status(self, section: KvTransferSection, now: float) -> Mapping[str, Any] | None:
        if not section.counted:
            return {"deferred": None, "why": "the server does not count deferred requests"}
        since = section.deferred_since
        landed = section.landed_at
        return {
            "deferred": section.deferred,
            "deferred_for": None if since is None else round(now - since, 3),
            "bound": self._bound,
            "landing": section.landing or "no landing counter: real progress stands in",
            "last_landed_ago": None if landed is None else round(now - landed, 3),
            "failed_transfers": section.failed,
        }
