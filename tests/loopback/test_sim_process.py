"""The simulator's processes behave like vLLM's under real signals, and the launcher cleans up."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import httpx
import psutil
import pytest

from sentinel.evidence.process_model import ProcessPatterns, SchedulingPolicy, scheduling_policy
from sentinel_sim.launch import PROCESS_TITLE, SimProcess, SimStartError


def _chat(max_tokens: int = 2) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens}


def _vllm_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("vllm:")]


def test_engine_child_is_titled_like_vllm() -> None:
    with SimProcess(scheduling_policy="priority") as sim:
        api = psutil.Process(sim.api_pid)
        titled = [p for p in api.children() if p.name() == PROCESS_TITLE]
        assert [p.pid for p in titled] == [sim.engine_pid]
        # setproctitle may leave the title as one NUL-terminated string with
        # spaces (psutil then gives one argument and padding), as a real
        # retitled vLLM does; the policy is read the way production reads it.
        assert scheduling_policy(api.cmdline()) is SchedulingPolicy.PRIORITY


def test_api_process_wears_vllm_api_server_command_line() -> None:
    """Recognised by vLLM's own patterns alone: nothing in sentinel names the simulator."""
    vllm_only = ProcessPatterns(api=("vllm.entrypoints.openai.api_server",))
    real_api = vllm_only.classify("python", ["python", "-m", "vllm.entrypoints.openai.api_server"])
    real_engine = vllm_only.classify("VLLM::EngineCor", ["VLLM::EngineCore"])
    assert real_api is not None
    assert real_engine is not None
    assert real_api != real_engine
    with SimProcess() as sim:
        api = psutil.Process(sim.api_pid)
        assert "sentinel_sim" not in " ".join(api.cmdline())
        assert vllm_only.classify(api.name(), api.cmdline()) is real_api
        assert api.name().startswith("python"), api.name()
        engine = psutil.Process(sim.engine_pid)
        assert vllm_only.classify(engine.name(), engine.cmdline()) is real_engine


def test_sigstop_engine_freezes_generation_not_health() -> None:
    with SimProcess(decode_tps=200) as sim, httpx.Client(base_url=sim.base_url, timeout=10) as http:
        assert http.post("/v1/chat/completions", json=_chat()).status_code == 200
        sim.control.stop_engine()  # a real SIGSTOP, sent by the API process
        # The signal is delivered asynchronously: on a loaded machine the engine
        # may still read as running for a moment.
        deadline = time.monotonic() + 5
        while sim.engine_process().status() != psutil.STATUS_STOPPED:
            assert time.monotonic() < deadline, "the engine never stopped"
            time.sleep(0.01)  # polling with a deadline
        frozen = _vllm_lines(http.get("/metrics").text)
        with pytest.raises(httpx.ReadTimeout):
            http.post("/v1/chat/completions", json=_chat(), timeout=1.0)
        assert http.get("/health").status_code == 200
        assert _vllm_lines(http.get("/metrics").text) == frozen
        sim.control.resume_engine()
        assert http.post("/v1/chat/completions", json=_chat()).status_code == 200


def test_sigkill_engine_turns_health_503_and_the_api_exits() -> None:
    with SimProcess(dead_exit_delay=1.0) as sim:
        with httpx.Client(base_url=sim.base_url, timeout=2) as http:
            assert http.get("/health").status_code == 200
            os.kill(sim.engine_pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while http.get("/health").status_code != 503:
                assert time.monotonic() < deadline, "/health never turned 503"
                time.sleep(0.01)  # polling with a deadline
            response = http.post("/v1/chat/completions", json=_chat())
            assert response.status_code == 500
            assert response.json()["error"]["type"] == "InternalServerError"
        assert sim.wait_exit(timeout=10) == 1


def test_launcher_stops_everything_even_with_a_stopped_engine(tmp_path: Path) -> None:
    ready_file = tmp_path / "ready.json"
    sim = SimProcess(extra_args=["--ready-file", str(ready_file)])
    with sim:
        ready = json.loads(ready_file.read_text())
        assert ready["port"] == sim.port
        assert ready["engine_pid"] == sim.engine_pid
        sim.signal_engine(signal.SIGSTOP)
        api, engine = psutil.Process(sim.api_pid), sim.engine_process()
    for process in (api, engine):
        if process.is_running():
            assert process.status() == psutil.STATUS_ZOMBIE
    assert sim.returncode() == 0


def test_start_failure_reports_the_log() -> None:
    with pytest.raises(SimStartError, match="max-num-seqs"):
        SimProcess(max_num_seqs=0, startup_timeout=10).start()
