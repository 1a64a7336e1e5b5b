"""blackbox_exporter, the baseline an operator would use instead of sentinel, against the simulator.

Runs the real exporter with chaos/blackbox.yml (the modules the chaos runner's
blackbox baseline scrapes) and probes the simulated vLLM: both modules succeed
on a healthy server; with the engine hung, the completion probe fails while
``/health`` still passes, which is the blind spot that makes /health alone a
poor liveness signal.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from chaos.blackbox import CONFIG
from chaos.ports import free_port
from sentinel_sim.launch import SimProcess
from tests.prometheus.servers import Server, tool

# What Prometheus sends with each scrape: blackbox_exporter bounds the probe by it
# (less half a second), so a hung completion fails in 2.5 s instead of 10 s.
SCRAPE_TIMEOUT = {"X-Prometheus-Scrape-Timeout-Seconds": "3"}


@pytest.fixture
def blackbox(tmp_path: Path) -> Iterator[Server]:
    port = free_port()
    command = [
        tool("prometheus-blackbox-exporter"),
        f"--config.file={CONFIG}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    with Server(
        "blackbox_exporter", command, port, tmp_path / "blackbox.log", "/metrics"
    ) as server:
        yield server


@pytest.fixture
def sim() -> Iterator[SimProcess]:
    with SimProcess(scheduling_policy="priority") as process:
        yield process


def probe_success(blackbox: Server, module: str, target: str) -> float:
    response = httpx.get(
        blackbox.url + "/probe",
        params={"module": module, "target": target},
        headers=SCRAPE_TIMEOUT,
        timeout=15.0,
    )
    assert response.status_code == 200, response.text
    match = re.search(r"^probe_success (\S+)$", response.text, re.MULTILINE)
    assert match is not None, response.text
    return float(match.group(1))


def test_probes_pass_when_healthy_and_the_completion_probe_fails_on_a_hang(
    blackbox: Server, sim: SimProcess
) -> None:
    health = sim.base_url + "/health"
    completion = sim.base_url + "/v1/completions"
    assert probe_success(blackbox, "vllm_health", health) == 1
    assert probe_success(blackbox, "vllm_completion", completion) == 1

    sim.control.set_fault("engine_hang")
    assert probe_success(blackbox, "vllm_completion", completion) == 0
    assert probe_success(blackbox, "vllm_health", health) == 1, "vLLM's /health sees a hang"

    sim.control.clear_all()
    assert probe_success(blackbox, "vllm_completion", completion) == 1


def test_the_completion_probe_checks_the_body(blackbox: Server, sim: SimProcess) -> None:
    # A 200 whose JSON is cut off after "choices": the status passes, the body does not.
    sim.control.set_fault("garbage", mode="invalid_json")
    text = httpx.get(
        blackbox.url + "/probe",
        params={"module": "vllm_completion", "target": sim.base_url + "/v1/completions"},
        headers=SCRAPE_TIMEOUT,
        timeout=15.0,
    ).text
    assert re.search(r"^probe_http_status_code 200$", text, re.MULTILINE), text
    assert re.search(r"^probe_failed_due_to_regex 1$", text, re.MULTILINE), text
    assert re.search(r"^probe_success 0$", text, re.MULTILINE), text
