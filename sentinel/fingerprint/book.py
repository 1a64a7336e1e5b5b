"""The correctness fingerprint: taken once per model and weights, kept on disk, compared forever.

:class:`FingerprintBook` follows what the server serves (model and declared
weight version, from :mod:`sentinel.evidence.weights`), records the first
correctness check of each as its fingerprint
(:class:`~sentinel.canary.correctness.Fingerprint`) and hands the verdict the
one that applies now (:meth:`FingerprintBook.evidence`). It is never taken
again on a wake-up, a resume, a server restart or a sidecar restart: the
headline failure is garbage after a wake-up, which must never become the
baseline. Only a declared weight change takes a new one: a new weight version
at ``/weight_info``, a weight-transfer operation finishing
(``vllm:rl_weight_update_operation_duration_seconds_count``), a new model, or
an operator's command (``POST /fingerprint``, ``sentinel fingerprint
rebaseline``). Even then a new fingerprint that is one token repeated where the
model's previous one was not is refused: weights lost in a declared update
are corruption too.

:class:`FingerprintStore` keeps them beside the diagnostics bundles as one
small JSON file, written atomically (a temporary file renamed into place), so
a sidecar restart compares against the pre-restart fingerprint. What it reads
back is treated as hostile: capped in size, parsed strictly, and an entry that
is not well formed is dropped with a warning, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import httpx

from sentinel.canary.correctness import CORRECTNESS, CorrectnessEvidence, Fingerprint
from sentinel.canary.result import CanaryResult, Generation
from sentinel.canary.spec import CanarySpec
from sentinel.config.settings import Settings
from sentinel.evidence.metrics import MetricsSample
from sentinel.evidence.weights import Identity, WeightsPoller
from sentinel.fingerprint.store import (
    FILE_NAME,
    MAX_KEPT,
    MAX_TEXT,
    FingerprintStore,
    fingerprint_json,
)
from sentinel.telemetry.logging import get_logger
from sentinel.verdict.hangs.corrupt import NAN_ANSWER, compare, degenerate
from sentinel.verdict.model import CORRECTNESS as CORRECTNESS_SECTION
from sentinel.verdict.sections import SectionKey

log = get_logger("sentinel.fingerprint")

# A declared weight change settles this long before a check may record the new
# fingerprint: a controller's transfer is several operations in a row.
SETTLE = 10.0
CHECKS_SHOWN = 6  # recent checks in a bundle's correctness section
CORRUPTED_COUNTER = "corrupted_requests"
WEIGHT_OPERATIONS_COUNTER = "weight_operations"


def request_digest(spec: CanarySpec) -> str:
    """What a fingerprint answered: the check's endpoint and request template (no nonce)."""
    text = json.dumps([spec.endpoint, dict(spec.request)], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class FingerprintBook:
    """The fingerprints, the key they are looked up by now, and what re-baselines them.

    Runs on the daemon's event loop, except :meth:`request_rebaseline`, which
    the HTTP listener's thread may call (it only leaves a note under a lock).
    """

    def __init__(
        self,
        store: FingerprintStore | None,
        spec: CanarySpec | None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.spec = spec
        self.request = request_digest(spec) if spec is not None else ""
        self.clock = clock
        self.wall_clock = wall_clock
        self.prints: list[Fingerprint] = store.load() if store is not None else []
        self.model: str | None = None
        self.weights: str | None = None
        # Checks sent before this answered other weights (or another request).
        self.since = float("-inf")
        self.pending: str | None = None  # why the next settled check records a new fingerprint
        self.corrupted_at: float | None = None
        self._counters: dict[str, float] = {}
        self._asked: str | None = None  # an operator's re-baseline, from any thread
        self._lock = threading.Lock()
        self.recent: deque[CanaryResult] = deque(maxlen=CHECKS_SHOWN)
        # What /fingerprint shows, rebuilt on the loop when something changed;
        # the HTTP listener's thread only reads the reference.
        self.published: dict[str, Any] = self.to_json()

    # -- what is served --------------------------------------------------------
    @property
    def key(self) -> tuple[str, str, str] | None:
        if self.model is None or self.weights is None or self.spec is None:
            return None
        return (self.model, self.weights, self.request)

    def current(self) -> Fingerprint | None:
        key = self.key
        return next((p for p in self.prints if (p.model, p.weights, p.request) == key), None)

    def observe_identity(self, identity: Identity) -> None:
        """A poll of the model and weight version; a change opens a new key."""
        now = self.clock()
        model = identity.model if identity.model is not None else self.model
        weights = identity.weights if identity.weights is not None else self.weights
        if (model, weights) == (self.model, self.weights):
            return
        declared = self.weights is not None and weights != self.weights
        if self.model is not None or self.weights is not None:
            log.info("fingerprint_key_changed", model=model, weights=weights)
        self.model, self.weights = model, weights
        # A new weight version settles first; a first sighting needs no wait.
        self.since = now + SETTLE if declared else now
        if declared:
            self.pending = f"weight version {weights!r} declared at /weight_info"
        self.published = self.to_json()

    def observe_sample(self, sample: MetricsSample) -> None:
        """vLLM's NaN counter and finished weight-transfer operations, from one scrape."""
        for name in (CORRUPTED_COUNTER, WEIGHT_OPERATIONS_COUNTER):
            value = sample.counters.get(name)
            before = self._counters.get(name)
            if value is None:
                continue
            self._counters[name] = value
            if before is None or value <= before:
                continue  # a first sample, or a restarted server's counter
            if name == CORRUPTED_COUNTER:
                self.corrupted_at = sample.at
                log.warning("vllm_corrupted_requests", total=value, new=value - before)
            else:
                self.since = sample.at + SETTLE
                self.pending = "a weight update finished (vllm:rl_weight_update_operation_*)"
                log.info("fingerprint_weight_update_seen", settle=SETTLE)

    def request_rebaseline(self, reason: str) -> None:
        """An operator's command (any thread): the next check records a new fingerprint."""
        with self._lock:
            self._asked = reason[:MAX_TEXT] or "operator's command"

    def _take_request(self) -> None:
        with self._lock:
            asked, self._asked = self._asked, None
        if asked is not None:
            self.since, self.pending = self.clock(), f"operator: {asked}"
            log.warning("fingerprint_rebaseline_requested", reason=asked)
            self.published = self.to_json()

    # -- checks ----------------------------------------------------------------
    def observe_result(self, result: CanaryResult) -> None:
        """A finished canary: the first settled check of a key (or after a re-baseline) records."""
        self._take_request()
        spec = self.spec
        if spec is None or result.kind != CORRECTNESS or result.name != spec.name:
            return
        self.recent.append(result)
        self._record(result)
        self.published = self.to_json()

    def _record(self, result: CanaryResult) -> None:
        key = self.key
        if key is None or not result.ok or not result.generations or result.started < self.since:
            return
        existing = self.current()
        if existing is not None and self.pending is None:
            return
        if any(math.isnan(v) for g in result.generations for v in g.logprobs):
            return
        why = self.pending or "the first check of this model and weights"
        if existing is None:
            previous = next((p for p in self.prints if p.model == key[0]), None)
        else:
            previous = existing
        if previous is not None and _turned_degenerate(previous, result.generations):
            log.error(
                "fingerprint_refused",
                why=why,
                problem="one token repeated where the model's fingerprint was not; "
                "kept the old fingerprint",
            )
            self.pending = None
            if existing is None:  # judge the new weights against the model's last ones
                kept = f"kept from weights {previous.weights!r}: {why} answered one token repeated"
                self.prints.insert(0, replace(previous, weights=key[1], why=kept[:MAX_TEXT]))
                self._save()
            return
        made = Fingerprint(*key, result.generations, self.wall_clock(), why)
        self.prints = [made, *(p for p in self.prints if p is not existing)][:MAX_KEPT]
        self.pending = None
        self.since = result.started
        log.warning(
            "fingerprint_recorded",
            model=key[0],
            weights=key[1],
            why=why,
            tokens=[len(g.token_ids) for g in result.generations],
        )
        self._save()

    def _save(self) -> None:
        if self.store is None:
            return
        try:
            self.store.save(self.prints)
        except OSError as exc:  # kept in memory; a sidecar restart will take it again
            log.error("fingerprint_not_saved", path=str(self.store.path), error=str(exc))

    # -- views -----------------------------------------------------------------
    def evidence(self) -> CorrectnessEvidence | None:
        """What the verdict judges checks against now (None: no correctness check runs)."""
        self._take_request()
        if self.spec is None:
            return None
        fingerprint = None if self.pending is not None else self.current()
        return CorrectnessEvidence(fingerprint, self.since, self.corrupted_at, self.spec.name)

    def to_json(self) -> dict[str, Any]:
        """The fingerprint in force and the recent checks, as ``/fingerprint`` and bundles show."""
        current = self.current()
        checks = list(self.recent)
        return {
            "model": self.model,
            "weights": self.weights,
            "request": self.request,
            "pending": self.pending,
            "fingerprint": None if current is None else fingerprint_json(current),
            "checks": [_check_json(r, current) for r in checks],
            "kept": len(self.prints),
        }


def _turned_degenerate(previous: Fingerprint, generations: Sequence[Generation]) -> bool:
    """Every prompt now one token repeated where the previous fingerprint was not so."""
    if len(previous.generations) != len(generations) or not generations:
        return False
    return all(degenerate(g) for g in generations) and not all(
        degenerate(g) for g in previous.generations
    )


def _check_json(result: CanaryResult, current: Fingerprint | None) -> dict[str, Any]:
    departures = (
        [d.describe() for d in compare(current.generations, result.generations)]
        if current is not None and result.generations
        else []
    )
    if NAN_ANSWER in result.detail:  # vLLM refused to encode NaN log-probabilities
        departures = ["nan (the reply's log-probabilities are NaN: the server refused them)"]
    return {
        "started": round(result.started, 3),
        "reason": result.reason.value,
        "detail": result.detail,
        "token_ids": [list(g.token_ids) for g in result.generations],
        "logprobs": [[_rounded(v) for v in g.logprobs] for g in result.generations],
        "departures": departures,
    }


def _rounded(value: float) -> float | str:
    return round(value, 4) if math.isfinite(value) else str(value)


def bundle_section(book: FingerprintBook) -> dict[str, Any]:
    """The bundle's ``correctness`` section (``{}`` without a correctness check)."""
    return {} if book.spec is None else book.to_json()


def build_book(settings: Settings, specs: Sequence[CanarySpec]) -> FingerprintBook:
    """The daemon's book: the first enabled correctness check, its file beside the bundles."""
    spec = next((s for s in specs if s.enabled and s.kind == CORRECTNESS), None)
    store = FingerprintStore(settings.diagnostics_dir / FILE_NAME) if spec is not None else None
    return FingerprintBook(store, spec)


def weights_steps(
    book: FingerprintBook,
    settings: Settings,
    client: httpx.AsyncClient,
    clock: Callable[[], float],
    api_key: str | None,
) -> list[tuple[str, float, Callable[[], Awaitable[None]]]]:
    """The observer step polling the model and weight version (none without a check)."""
    if book.spec is None:
        return []
    addressed = book.spec.request.get("model") or settings.model
    poller = WeightsPoller(
        client,
        settings.target,
        clock,
        addressed=str(addressed) if addressed else None,
        api_key=api_key,
        timeout=settings.health_timeout,
    )

    async def step() -> None:
        book.observe_identity(await poller.poll())

    return [("weights", settings.lifecycle_interval, step)]


@dataclass(frozen=True, slots=True)
class CorrectnessProvider:
    """The fingerprint the checks are judged against, as the evidence's ``correctness`` section.

    Its ``/status`` is ``/fingerprint`` (:mod:`sentinel.fingerprint.endpoint`), so no fragment.
    """

    book: FingerprintBook

    @property
    def key(self) -> SectionKey[CorrectnessEvidence]:
        return CORRECTNESS_SECTION

    def section(self, now: float) -> CorrectnessEvidence | None:
        return self.book.evidence()

    def status(self, section: CorrectnessEvidence, now: float) -> Mapping[str, Any] | None:
        return None
