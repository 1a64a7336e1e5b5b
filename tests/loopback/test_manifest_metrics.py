"""Every metric the dashboard and the alert rules name is served by a running sentinel.

Starts ``sentinel run`` as a subprocess against the simulated vLLM, sends a
little real traffic (so sentinel sees progress that is not its own and
exports ``sentinel_progress_age_seconds``), and polls ``/metrics`` until every
name from ``manifests/components/monitoring`` is there, or a deadline passes.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from chaos.ports import free_port
from tests.unit.inject.test_manifests import all_referenced_metrics, exposed_names

if TYPE_CHECKING:
    from sentinel_sim.launch import SimProcess

pytestmark = pytest.mark.skipif(
    find_spec("sentinel.daemon") is None or find_spec("sentinel_sim.launch") is None,
    reason="needs the sentinel daemon and the simulated vLLM",
)

DEADLINE_S = 60.0


@pytest.fixture
def sim() -> Iterator[SimProcess]:
    from sentinel_sim.launch import SimProcess

    with SimProcess(scheduling_policy="priority") as process:
        yield process


def tail(path: Path, limit: int = 4000) -> str:
    return path.read_text(errors="replace")[-limit:] if path.exists() else ""


def test_dashboard_and_alert_metrics_exist_in_a_running_sentinel(
    sim: SimProcess, tmp_path: Path
) -> None:
    http_port, grpc_port = free_port(), free_port()
    log = tmp_path / "sentinel.log"
    command = [
        sys.executable,
        "-m",
        "sentinel",
        "run",
        "--target",
        sim.base_url,
        "--listen",
        f"127.0.0.1:{http_port}",
        "--grpc-listen",
        f"127.0.0.1:{grpc_port}",
        "--diagnostics-dir",
        str(tmp_path / "diagnostics"),
        "--log-format",
        "json",
    ]
    # The policy from config, so priority_effective is known whether or not
    # sentinel can see the simulator's processes from here.
    env = {**os.environ, "SENTINEL_SCHEDULING_POLICY": "priority"}
    wanted = set(all_referenced_metrics())
    missing = wanted
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            with httpx.Client(timeout=5.0) as client:
                deadline = time.monotonic() + DEADLINE_S
                while missing and time.monotonic() < deadline:
                    assert proc.poll() is None, f"sentinel exited early:\n{tail(log)}"
                    try:
                        text = client.get(f"http://127.0.0.1:{http_port}/metrics").text
                        missing = wanted - exposed_names(text)
                    except httpx.TransportError:
                        pass  # not listening yet
                    if missing:
                        # Real traffic: progress that is not sentinel's own canaries.
                        client.post(
                            f"{sim.base_url}/v1/chat/completions",
                            json={
                                "model": sim.model,
                                "messages": [{"role": "user", "content": "hello"}],
                                "max_tokens": 4,
                            },
                        )
                        # Returns early only if sentinel died.
                        with contextlib.suppress(subprocess.TimeoutExpired):
                            proc.wait(timeout=0.5)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
    assert not missing, f"not served by sentinel's /metrics: {sorted(missing)}\n{tail(log)}"
