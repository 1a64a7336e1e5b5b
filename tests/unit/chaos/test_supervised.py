"""The supervised runs' pure parts: each checker's probes, what passes, and the report's cells."""

from __future__ import annotations

from pathlib import Path

from chaos.kubelet_state import Event, KubeletSettings, recovery
from chaos.scenario import SCENARIO_DIR, load_scenario
from chaos.supervised import Options, SupervisedRecord, kubelet_settings, time_scale
from chaos.supervised_report import cell, markdown, read, write


def test_each_checker_aims_the_shipped_probes_at_its_own_endpoint() -> None:
    sim = load_scenario(SCENARIO_DIR / "sim-engine-hang.yaml")
    shipped = KubeletSettings.from_manifest()
    assert shipped.liveness is not None
    assert time_scale(sim) == 0.2
    ours = kubelet_settings(sim, "sentinel")
    assert ours.liveness is not None
    assert ours.liveness.path == "/livez"
    assert ours.liveness.period == shipped.liveness.period * 0.2
    assert ours.liveness.failure_threshold == shipped.liveness.failure_threshold
    health = kubelet_settings(sim, "vllm_health")
    assert {s.path for _, s in health.probes()} == {"/health"}
    blackbox = kubelet_settings(sim, "blackbox")
    assert blackbox.liveness is None  # an alert kills, not a probe
    assert blackbox.startup is not None
    assert blackbox.startup.path == "/health"
    real = load_scenario(SCENARIO_DIR / "vllm-engine-hang.yaml")
    assert time_scale(real) == 1.0
    assert kubelet_settings(real, "sentinel") == shipped


def test_the_promise_and_the_watch_scale_with_the_scenario() -> None:
    assert Options().recover_limit(1.0) == 300.0
    assert Options().watch(1.0) == 600.0
    assert Options().recover_limit(0.2) == 60.0
    assert Options(recover_within=5.0, watch_after=1.0).watch(0.2) == 1.0


def _record(harmful: bool, events: list[Event], fault_at: float | None = 10.0) -> SupervisedRecord:
    record = SupervisedRecord("s", "sentinel", "sim", "engine_hang", harmful, fault_at=fault_at)
    record.events = events
    if fault_at is not None:
        record.figures = recovery(events, fault_at)
    return record


HANG = [
    Event(0.0, "start", 0),
    Event(5.0, "ready", 0, "readiness"),
    Event(14.0, "probe_failure", 0, "liveness", "503"),
    Event(17.0, "kill", 0, "liveness"),
    Event(18.0, "exit", 0, "liveness", "exit code -9"),
    Event(18.0, "restart", 1),
    Event(18.0, "start", 1),
    Event(30.0, "ready", 1, "readiness"),
]


def test_a_fault_passes_with_one_restart_and_the_new_server_serving() -> None:
    record = _record(True, HANG)
    assert record.restarts == 1
    assert record.false_restarts == 0
    assert not record.passed  # not yet served
    record.served_at = 31.0
    assert record.passed
    assert cell(record) == "4.0 -> 20.0 (1)"
    again = _record(True, [*HANG, Event(40.0, "restart", 2)])
    again.served_at = 31.0
    assert again.false_restarts == 1
    assert not again.passed
    assert "1 FALSE" in cell(again)


def test_a_working_server_passes_only_unrestarted() -> None:
    calm = _record(False, HANG[:2])
    assert calm.passed
    assert cell(calm) == "0 restarts"
    killed = _record(False, HANG)
    assert killed.false_restarts == 1
    assert not killed.passed


def test_a_crash_and_a_hang_never_recovered_read_as_such() -> None:
    crash = [e for e in HANG if e.kind not in ("probe_failure", "kill")]
    crash[2] = Event(18.0, "exit", 0, "", "exit code 1")
    record = _record(True, crash)
    record.served_at = 31.0
    assert cell(record) == "crash -> 20.0 (1)"
    never = _record(True, HANG[:2])
    assert cell(never) == "- -> never (0)"
    table = markdown([record, never])
    assert table.count("| s | sim | engine_hang |") == 1  # one row per scenario


def test_an_alert_kill_is_its_detection_and_the_pod_deletion_is_no_kill() -> None:
    alert = [
        Event(0.0, "start", 0),
        Event(5.0, "ready", 0, "readiness"),
        Event(19.5, "kill", 0, "blackbox", "blackbox alert on vllm_completion"),
        Event(20.0, "exit", 0, "blackbox"),
        Event(20.0, "start", 1),
        Event(31.0, "ready", 1, "readiness"),
    ]
    record = _record(True, alert)
    assert cell(record).startswith("9.5 -> 21.0")
    deleted = _record(True, [*HANG[:2], Event(70.0, "kill", 0, "", "pod deleted")])
    assert "kill" not in deleted.figures
    assert cell(deleted) == "- -> never (0)"


def test_a_written_report_reads_back_to_the_same_table(tmp_path: Path) -> None:
    record = _record(True, HANG)
    record.served_at = 31.0
    paths = write([record, _record(False, HANG[:2])], tmp_path)
    again = read(paths["json"])
    assert markdown(again) == paths["markdown"].read_text(encoding="utf-8")
    assert again[0].events == HANG
