"""``sentinel exporter`` in-process against the simulator, over real sockets.

A healthy target passes with TTFT and decode rate; a hung one fails with
reason ``timeout`` before the scrape timeout, and its stall shows; progress
carries between scrapes of the same target and module, net of the
exporter's own canaries; a target outside the allowlist is answered 403 and
never connected to (a listener that records every accept proves it).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sentinel.exporter.config import ExporterConfig, read_catalog
from sentinel.exporter.server import Exporter, serving
from sentinel_sim.launch import SimProcess
from tests.loopback.sidecar import eventually

pytestmark = pytest.mark.timeout(120)

CONFIG: dict[str, Any] = {
    "allow": {"cidrs": ["127.0.0.0/8"]},
    "modules": {
        "text": {"kinds": ["text"], "timeout": 10},
        "full": {"kinds": ["text", "structured", "multimodal"], "timeout": 10},
        "nometrics": {"kinds": ["text"], "metrics": False},
    },
}
SCRAPE_TIMEOUT = 3.0


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess(decode_tps=200, max_num_seqs=8) as process:
        yield process


@pytest.fixture
async def exporter() -> AsyncIterator[str]:
    built = Exporter.build(ExporterConfig.model_validate(CONFIG), read_catalog(None))
    async with serving(built, "127.0.0.1", 0) as url:
        yield url


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as client:
        yield client


def series(text: str) -> dict[str, float]:
    """Every sample, keyed ``name`` or ``name{label=value}`` (one label at most here)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


async def probe(
    http: httpx.AsyncClient, url: str, target: str, module: str = "text", scrape_timeout: float = 10
) -> dict[str, float]:
    response = await http.get(
        url + "/probe",
        params={"target": target, "module": module},
        headers={"X-Prometheus-Scrape-Timeout-Seconds": str(scrape_timeout)},
        timeout=scrape_timeout,
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return series(response.text)


async def test_a_healthy_target_passes_with_ttft_and_decode_rate(
    sim: SimProcess, exporter: str, http: httpx.AsyncClient
) -> None:
    got = await probe(http, exporter, sim.base_url + "/v1", "full")
    assert got["probe_success"] == 1.0
    for kind in ("text", "structured", "multimodal"):
        assert got[f"probe_sentinel_canary_success{{kind={kind}}}"] == 1.0
        assert got[f"probe_sentinel_canary_duration_seconds{{kind={kind}}}"] > 0
    assert 0 < got["probe_sentinel_ttft_seconds"] < got["probe_duration_seconds"]
    assert got["probe_sentinel_tokens_per_second"] > 0
    assert got["probe_sentinel_target_phase{phase=serving}"] == 1.0
    assert got["probe_sentinel_target_requests_running"] == 0.0
    assert "probe_sentinel_target_progress" not in got  # a first probe of this module
    assert not [k for k in got if k.startswith("probe_sentinel_failure")]


async def test_without_metrics_no_target_series(
    sim: SimProcess, exporter: str, http: httpx.AsyncClient
) -> None:
    got = await probe(http, exporter, sim.base_url.removeprefix("http://"), "nometrics")
    assert got["probe_success"] == 1.0
    assert not [k for k in got if k.startswith("probe_sentinel_target_")]


async def test_progress_carries_between_scrapes_net_of_own_canaries(
    sim: SimProcess, exporter: str, http: httpx.AsyncClient
) -> None:
    target = sim.base_url
    assert "probe_sentinel_target_progress" not in await probe(http, exporter, target)
    # Only the previous probe's own canary ran since: no progress.
    assert (await probe(http, exporter, target))["probe_sentinel_target_progress"] == 0.0
    # Another module's canaries on the same target are the exporter's own too.
    await probe(http, exporter, target, "full")
    assert (await probe(http, exporter, target))["probe_sentinel_target_progress"] == 0.0
    real = await http.post(
        sim.base_url + "/v1/chat/completions",
        json={"model": sim.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
    )
    assert real.status_code == 200
    assert (await probe(http, exporter, target))["probe_sentinel_target_progress"] == 1.0
    assert (await probe(http, exporter, target))["probe_sentinel_target_progress"] == 0.0


async def test_a_hung_target_fails_within_the_scrape_timeout_and_its_stall_shows(
    exporter: str, http: httpx.AsyncClient
) -> None:
    async with SimProcess(decode_tps=200, faults=["stuck_running:requests=2"]) as hung:

        async def stuck_shown() -> bool:
            text = (await http.get(hung.base_url + "/metrics")).text
            return any(
                s.name == "vllm:num_requests_running" and s.value >= 2
                for family in text_string_to_metric_families(text)
                for s in family.samples
            )

        # The simulator publishes its seeded requests with the step that seeds them.
        await eventually(stuck_shown, 20.0, "the simulator shows its 2 stuck requests")
        loop = asyncio.get_running_loop()
        started = loop.time()
        # The client gives up at the scrape timeout: an answer at all is one within it.
        first = await probe(http, exporter, hung.base_url, scrape_timeout=SCRAPE_TIMEOUT)
        assert loop.time() - started < SCRAPE_TIMEOUT
        assert first["probe_success"] == 0.0
        assert first["probe_sentinel_failure{reason=timeout}"] == 1.0
        assert first["probe_sentinel_canary_success{kind=text}"] == 0.0
        assert "probe_sentinel_ttft_seconds" not in first
        assert first["probe_sentinel_target_requests_running"] >= 2

        async def stall_shows() -> bool:
            got = await probe(http, exporter, hung.base_url, scrape_timeout=SCRAPE_TIMEOUT)
            return (
                got.get("probe_sentinel_target_progress") == 0.0
                and got["probe_sentinel_target_stalled_seconds"] > 0
            )

        await eventually(stall_shows, 30, "progress 0 and stalled seconds above 0")


async def test_bad_requests_are_400_with_a_reason(
    sim: SimProcess, exporter: str, http: httpx.AsyncClient
) -> None:
    cases = {
        "module parameter is missing": {"target": "127.0.0.1:1"},
        "unknown module 'nope'": {"target": "127.0.0.1:1", "module": "nope"},
        "target is empty": {"module": "text"},
        "scheme must be http or https": {"target": "ftp://127.0.0.1:21", "module": "text"},
    }
    for words, params in cases.items():
        response = await http.get(exporter + "/probe", params=params)
        assert response.status_code == 400
        assert words in response.text
    bad_header = await http.get(
        exporter + "/probe",
        params={"target": sim.base_url, "module": "text"},
        headers={"X-Prometheus-Scrape-Timeout-Seconds": "soon"},
    )
    assert bad_header.status_code == 400
    assert (await http.get(exporter + "/-/healthy")).status_code == 200
    assert "/probe?target=" in (await http.get(exporter + "/")).text
    own = series((await http.get(exporter + "/metrics")).text)
    assert own["sentinel_exporter_probes_total{module=,result=bad_request}"] == 2.0
    assert own["sentinel_exporter_probes_total{module=text,result=bad_request}"] == 3.0
    assert "process_resident_memory_bytes" in own


class RecordingListener:
    """A TCP listener on 127.0.0.1:0 that counts every connection it accepts."""

    def __init__(self) -> None:
        self.accepts = 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> RecordingListener:
        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.accepts += 1
            writer.close()

        self.server = await asyncio.start_server(accepted, "127.0.0.1", 0)
        return self

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


async def test_a_refused_target_gets_403_and_no_connection(http: httpx.AsyncClient) -> None:
    refusing = {**CONFIG, "allow": {"cidrs": ["10.0.0.0/8"], "hosts": ["*.svc.cluster.local"]}}
    allowing = {**CONFIG, "allow": {"cidrs": ["127.0.0.0/8"]}}
    catalog = read_catalog(None)
    async with RecordingListener() as listener:
        strict = Exporter.build(ExporterConfig.model_validate(refusing), catalog)
        async with serving(strict, "127.0.0.1", 0) as url:
            for target in (f"127.0.0.1:{listener.port}", f"localhost:{listener.port}"):
                response = await http.get(
                    url + "/probe", params={"target": target, "module": "text"}
                )
                assert response.status_code == 403
                assert "127.0.0.1" in response.text
                assert "no allowed CIDR" in response.text
        assert listener.accepts == 0
        # The control: an exporter that allows loopback does connect to the listener.
        open_ = Exporter.build(ExporterConfig.model_validate(allowing), catalog)
        async with serving(open_, "127.0.0.1", 0) as url:
            got = await probe(http, url, f"localhost:{listener.port}", "nometrics")
        assert got["probe_success"] == 0.0
        assert listener.accepts > 0
