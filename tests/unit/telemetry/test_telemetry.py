"""sentinel's contract metrics and its log setup, read back the way a scraper reads them."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from dataclasses import replace

import pytest
import structlog
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from structlog.typing import EventDict

from sentinel.canary.kinds import KINDS
from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.evaluation.health import HealthState, ProbeAnswer
from sentinel.serve.state_metrics import daemon_metrics
from sentinel.telemetry.logging import (
    REDACTED,
    configure_default_logging,
    configure_logging,
    get_logger,
)
from sentinel.telemetry.metrics import SentinelMetrics
from tests.metric_contract import CONTRACT_METRICS


def scrape(registry: CollectorRegistry) -> list[Sample]:
    text = generate_latest(registry).decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def value(samples: list[Sample], name: str, **labels: str) -> float | None:
    for s in samples:
        if s.name == name and s.labels == labels:
            return float(s.value)
    return None


def names(samples: list[Sample]) -> set[str]:
    return {s.name for s in samples}


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(100.0)


@pytest.fixture
def state(clock: Clock) -> HealthState:
    return HealthState(clock=clock)


@pytest.fixture
def metrics(state: HealthState, clock: Clock) -> SentinelMetrics:
    return daemon_metrics(CollectorRegistry(), state, clock=clock)


async def test_every_contract_name_is_exposed_once_state_is_known(
    state: HealthState, metrics: SentinelMetrics
) -> None:
    await state.publish(replace(state.snapshot(), priority_effective=True, progress_at=90.0))
    text = generate_latest(metrics.registry).decode()
    # Exposed means declared (HELP and TYPE) with the contract's type, as a
    # scraper and Prometheus see it. A labelled family whose label values are
    # not known up front (the loop of sentinel_loop_errors_total) has no
    # series until its first increment, which is still the same family.
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    exposed = {
        name + "_total" if kind == "counter" else name: kind for name, kind in families.items()
    }
    assert {n: exposed.get(n) for n in CONTRACT_METRICS} == CONTRACT_METRICS
    samples = scrape(metrics.registry)
    assert all(n.startswith("sentinel_") for n in names(samples))
    metrics.loop_failed("scrape")
    after = scrape(metrics.registry)
    assert value(after, "sentinel_loop_errors_total", loop="scrape") == 1


def test_known_series_exist_at_zero_from_the_start(metrics: SentinelMetrics) -> None:
    samples = scrape(metrics.registry)
    for kind in KINDS:
        assert (
            value(samples, "sentinel_canary_total", kind=kind, outcome="success", reason="ok") == 0
        )
        assert (
            value(samples, "sentinel_canary_total", kind=kind, outcome="failure", reason="timeout")
            == 0
        )
        assert value(samples, "sentinel_canary_duration_seconds_count", kind=kind) == 0
    assert (
        value(samples, "sentinel_canary_total", kind="text", outcome="success", reason="timeout")
        is None
    )
    for hang in ("engine", "structured", "multimodal", "dead"):
        assert value(samples, "sentinel_hang_detections_total", kind=hang) == 0
    assert value(samples, "sentinel_canaries_skipped_total", reason="busy") == 0
    assert value(samples, "sentinel_server_restarts_total") == 0


def test_events_are_counted(metrics: SentinelMetrics) -> None:
    ok = CanaryResult("text-1", CanaryKind.TEXT, Reason.OK, started=1.0, duration=0.3, ttft=0.04)
    late = CanaryResult("mm-1", CanaryKind.MULTIMODAL, Reason.TIMEOUT, started=2.0, duration=10.0)
    metrics.observe_canary(ok)
    metrics.observe_canary(ok)
    metrics.observe_canary(late)
    metrics.canary_skipped("busy")
    metrics.hang_detected("engine")
    metrics.server_restarted()
    metrics.diagnostics_finished(1.5, ok=True)
    metrics.diagnostics_finished(3.0, ok=False)

    s = scrape(metrics.registry)
    assert value(s, "sentinel_canary_total", kind="text", outcome="success", reason="ok") == 2
    assert (
        value(s, "sentinel_canary_total", kind="multimodal", outcome="failure", reason="timeout")
        == 1
    )
    assert value(s, "sentinel_canary_duration_seconds_count", kind="text") == 2
    assert value(s, "sentinel_canary_duration_seconds_sum", kind="multimodal") == 10.0
    assert value(s, "sentinel_canary_ttft_seconds_count", kind="text") == 2
    assert value(s, "sentinel_canary_ttft_seconds_count", kind="multimodal") == 0
    assert value(s, "sentinel_canaries_skipped_total", reason="busy") == 1
    assert value(s, "sentinel_hang_detections_total", kind="engine") == 1
    assert value(s, "sentinel_server_restarts_total") == 1
    assert value(s, "sentinel_diagnostics_duration_seconds_count") == 2
    assert value(s, "sentinel_diagnostics_failures_total") == 1


def test_unknown_hang_kind_is_rejected(metrics: SentinelMetrics) -> None:
    with pytest.raises(ValueError, match="bogus"):
        metrics.hang_detected("bogus")


async def test_state_metrics_follow_the_snapshot_at_scrape_time(
    state: HealthState, metrics: SentinelMetrics, clock: Clock
) -> None:
    s = scrape(metrics.registry)
    assert value(s, "sentinel_verdict", probe="liveness") == 1
    assert value(s, "sentinel_verdict", probe="readiness") == 0
    assert value(s, "sentinel_verdict", probe="startup") == 0
    assert value(s, "sentinel_enforce") == 1
    # Unknown priority and no progress yet: omitted, not zero.
    assert "sentinel_priority_effective" not in names(s)
    assert "sentinel_progress_age_seconds" not in names(s)

    await state.publish(
        replace(
            state.snapshot(),
            liveness=ProbeAnswer(False, "engine hang confirmed"),
            startup=ProbeAnswer(True, "every kind succeeded"),
            enforce=False,
            priority_effective=False,
            progress_at=80.0,
        )
    )
    clock.now = 112.5
    s = scrape(metrics.registry)
    assert value(s, "sentinel_verdict", probe="liveness") == 0
    assert value(s, "sentinel_verdict", probe="startup") == 1
    assert value(s, "sentinel_enforce") == 0
    assert value(s, "sentinel_priority_effective") == 0
    assert value(s, "sentinel_progress_age_seconds") == 32.5


def test_registries_are_independent() -> None:
    first, second = CollectorRegistry(), CollectorRegistry()
    a = SentinelMetrics(first)
    SentinelMetrics(second)
    a.server_restarted()
    assert value(scrape(first), "sentinel_server_restarts_total") == 1
    assert value(scrape(second), "sentinel_server_restarts_total") == 0


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """configure_logging owns the root logger; give it back to pytest afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    structlog.reset_defaults()
    configure_default_logging()


@pytest.fixture
def log_stream(restore_logging: None) -> io.StringIO:
    stream = io.StringIO()
    configure_logging("info", renderer="json", stream=stream)
    return stream


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_structlog_and_foreign_stdlib_records_are_json_lines(log_stream: io.StringIO) -> None:
    get_logger("sentinel.test").info("canary finished", kind="text", duration=0.3)
    logging.getLogger("aiohttp.server").warning("client went away: %s", "reset")
    logging.getLogger("httpx").info("HTTP Request: GET /metrics")  # quiet library, below WARNING

    events = lines(log_stream)
    assert [e["event"] for e in events] == ["canary finished", "client went away: reset"]
    assert events[0]["level"] == "info"
    assert events[0]["logger"] == "sentinel.test"
    assert events[0]["kind"] == "text"
    assert events[1]["logger"] == "aiohttp.server"
    assert all("timestamp" in e for e in events)


def test_credentials_never_reach_the_log(log_stream: io.StringIO) -> None:
    get_logger("sentinel.test").info(
        "request",
        headers={"Authorization": "Bearer s3cr3t-token", "Accept": "application/json"},
        api_key="sk-abcdefghijklmnop",
        note="retrying with Bearer s3cr3t-token",
    )
    logging.getLogger("grpc").error("peer sent %s", "x", extra={"X-Api-Key": "k-123"})

    text = log_stream.getvalue()
    assert "s3cr3t" not in text
    assert "abcdefghijklmnop" not in text
    assert "k-123" not in text
    first, second = lines(log_stream)
    assert first["headers"] == {"Authorization": REDACTED, "Accept": "application/json"}
    assert first["api_key"] == REDACTED
    assert second["X-Api-Key"] == REDACTED


@pytest.mark.usefixtures("restore_logging")
def test_extra_redactors_run_after_the_builtin_one() -> None:
    stream = io.StringIO()

    def drop_paths(_logger: object, _method: str, event: EventDict) -> EventDict:
        event.pop("path", None)
        return event

    configure_logging("debug", renderer="json", stream=stream, redactors=[drop_paths])
    get_logger("sentinel.test").debug("bundle written", path="/secret/place", size=3)
    (event,) = lines(stream)
    assert "path" not in event
    assert event["size"] == 3


@pytest.mark.usefixtures("restore_logging")
def test_console_renderer_when_asked() -> None:
    stream = io.StringIO()
    configure_logging("info", renderer="console", stream=stream)
    get_logger("sentinel.test").info("hello", kind="text")
    line = stream.getvalue()
    assert "hello" in line
    assert "kind=text" in line
    with pytest.raises(json.JSONDecodeError):
        json.loads(line)


def test_unknown_level_is_rejected() -> None:
    with pytest.raises(ValueError, match="loud"):
        configure_logging("loud", stream=io.StringIO())


@pytest.mark.usefixtures("restore_logging")
def test_unconfigured_commands_log_redacted_lines_to_stderr_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # What `sentinel probe` gets: nobody called configure_logging.
    structlog.reset_defaults()
    configure_default_logging()
    try:
        raise RuntimeError("dial http://u:pw-55123@vllm:8000 failed")
    except RuntimeError:
        structlog.get_logger("sentinel.canary").exception("canary_failed", api_key="sk-k-77812")
    out, err = capsys.readouterr()
    assert out == ""
    (event,) = (json.loads(line) for line in err.splitlines())
    assert event["event"] == "canary_failed"
    assert "pw-55123" not in err
    assert "sk-k-77812" not in err
    assert "RuntimeError" in event["exception"]
