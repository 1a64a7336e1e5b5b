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
