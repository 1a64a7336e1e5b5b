"""A multi-node group under the harness's kubelet (chaos/group.py), on the simulator.

The leader is the simulator with sentinel beside it, the worker rank a process
of its own that every engine step waits on. Both directions of LeaderWorkerSet's
``restartPolicy``: under ``RecreateGroupOnPodRestart`` a hang in the worker rank
is one restart, the whole group recreated (a fresh rank process), serving again
with no second restart in the watch; under ``None`` the leader restarts alone,
its start-up waits on the stopped rank and it never serves (slow: not in make
test). The full-length run (a 5-minute watch) is ``python -m chaos supervise
chaos/scenarios/groups/lws-worker-hang.yaml --checkers sentinel --watch-after 300``.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import psutil
import pytest
from rich.console import Console

import chaos.supervised
from chaos.group import GroupContainer, make_container
from chaos.scenario import SCENARIO_DIR, Scenario, load_scenario
from chaos.supervised import Options, SupervisedRecord, SupervisedRun
from chaos.supervised_report import cell

pytestmark = pytest.mark.timeout(120)

SCENARIO = SCENARIO_DIR / "groups" / "lws-worker-hang.yaml"
# The shortest run that still shows the loop: a 2 s model load (past sentinel's 1.5 s dead
# grace), the fault 1 s after ready, and 2 s watched after serving (2 liveness periods).
# The full watch (5 minutes) is the chaos command's (the module's docstring).
OPTIONS = Options(load_time=2.0, recover_within=30.0, watch_after=2.0)


def scenario(policy: str = "RecreateGroupOnPodRestart") -> Scenario:
    shipped = load_scenario(SCENARIO)
    assert shipped.target.group is not None
    group = shipped.target.group.model_copy(update={"restart_policy": policy})
    return shipped.model_copy(
        update={
            "target": shipped.target.model_copy(update={"group": group}),
            "fault": shipped.fault.model_copy(update={"start": 1.0}),
        }
    )


async def _run(
    shipped: Scenario, tmp_path: Path, options: Options, monkeypatch: pytest.MonkeyPatch
) -> tuple[SupervisedRecord, GroupContainer]:
    made: list[GroupContainer] = []

    def keep(*args: Any) -> Any:
        container = make_container(*args)
        assert isinstance(container, GroupContainer)
        made.append(container)
        return container

    monkeypatch.setattr(chaos.supervised, "make_container", keep)
    console = Console(stderr=True, quiet=True)
    record = await SupervisedRun(shipped, "sentinel", tmp_path, console, options).run()
    print(f"\n{shipped.name}: {cell(record)}\n{(tmp_path / 'timeline.txt').read_text()}")
    assert record.error is None, record.error
    return record, made[0]


def _stopped_pid(record: SupervisedRecord) -> int:
    (fault,) = [e for e in record.events if e.kind == "fault"]
    found = re.search(r"worker rank 1 \(VLLM::Worker_PP1 pid (\d+)\)", fault.detail)
    assert found, fault.detail
    return int(found.group(1))


async def test_a_worker_rank_hang_is_one_restart_of_the_whole_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record, group = await _run(scenario(), tmp_path, OPTIONS, monkeypatch)
    assert record.restarts == 1, record.events
    assert record.served_at is not None
    assert record.passed
    assert {"detect", "kill", "recover"} <= set(record.figures), record.figures
    # The whole group was recreated: the rank started again, the stopped one gone.
    assert group.recreated == 2
    assert not psutil.pid_exists(_stopped_pid(record)) or (
        psutil.Process(_stopped_pid(record)).status() == psutil.STATUS_ZOMBIE
    )
    # Seen from the leader: an engine hang (the rank is no process of the leader's pod).
    assert any(name.endswith("-engine-hang") for name in record.bundles), record.bundles


@pytest.mark.slow
async def test_the_leader_restarted_alone_waits_on_the_stopped_rank_for_good(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    alone = dataclasses.replace(OPTIONS, recover_within=25.0, watch_after=0.0)
    record, group = await _run(scenario("None"), tmp_path, alone, monkeypatch)
    assert record.restarts >= 1
    assert record.served_at is None
    assert not record.passed
    assert group.recreated == 1  # the rank was never restarted
    started = [e for e in record.events if e.kind == "started" and e.container >= 1]
    assert started == []  # the restarted leader never passed its startup probe
