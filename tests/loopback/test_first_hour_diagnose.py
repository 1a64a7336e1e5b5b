"""``sentinel diagnose`` and ``sentinel doctor`` judge the target they are given, as it is.

Issue 31, done-when 1, items 3 and 4: an idle engine asleep on its queue, or
one waiting on its compiler child, is not "blocked"; a hung engine with
requests running still is. The doctor, pointed at a port nothing listens on,
says so and judges no other server's processes (a simulator runs beside it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from chaos.ports import free_port
from sentinel_sim.launch import SimProcess


def sentinel(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SENTINEL_")}
    return subprocess.run(
        [sys.executable, "-m", "sentinel", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**env, "COLUMNS": "240"},
        check=False,
    )


def headline(sim: SimProcess, tmp_path: Path) -> str:
    done = sentinel("diagnose", "--target", sim.base_url, "--diagnostics-dir", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()[0]


def poll(condition: object, what: str, timeout_s: float = 15.0) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def running(sim: SimProcess) -> float:
    text = httpx.get(sim.base_url + "/metrics", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:num_requests_running{")
    )


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess(scheduling_policy="priority") as process:
        yield process


class Request(threading.Thread):
    """One chat request in flight while the test looks at the engine."""

    def __init__(self, sim: SimProcess) -> None:
        super().__init__(daemon=True)
        self.url = sim.base_url + "/v1/chat/completions"
        self.status: int | None = None

    def run(self) -> None:
        body = {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}]}
        try:
            reply = httpx.post(self.url, json={**body, "max_tokens": 4}, timeout=60)
            self.status = reply.status_code
        except httpx.HTTPError:
            self.status = -1


def test_an_idle_engine_is_not_called_blocked(sim: SimProcess, tmp_path: Path) -> None:
    assert running(sim) == 0
    line = headline(sim, tmp_path)
    assert line.startswith("engine idle: no request running"), line
    assert f"pid {sim.engine_pid}" in line  # the target's own engine, not another server's
    assert "blocked" not in line


def test_an_engine_waiting_on_its_compiler_is_compiling(sim: SimProcess, tmp_path: Path) -> None:
    sim.control.set_fault("compile_step", seconds=8.0, compiler="ptxas")
    request = Request(sim)
    try:
        request.start()
        engine = psutil.Process(sim.engine_pid)
        poll(
            lambda: any(c.name() == "ptxas" for c in engine.children(recursive=True)),
            "a ptxas child under the engine",
        )
        line = headline(sim, tmp_path)
    finally:
        sim.control.clear_all()
        request.join(timeout=60)
    assert line.startswith("engine compiling: ptxas"), line
    assert "blocked" not in line
    assert request.status == 200


def test_a_hung_engine_with_requests_running_is_still_blocked(
    sim: SimProcess, tmp_path: Path
) -> None:
    sim.control.set_fault("stuck_running", requests=1)
    try:
        poll(lambda: running(sim) >= 1, "a request running on the hung engine")
        line = headline(sim, tmp_path)
    finally:
        sim.control.clear_all()
    assert line.startswith(("engine blocked:", "engine spinning:")), line


def test_doctor_on_a_dead_port_says_unreachable_and_judges_no_other_server(
    sim: SimProcess,
) -> None:
    port = free_port()
    done = sentinel("doctor", "--target", f"http://127.0.0.1:{port}")
    out = " ".join(done.stdout.split())
    assert done.returncode == 1, done.stdout + done.stderr
    assert "target unreachable: connection refused" in out
    assert f"pid {sim.api_pid}" not in out
    assert f"pid {sim.engine_pid}" not in out
    assert "--scheduling-policy priority: effective" not in out
    assert "every enabled canary kind can be validated" not in out


def test_doctor_on_the_simulator_judges_its_processes(sim: SimProcess) -> None:
    done = sentinel("doctor", "--target", sim.base_url)
    out = " ".join(done.stdout.split())
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"API server pid {sim.api_pid} found" in out
    assert "--scheduling-policy priority: effective" in out
    assert "unreachable" not in out
