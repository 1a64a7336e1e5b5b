"""Nothing a hostile target sends takes ``sentinel exporter`` down or grows it without bound.

The exporter runs as its own process (as shipped) and probes each
misbehaviour of :mod:`tests.hostile_target`'s ``/metrics`` (endless, 500 MB,
2 million series, one 50 MB line, a 1 byte/s trickle, corrupt gzip, invalid
UTF-8, a valid 60 MB exposition) and a hung engine behind a live HTTP front.
Every probe is answered within the scrape timeout; where only ``/metrics``
misbehaves the canaries still pass and the target's series are absent; the
exporter's resident memory stays under :data:`RSS_LIMIT`. SIGTERM ends it
with status 0.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.exporter_process import ExporterProcess
from tests.hostile_target import HANG_PATH, METRICS_MODES, HostileProcess

pytestmark = pytest.mark.timeout(120)

CONFIG = {
    "allow": {"cidrs": ["127.0.0.0/8"]},
    "modules": {"text": {"kinds": ["text"], "timeout": 10}},
}
SCRAPE_TIMEOUT = 5.0
RSS_LIMIT = (
    256 * 1024 * 1024
)  # bytes: the exporter idles near 60 MB (tests/bench/bench_exporter.py)


@pytest.fixture(scope="module")
def exporter() -> Iterator[ExporterProcess]:
    with ExporterProcess(CONFIG) as process:
        yield process


def probe(exporter: ExporterProcess, target: str) -> dict[str, float]:
    response = httpx.get(
        exporter.url + "/probe",
        params={"target": target, "module": "text"},
        headers={"X-Prometheus-Scrape-Timeout-Seconds": str(SCRAPE_TIMEOUT)},
        timeout=SCRAPE_TIMEOUT,  # an answer at all is one within the scrape timeout
    )
    assert response.status_code == 200, response.text
    return {
        s.name + "".join(f"{{{k}={v}}}" for k, v in s.labels.items()): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


@pytest.mark.parametrize("mode", METRICS_MODES)
def test_a_hostile_metrics_endpoint_is_survived(exporter: ExporterProcess, mode: str) -> None:
    with HostileProcess(metrics=mode) as target:
        got = probe(exporter, target.base_url)
    assert got["probe_success"] == 1.0  # the canaries are fine; only /metrics misbehaves
    target_series = [k for k in got if k.startswith("probe_sentinel_target_")]
    if mode == "ok":
        assert got["probe_sentinel_target_phase{phase=serving}"] == 1.0
    else:
        assert target_series == []
    assert psutil.Process(exporter.pid).memory_info().rss < RSS_LIMIT
    assert exporter.process is not None
    assert exporter.process.poll() is None


def test_a_hung_engine_behind_a_live_front_fails_in_time(exporter: ExporterProcess) -> None:
    with HostileProcess() as target:
        assert httpx.post(target.base_url + HANG_PATH).status_code == 200
        got = probe(exporter, target.base_url)
    assert got["probe_success"] == 0.0
    assert got["probe_sentinel_failure{reason=timeout}"] == 1.0


def test_sigterm_is_a_clean_shutdown() -> None:
    with ExporterProcess(CONFIG) as process:
        assert httpx.get(process.url + "/-/healthy").status_code == 200
        assert process.stop() == 0
