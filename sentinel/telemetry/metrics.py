"""sentinel's own Prometheus metrics: the names dashboards and alerts rely on.

Owns every ``sentinel_*`` series. Event metrics (canaries, skips, hangs,
restarts, diagnostics) are counters and histograms updated by the code that
sees the event. State metrics (verdicts, priority, progress age, enforce) are
never set by anyone: a custom collector beside the servers
(:mod:`sentinel.serve.state_metrics`) reads the health snapshot at scrape
time, so ``/metrics`` cannot disagree with ``/livez``; the restart budget
declares its own series (:mod:`sentinel.fleet.series`). Neither is imported
here: the layers that record events into this registry sit below the state
they are judged into.

There is no global registry: the daemon builds one :class:`CollectorRegistry`
at start-up and passes it here and to the HTTP view.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from sentinel.canary.kinds import names as canary_kinds
from sentinel.canary.kinds import path_kinds
from sentinel.canary.refusal import Refusal
from sentinel.canary.result import CanaryResult, Reason
from sentinel.evidence.failure import EvidenceFailure
from sentinel.verdict import HangKind
from sentinel.verdict.registry import hang_kinds as rule_kinds

# Canary latencies span a 1-token answer on an idle GPU (tens of ms) to a
# deadline miss (8-10 s by default, 30 s at most in any sane config).
CANARY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0)
# A diagnostics bundle runs py-spy on several processes and reads GPU state.
DIAGNOSTICS_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)

SUCCESS = "success"
FAILURE = "failure"
# Skip reasons known up front; others are accepted but appear only once used.
SKIP_REASONS = ("busy", "disabled", "auto_sleep")
PROBES = ("liveness", "readiness", "startup")
MAINTENANCE_ACTIONS = ("set", "cleared", "expired")


def hang_kinds() -> tuple[HangKind, ...]:
    """The closed ``kind`` label set: every kind the registered hang rules confirm, now.

    The path rule confirms one kind per path canary kind registered, so the
    set follows both registries.
    """
    return rule_kinds(path_kinds())


class SentinelMetrics:
    """Registers the event metrics on ``registry`` and records events into them.

    The state metrics are registered beside it by
    :func:`sentinel.serve.state_metrics.daemon_metrics`.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.canary_total = Counter(
            "sentinel_canary_total",
            "Canaries finished, by kind, outcome and closed failure reason.",
            ["kind", "outcome", "reason"],
            registry=registry,
        )
        self.canary_duration = Histogram(
            "sentinel_canary_duration_seconds",
            "Wall time of whole canary requests (whole stream when streaming).",
            ["kind"],
            buckets=CANARY_BUCKETS,
            registry=registry,
        )
        self.canary_ttft = Histogram(
            "sentinel_canary_ttft_seconds",
            "Time to the first generated token of streaming canaries.",
            ["kind"],
            buckets=CANARY_BUCKETS,
            registry=registry,
        )
        self.canary_refusals = Counter(
            "sentinel_canary_refusals_total",
            "Canaries the server refused on purpose (a 503 with a body, or a streamed error "
            "with code 503), by kind and refusal (admission, paused, faulted, scaling, retired; "
            "unknown: a body sentinel does not know, readiness red).",
            ["kind", "refusal"],
            registry=registry,
        )
        self.canary_late_answers = Counter(
            "sentinel_canary_late_answers_total",
            "Late results of canaries awaited past their deadline (already counted as "
            "timeouts), by kind and outcome (the late result's reason: ok, or why it failed; "
            "timeout: no answer within late_wait either).",
            ["kind", "outcome"],
            registry=registry,
        )
        self.hang_detections = Counter(
            "sentinel_hang_detections_total",
            "Hangs confirmed, by kind (engine, each path kind, dead, broken, listener_down).",
            ["kind"],
            registry=registry,
        )
        self.canaries_skipped = Counter(
            "sentinel_canaries_skipped_total",
            "Canaries not sent, by reason (busy: real traffic completed recently; "
            "disabled: the model does not take the kind's input; "
            "auto_sleep: held so an auto-sleeping server can sleep).",
            ["reason"],
            registry=registry,
        )
        self.diagnostics_duration = Histogram(
            "sentinel_diagnostics_duration_seconds",
            "Time to collect one diagnostics bundle.",
            buckets=DIAGNOSTICS_BUCKETS,
            registry=registry,
        )
        self.diagnostics_failures = Counter(
            "sentinel_diagnostics_failures_total",
            "Diagnostics bundles that could not be completed.",
            registry=registry,
        )
        self.server_restarts = Counter(
            "sentinel_server_restarts_total",
            "Inference server restarts seen (refused connection, new API-server PID "
            "or start time, a counter going down).",
            registry=registry,
        )
        self.loop_errors = Counter(
            "sentinel_loop_errors_total",
            "Exceptions a periodic loop of sentinel caught and survived, by loop "
            "(scrape, vllm-health, processes, evaluate, scheduler, incidents, ...).",
            ["loop"],
            registry=registry,
        )
        self.scrape_failures = Counter(
            "sentinel_scrape_failures_total",
            "Scrapes of the server's /metrics that gave no sample, by closed reason "
            "(too_large: an exposition over a cap, refused; /status says which cap).",
            ["reason"],
            registry=registry,
        )
        self.maintenance_changes = Counter(
            "sentinel_maintenance_changes_total",
            "Maintenance windows set, cleared or run out, by action (the /maintenance hook).",
            ["action"],
            registry=registry,
        )
        self.maintenance_unauthorized = Counter(
            "sentinel_maintenance_unauthorized_total",
            "Requests to /maintenance refused for a missing or wrong bearer token.",
            registry=registry,
        )
        for action in MAINTENANCE_ACTIONS:
            self.maintenance_changes.labels(action)
        self._preinitialize()

    def _preinitialize(self) -> None:
        """Create the series known up front so rates and alerts work from the first scrape."""
        for kind in canary_kinds():
            self.canary_total.labels(kind.value, SUCCESS, Reason.OK.value)
            for reason in Reason:
                if reason is not Reason.OK:
                    self.canary_total.labels(kind.value, FAILURE, reason.value)
            self.canary_duration.labels(kind.value)
            self.canary_ttft.labels(kind.value)
            for refusal in Refusal:
                self.canary_refusals.labels(kind.value, refusal.value)
            for reason in (Reason.OK, Reason.TIMEOUT):
                self.canary_late_answers.labels(kind.value, reason.value)
        for hang in hang_kinds():
            self.hang_detections.labels(hang.value)
        for skip in SKIP_REASONS:
            self.canaries_skipped.labels(skip)
        for failure in EvidenceFailure:
            self.scrape_failures.labels(failure.value)

    def maintenance_changed(self, action: str) -> None:
        """A maintenance window was ``set``, ``cleared`` or ``expired``."""
        if action not in MAINTENANCE_ACTIONS:
            raise ValueError(f"unknown maintenance action {action!r}")
        self.maintenance_changes.labels(action).inc()

    def loop_failed(self, loop: str) -> None:
        """One exception caught by the supervision of ``loop``; the loop carried on."""
        self.loop_errors.labels(loop).inc()

    def observe_canary(self, result: CanaryResult) -> None:
        kind = result.kind.value
        if result.late:  # the canary itself was counted when it missed its deadline
            self.canary_late_answers.labels(kind, result.reason.value).inc()
            return
        outcome = SUCCESS if result.ok else FAILURE
        self.canary_total.labels(kind, outcome, result.reason.value).inc()
        self.canary_duration.labels(kind).observe(result.duration)
        if result.refusal is not None:
            self.canary_refusals.labels(kind, result.refusal.value).inc()
        if result.ttft is not None:
            self.canary_ttft.labels(kind).observe(result.ttft)

    def scrape_failed(self, reason: EvidenceFailure) -> None:
        """One ``/metrics`` scrape that gave no sample (a refused exposition among them)."""
        self.scrape_failures.labels(reason.value).inc()

    def canary_skipped(self, reason: str) -> None:
        self.canaries_skipped.labels(reason).inc()

    def hang_detected(self, kind: HangKind | str) -> None:
        # The label set stays closed: only hangs the verdict can confirm.
        if kind not in hang_kinds():
            raise ValueError(f"unknown hang kind {kind!r}")
        self.hang_detections.labels(HangKind(kind).value).inc()

    def server_restarted(self) -> None:
        self.server_restarts.inc()

    def diagnostics_finished(self, duration: float, ok: bool) -> None:
        self.diagnostics_duration.observe(duration)
        if not ok:
            self.diagnostics_failures.inc()
