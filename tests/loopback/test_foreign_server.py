"""A healthy server that is not vLLM passes ``sentinel probe`` and the exporter; a hung one fails.

The simulator plays a text-only llama.cpp (``--text-only llama.cpp``: images
refused with a 400 in llama-server's words) with no ``/v1/completions``:
the image and correctness kinds are skipped with their reasons, exit 0 and
``probe_success`` 1; ``--strict`` (a module's ``strict: true``) fails them.
The same server with its engine hung exits 1 and fails the probe.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sentinel.commands.probe import add_probe_arguments, probe_main
from sentinel.exitcode import ExitCode
from sentinel.exporter.config import ExporterConfig, read_catalog
from sentinel.exporter.server import Exporter, serving
from sentinel_sim.launch import SimProcess

pytestmark = pytest.mark.timeout(90)

KINDS = ["text", "structured", "multimodal", "correctness"]
CONFIG: dict[str, Any] = {
    "allow": {"cidrs": ["127.0.0.0/8"]},
    "modules": {
        "full": {"kinds": KINDS, "timeout": 10},
        "strict": {"kinds": KINDS, "timeout": 10, "strict": True},
    },
}


@pytest.fixture(scope="module")
def llama() -> Iterator[SimProcess]:
    flags = ["--text-only", "llama.cpp", "--no-completions"]
    with SimProcess(decode_tps=200, extra_args=flags) as process:
        yield process


def probe_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    parser = argparse.ArgumentParser()
    add_probe_arguments(parser)
    code = probe_main(parser.parse_args([*argv, "--output", "json"]))
    return code, json.loads(capsys.readouterr().out)


def test_probe_passes_a_text_only_server_skipping_what_it_cannot_do(
    llama: SimProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    code, document = probe_cli(capsys, llama.base_url)
    outcomes = {r["kind"]: r for r in document["targets"][0]["results"]}
    assert code == ExitCode.OK, outcomes
    assert outcomes["text"]["outcome"] == "ok"
    assert outcomes["structured"]["outcome"] == "ok"
    assert outcomes["multimodal"]["outcome"] == "skipped"
    assert "image input is not supported" in outcomes["multimodal"]["detail"]
    assert outcomes["correctness"]["outcome"] == "skipped"
    assert "no such endpoint" in outcomes["correctness"]["detail"]

    strict, _ = probe_cli(capsys, llama.base_url, "--strict", "--kind", "multimodal")
    assert strict == ExitCode.UNHEALTHY


@pytest.fixture
async def exporter() -> AsyncIterator[str]:
    built = Exporter.build(ExporterConfig.model_validate(CONFIG), read_catalog(None))
    async with serving(built, "127.0.0.1", 0) as url:
        yield url


async def scrape(url: str, target: str, module: str, seconds: float = 15) -> dict[str, float]:
    async with httpx.AsyncClient(timeout=seconds) as http:
        response = await http.get(
            url + "/probe",
            params={"target": target, "module": module},
            headers={"X-Prometheus-Scrape-Timeout-Seconds": str(seconds)},
        )
    assert response.status_code == 200, response.text
    return {
        s.name + "".join(f"{{{k}={v}}}" for k, v in s.labels.items()): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


async def test_the_exporter_passes_it_and_a_strict_module_fails_it(
    llama: SimProcess, exporter: str
) -> None:
    full = await scrape(exporter, llama.base_url, "full")
    assert full["probe_success"] == 1.0, full
    assert full["probe_sentinel_canary_success{kind=text}"] == 1.0
    assert "probe_sentinel_canary_success{kind=multimodal}" not in full  # skipped: no value
    strict = await scrape(exporter, llama.base_url, "strict")
    assert strict["probe_success"] == 0.0
    assert strict["probe_sentinel_failure{reason=unsupported}"] == 1.0


async def test_the_same_server_hung_fails_both(
    llama: SimProcess, exporter: str, capsys: pytest.CaptureFixture[str]
) -> None:
    llama.control.set_fault("engine_hang")
    try:
        full = await scrape(exporter, llama.base_url, "full", seconds=3)
        assert full["probe_success"] == 0.0
        assert full["probe_sentinel_failure{reason=timeout}"] == 1.0
        parser = argparse.ArgumentParser()
        add_probe_arguments(parser)
        args = parser.parse_args([llama.base_url, "--kind", "text", "--timeout", "1"])
        assert await _in_thread(probe_main, args) == ExitCode.UNHEALTHY
    finally:
        llama.control.clear_all()


async def _in_thread(function: Any, *args: Any) -> Any:
    """``probe_main`` runs its own event loop: off this test's loop, in a thread."""
    return await asyncio.to_thread(function, *args)
