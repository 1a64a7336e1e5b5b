"""A group scenario's schema (chaos/group_spec.py) and the simulator's ``--remote-rank`` flag.

A group is the simulator's alone (a real vLLM group needs nodes), a worker-rank
fault needs a group to sit in, and a remote rank that is not ``HOST:PORT`` is a
usage error (exit 2 with one line), never a traceback in the engine child.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.group_spec import GroupSpec
from chaos.scenario import SCENARIO_DIR, Scenario, ScenarioError, load_scenario
from sentinel_sim.config import parse_args

SCENARIO = SCENARIO_DIR / "groups" / "lws-worker-hang.yaml"


def test_the_group_scenario_loads_with_a_worker_rank_fault() -> None:
    scenario = load_scenario(SCENARIO)
    assert scenario.target.group == GroupSpec(ranks=1, restart_policy="RecreateGroupOnPodRestart")
    assert (scenario.fault.kind, scenario.fault.process) == ("sigstop", "worker")
    assert scenario.fault.harmful


def _reshaped(target: dict[str, object]) -> Scenario:
    data = load_scenario(SCENARIO).model_dump()
    data["target"] = target
    return Scenario.model_validate(data)


def test_a_worker_fault_needs_a_group_and_a_group_needs_the_simulator() -> None:
    with pytest.raises(ValueError, match="no worker process"):
        _reshaped({"kind": "sim"})
    with pytest.raises(ValueError, match="group: only for the simulator"):
        _reshaped({"kind": "vllm", "group": {"ranks": 1}})
    with pytest.raises(ValueError, match="restart_policy"):
        _reshaped({"kind": "sim", "group": {"restart_policy": "RecreateGroupOnRestart"}})
    assert _reshaped({"kind": "sim", "group": {"ranks": 2}}).target.group == GroupSpec(ranks=2)


def test_a_scenario_file_with_a_misspelt_group_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(SCENARIO.read_text().replace("ranks: 1", "rank: 1"), encoding="utf-8")
    with pytest.raises(ScenarioError):
        load_scenario(path)


@pytest.mark.parametrize("rank", ["8000", "host:", "host:port", "host:70000", ":1"])
def test_a_remote_rank_that_is_not_host_port_is_a_usage_error(
    rank: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(["--remote-rank", rank])
    assert exited.value.code == 2
    assert "--remote-rank: HOST:PORT" in capsys.readouterr().err


def test_remote_ranks_reach_the_engine_config() -> None:
    config = parse_args(["--remote-rank", "127.0.0.1:9001", "--remote-rank=10.0.0.2:9002"])
    assert config.remote_ranks == ("127.0.0.1:9001", "10.0.0.2:9002")
    assert config.engine_json()["remote_ranks"] == ("127.0.0.1:9001", "10.0.0.2:9002")
