"""One probe of one target with one module: resolve, check, scrape, run the canaries.

The canaries are the daemon's (the catalog and :class:`CanaryRunner`), judged
as ``sentinel probe`` judges them: an image canary the model rejects as
unsupported is skipped, an inconclusive one is no failure. The prober owns
the probe's time: one budget (the module's timeout, capped by the scrape
timeout) from resolution to the last canary; the ``/metrics`` read gets at
most a third of it, each canary what is left (at most its own deadline), and
a canary there is no time left for counts as timed out without being sent.

Never raises for a failed probe: the outcome names a closed failure reason
(the canary :class:`Reason` values, or ``resolve``), or the refusal when the
allowlist says no, in which case nothing connected to the target.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import httpx

from sentinel.canary.catalog import Catalog
from sentinel.canary.kinds import CONTROL, KINDS
from sentinel.canary.outcome import outcome
from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.runner import CanaryRunner, ModelResolutionError
from sentinel.canary.spec import CanarySpec
from sentinel.evidence.metrics import MetricsScraper, ScrapeError
from sentinel.exporter.allowlist import Allowlist
from sentinel.exporter.config import ModuleRuntime
from sentinel.exporter.state import TargetStore, progress
from sentinel.exporter.target import (
    ResolveError,
    Resolver,
    Target,
    pinned_client,
    resolve,
    system_resolver,
)
from sentinel.record.lifecycle import Readings, phase_of
from sentinel.verdict import Phase

RESOLVE_FAILURE = "resolve"
METRICS_SHARE = 1 / 3  # of the probe's budget, at most, for the target's /metrics
METRICS_MAX = 5.0  # seconds, at most, for the target's /metrics
MIN_CANARY = 0.05  # seconds: less left than this and the canary is not sent
PHASES = {Phase.AWAKE: "serving", Phase.ASLEEP: "asleep", Phase.PAUSED: "paused"}


@dataclass(frozen=True, slots=True)
class Refusal:
    """The allowlist refused the target; nothing connected to it."""

    reason: str


@dataclass(frozen=True, slots=True)
class TargetEvidence:
    """What the target's own ``/metrics`` said (``error`` set: nothing usable)."""

    error: str | None = None
    running: float | None = None
    waiting: float | None = None
    phase: str = "serving"
    progress: bool | None = None
    stalled_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class ProbeOutcome:
    """Everything one probe found; ``failure`` is None exactly when it succeeded."""

    results: tuple[CanaryResult, ...] = ()
    failure: str | None = None
    detail: str = ""
    evidence: TargetEvidence | None = None
    strict: bool = False  # the module's: a kind the server cannot do fails instead of skipping

    @property
    def success(self) -> bool:
        return self.failure is None

    def text_result(self) -> CanaryResult | None:
        return next((r for r in self.results if r.kind == CONTROL and r.ok), None)


def first_failure(results: Sequence[CanaryResult], *, strict: bool = False) -> CanaryResult | None:
    return next((r for r in results if outcome(r, strict=strict) == "fail"), None)


class Prober:
    """Runs probes against targets, with the catalog, the allowlist and the per-target store."""

    def __init__(
        self,
        catalog: Catalog,
        allowlist: Allowlist,
        store: TargetStore,
        *,
        resolver: Resolver = system_resolver,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._allowlist = allowlist
        self._store = store
        self._resolver = resolver
        self._clock = clock
        self._tls = httpx.create_ssl_context()
        order = list(KINDS)
        self._specs = sorted(catalog.enabled(), key=lambda s: order.index(s.kind))

    def specs(self, module: ModuleRuntime) -> list[CanarySpec]:
        return [s for s in self._specs if s.kind in module.kinds]

    async def probe(
        self, target: Target, module: ModuleRuntime, budget: float
    ) -> ProbeOutcome | Refusal:
        until = self._clock() + budget
        if not self._allowlist.host_allowed(target.host) and not self._allowlist.has_cidrs:
            return Refusal(f"{target.host} matches no allowed host pattern")
        try:
            async with asyncio.timeout(budget):
                addresses = await resolve(target, self._resolver)
        except ResolveError as exc:
            return ProbeOutcome(failure=RESOLVE_FAILURE, detail=str(exc))
        except TimeoutError:
            return ProbeOutcome(failure=RESOLVE_FAILURE, detail=f"{target.host}: timed out")
        decision = self._allowlist.decide(target.host, addresses)
        if not decision.allowed:
            return Refusal(decision.reason)
        results: list[CanaryResult] = []
        evidence: TargetEvidence | None = None
        async with pinned_client(target, addresses[0], self._tls) as client:
            if module.metrics:
                share = min((until - self._clock()) * METRICS_SHARE, METRICS_MAX)
                evidence = await self._evidence(client, target, module, share)
            runner = CanaryRunner(
                client, target.base_url, api_key=module.api_key, clock=self._clock
            )
            try:
                failure = await self._canaries(runner, module, until, results)
            finally:
                state = self._store.touch(target.base_url, self._clock())
                state.own = state.own.plus(results)
        strict = module.strict
        if failure is not None:
            return ProbeOutcome(tuple(results), *failure, evidence=evidence, strict=strict)
        failed = first_failure(results, strict=strict)
        if failed is not None:
            reason = failed.reason.value
            return ProbeOutcome(tuple(results), reason, failed.detail, evidence, strict)
        return ProbeOutcome(tuple(results), evidence=evidence, strict=strict)

    async def _canaries(
        self, runner: CanaryRunner, module: ModuleRuntime, until: float, results: list[CanaryResult]
    ) -> tuple[str, str] | None:
        """Run the module's canaries into ``results``; a failure before any canary, or None."""
        model = module.model
        if model is None:
            try:
                model = await runner.resolve_model(deadline=max(until - self._clock(), 0.001))
            except ModelResolutionError as exc:
                return exc.reason.value, f"/v1/models: {exc.detail}"
        for spec in self.specs(module):
            left = until - self._clock()
            if left < MIN_CANARY:
                results.append(self._not_sent(spec))
                continue
            results.append(await runner.run(spec, model=model, deadline=min(spec.deadline, left)))
        return None

    def _not_sent(self, spec: CanarySpec) -> CanaryResult:
        return CanaryResult(
            name=spec.name,
            kind=spec.kind,
            reason=Reason.TIMEOUT,
            started=self._clock(),
            duration=0.0,
            detail="not sent: the probe's time was spent",
        )

    async def _evidence(
        self, client: httpx.AsyncClient, target: Target, module: ModuleRuntime, seconds: float
    ) -> TargetEvidence:
        """The target's /metrics, bounded and hostile-safe, reduced to the probe's series."""
        scraper = MetricsScraper(client, target.base_url, self._clock, timeout=max(seconds, 0.01))
        try:
            sample = await scraper.scrape()
        except ScrapeError as exc:
            return TargetEvidence(error=f"{exc.reason}: {exc.detail}")
        gauges: Mapping[str, float] = sample.gauges
        running, waiting = gauges.get("running"), gauges.get("waiting")
        phase, _ = phase_of(Readings(gauges=gauges))
        busy = (running or 0.0) + (waiting or 0.0) > 0
        state = self._store.touch(target.base_url, sample.at)
        moved, track = progress(
            state.modules.get(module.name), sample.counters, state.own, busy, sample.at
        )
        state.modules[module.name] = track
        return TargetEvidence(
            running=running,
            waiting=waiting,
            phase=PHASES.get(phase, "serving"),
            progress=moved.moved,
            stalled_seconds=moved.stalled_seconds,
        )
