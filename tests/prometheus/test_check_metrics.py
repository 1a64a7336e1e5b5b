"""sentinel's live ``/metrics`` exposition passes ``promtool check metrics``.

promtool's linter is what Prometheus operators run on an exporter: names,
units, suffixes and help text as Prometheus expects them. It reads a real
scrape of ``sentinel run`` against the simulated vLLM, after canaries of every
kind have finished, so every family carries samples.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sentinel_sim.launch import SimProcess
from tests.prometheus.servers import Server, chat, poll, sentinel_server, tool


@pytest.fixture
def sentinel(tmp_path: Path) -> Iterator[Server]:
    with (
        SimProcess(scheduling_policy="priority") as sim,
        sentinel_server(sim.base_url, tmp_path) as server,
    ):
        with httpx.Client(timeout=5.0) as client:
            chat(sim.base_url, client)
        yield server


def _canaries_done(text: str) -> str | None:
    done = [
        line
        for line in text.splitlines()
        if line.startswith("sentinel_canary_duration_seconds_count") and not line.endswith(" 0.0")
    ]
    return text if len(done) >= 2 else None


def test_live_exposition_is_clean(sentinel: Server) -> None:
    promtool = tool("promtool")
    with httpx.Client(timeout=5.0) as client:
        exposition = poll(
            lambda: _canaries_done(client.get(sentinel.url + "/metrics").text),
            30.0,
            "canaries of two kinds finished",
        )
    done = subprocess.run(
        [promtool, "check", "metrics"],
        input=exposition,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    findings = (done.stdout + done.stderr).strip()
    assert done.returncode == 0, findings
    assert findings == "", findings
