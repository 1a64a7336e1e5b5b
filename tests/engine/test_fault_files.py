"""The fault-file protocol between ``chaos.vllm_engine.faults`` (writer) and the plugin (reader).

Pure: no vLLM. The plugin is a separate distribution, so its reader is loaded
from its source file.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from chaos.vllm_engine.faults import FAULT_DIR_ENV, FAULTS, FaultSwitch

PLUGIN_FAULTS = Path(__file__).parents[2] / "chaos/vllm_plugin/sentinel_chaos_vllm/faults.py"


@pytest.fixture(scope="module")
def plugin() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_sentinel_chaos_faults", PLUGIN_FAULTS)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_names_and_env_var_agree(plugin: ModuleType) -> None:
    assert set(FAULTS) == set(plugin.FAULTS)
    assert plugin.FAULT_DIR_ENV == FAULT_DIR_ENV


def test_set_is_seen_at_once_and_clear_too(plugin: ModuleType, tmp_path: Path) -> None:
    switch = FaultSwitch(tmp_path)
    board = plugin.FaultBoard(tmp_path, interval=3600.0)  # only the mtime check can refresh
    assert board.get("slow_decode") is None
    switch.set("slow_decode", factor=5)
    assert board.get("slow_decode") == {"factor": 5}
    switch.set("stream_stall")
    assert board.get("stream_stall") == {"after": 1}
    switch.clear_all()
    assert board.get("slow_decode") is None
    assert switch.active() == []


def test_duration_expires(plugin: ModuleType, tmp_path: Path) -> None:
    switch = FaultSwitch(tmp_path)
    board = plugin.FaultBoard(tmp_path)
    switch.set("engine_hang", duration=-1.0)  # already past its expiry
    assert switch.active() == ["engine_hang"]
    assert board.get("engine_hang") is None
    switch.set("engine_hang", duration=3600.0)
    assert board.get("engine_hang") == {}


def test_stray_and_partial_files_are_ignored(plugin: ModuleType, tmp_path: Path) -> None:
    (tmp_path / ".engine_hang.abc.tmp").write_text('{"params": {}}')
    (tmp_path / "unknown.json").write_text('{"params": {}}')
    (tmp_path / "structured_hang.json").write_text("{not json")
    board = plugin.FaultBoard(tmp_path)
    assert board.get("engine_hang") is None
    assert board.get("structured_hang") is None


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("nope", {}),
        ("engine_hang", {"x": 1}),
        ("slow_decode", {"factor": 0}),
        ("stream_stall", {"after": -1}),
    ],
)
def test_switch_rejects_bad_faults(tmp_path: Path, name: str, params: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"."):
        FaultSwitch(tmp_path).set(name, **params)


PLUGIN_PACKAGE = PLUGIN_FAULTS.parent


@pytest.fixture(scope="module")
def hooks() -> ModuleType:
    """The plugin's hooks module, loaded from source as part of its package."""
    spec = importlib.util.spec_from_file_location(
        "_sentinel_chaos_pkg",
        PLUGIN_PACKAGE / "__init__.py",
        submodule_search_locations=[str(PLUGIN_PACKAGE)],
    )
    assert spec is not None
    assert spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = package
    spec.loader.exec_module(package)
    return importlib.import_module("_sentinel_chaos_pkg.hooks")


class _Engine:
    """Stands in for an EngineCoreProc: the rank attribute the hook reads, and a step."""

    def __init__(self, engine_index: int | None) -> None:
        self.engine_index = engine_index
        self.steps = 0

    def step(self) -> int:
        self.steps += 1
        return self.steps


def test_engine_hang_naming_a_rank_holds_only_that_engine(
    hooks: ModuleType, tmp_path: Path
) -> None:
    board = hooks.FaultBoard(tmp_path, interval=3600.0)
    step = hooks._engine_step(board, _Engine.step)
    FaultSwitch(tmp_path).set("engine_hang", engine=1)
    assert board.get("engine_hang") == {"engine": 1}
    free = _Engine(engine_index=0)
    assert step(free) == 1  # rank 0 steps although a hang is on (for rank 1)
    assert hooks._mine(board.get("engine_hang"), 1)
    assert not hooks._mine(board.get("engine_hang"), 0)
    FaultSwitch(tmp_path).set("engine_hang")
    assert hooks._mine(board.get("engine_hang"), 0)  # no rank named: every engine


def test_rank_is_the_engine_index_else_the_parallel_config(hooks: ModuleType) -> None:
    class Config:
        data_parallel_rank = 0  # reset to 0 for a dense model's independent engines
        data_parallel_index = 3

    class Vllm:
        parallel_config = Config()

    engine = _Engine(engine_index=None)
    engine.vllm_config = Vllm()  # type: ignore[attr-defined]
    assert hooks._dp_rank(engine) == 3
    assert hooks._dp_rank(_Engine(engine_index=2)) == 2
    assert hooks._dp_rank(object()) == 0


def test_slow_decode_sleeps_a_fixed_step_or_a_factor(hooks: ModuleType) -> None:
    assert hooks._slow_decode_sleep({"step_seconds": 2.0, "factor": 10.0}, 0.001) == 2.0
    assert hooks._slow_decode_sleep({"factor": 3.0}, 0.5) == pytest.approx(1.0)
    floor = hooks.MIN_STEP_SECONDS
    assert hooks._slow_decode_sleep({"factor": 11.0}, 0.0) == pytest.approx(10 * floor)


def test_switch_writes_only_the_knobs_given(tmp_path: Path) -> None:
    switch = FaultSwitch(tmp_path)
    switch.set("slow_decode", step_seconds=2.0)
    body = (tmp_path / "slow_decode.json").read_text()
    assert '"step_seconds": 2.0' in body
    assert '"engine"' not in body
    with pytest.raises(ValueError, match="step_seconds"):
        switch.set("slow_decode", step_seconds=0)
    with pytest.raises(ValueError, match="engine"):
        switch.set("engine_hang", engine=-1)
