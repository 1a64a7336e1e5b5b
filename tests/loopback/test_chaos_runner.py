"""The chaos runner: schema errors, the probers' kill arithmetic, a sim scenario end to end."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import shutil
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from rich.console import Console

from chaos import report
from chaos.analysis import summarize
from chaos.blackbox import BlackboxArithmetic, BlackboxSettings, probe_outcome
from chaos.naive import NaiveCanary, NaiveResult
from chaos.prober import Kill, KillArithmetic, ProbeSettings
from chaos.records import CanaryPoint, Event, ResultInbox, RunRecord, Sample, ScrapePoint
from chaos.runner import ScenarioRun
from chaos.scenario import MANIFEST, BlackboxSpec, ScenarioError, load_scenario, parse_scenario
from chaos.targets import SimTarget
from sentinel.canary.catalog import load_catalog
from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind

VALID: dict[str, Any] = {
    "name": "t",
    "target": {"kind": "sim"},
    "fault": {"kind": "engine_hang", "start": 1, "duration": 2},
}


def _with(path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(VALID)
    node = data
    *parents, leaf = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "key"),
    [
        ("fault.kind", "meltdown", "fault.kind"),
        ("fault.when", 3, "fault.when"),
        ("target.kind", "tgi", "target.kind"),
        ("load.concurrency", 0, "load.duration"),  # duration missing is reported too
        ("expect.detect_within", -1, "expect.detect_within"),
        ("expect.hang_kinds", ["corupt"], "expect.hang_kinds"),  # no rule confirms it
        ("fault.process", "worker", "fault.process"),
        ("sentinel.hang_window", "soon", "sentinel"),
        ("sentinel.listen", "127.0.0.1:1", "sentinel.listen"),
        ("blackbox", {"interval": 5, "scrape_timeout": 20}, "blackbox.scrape_timeout"),
        ("blackbox.failure_threshold", 0, "blackbox.failure_threshold"),
        ("target.sim_options", {"kv_cache_token": 4096}, "target.sim_options"),
        ("target.sim_options", {"max_num_seqs": 4}, "target.sim_options"),  # the runner's
        ("target.extra_args", ["--max-num-batched-tokens", "64"], "target.extra_args"),
        (
            "fault",
            {"kind": "weight_update", "duration": 2, "params": {"pause": "soon"}},
            "fault.params.pause",
        ),
    ],
)
def test_schema_errors_name_the_file_and_the_key(path: str, value: Any, key: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(_with(path, value), "scenarios/x.yaml")
    message = str(caught.value)
    assert message.startswith("scenarios/x.yaml: ")
    assert f": {key}" in message, message


@pytest.mark.parametrize(
    ("fault", "key"),
    [
        ({"kind": "long_prefill", "duration": 5}, "fault.kind"),  # simulator only
        ({"kind": "metrics_401", "duration": 5}, "fault.kind"),
        ({"kind": "pause", "duration": 5, "params": {"mode": "later"}}, "fault.params.mode"),
        ({"kind": "pause", "duration": 5, "params": {"level": 1}}, "fault.params"),
    ],
)
def test_vllm_targets_take_only_the_faults_they_can(fault: dict[str, Any], key: str) -> None:
    data = {**VALID, "target": {"kind": "vllm"}, "fault": {"start": 1, **fault}}
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(data, "scenarios/x.yaml")
    assert f": {key}:" in str(caught.value), caught.value
    if fault["kind"] == "pause":  # a real vLLM pauses through its own dev-mode route
        data["fault"] = {"kind": "pause", "start": 1, "duration": 5, "params": {"mode": "keep"}}
        data["target"] = {"kind": "vllm", "environment": {"VLLM_SERVER_DEV_MODE": "1"}}
        assert parse_scenario(data, "inline").target.environment == {"VLLM_SERVER_DEV_MODE": "1"}


def test_sim_options_are_the_simulators_and_key_the_server() -> None:
    base = {**VALID, "fault": {"kind": "sleep", "duration": 5, "params": {"level": 1}}}
    asleep = parse_scenario(
        {**base, "target": {"kind": "sim", "sim_options": {"dev_mode": True}}}, "inline"
    )
    plain = parse_scenario({**base, "target": {"kind": "sim"}}, "inline")
    env = parse_scenario(
        {**base, "target": {"kind": "sim", "environment": {"VLLM_SERVER_DEV_MODE": "1"}}},
        "inline",
    )
    keys = {s.target.server_key() for s in (asleep, plain, env)}
    assert len(keys) == 3  # none of them can share the others' server


@pytest.mark.parametrize(
    "kind",
    [
        "long_prefill",
        "sleep",
        "pause",
        "weight_update",
        "compile_step",
        "slow_image",
        "metrics_401",
    ],
)
def test_every_kill_during_a_legitimate_stall_is_false(kind: str) -> None:
    record = _hang_record()
    scenario = parse_scenario(
        {
            **VALID,
            "fault": {"kind": kind, "start": 5, "duration": 10},
            "expect": {"no_liveness_failure": True},
        },
        "inline",
    )
    assert not scenario.fault.harmful
    record.scenario = scenario
    summary = summarize(record)
    assert summary.sentinel.kills.detection_s is None
    assert summary.sentinel.kills.false_kills == 2
    assert (summary.blackbox.kills.detection_s, summary.blackbox.kills.false_kills) == (None, 2)
    assert not summary.passed
    assert [c.detail for c in summary.checks] == ["9 red samples, 2 would-be kills"]


async def test_sim_weight_update_pauses_first_as_rl_frameworks_do(tmp_path: Path) -> None:
    scenario = parse_scenario(
        {
            **VALID,
            "target": {"kind": "sim", "sim_options": {"dev_mode": True}},
            "fault": {
                "kind": "weight_update",
                "duration": 5,
                "params": {"operation": "update", "version": "v2", "pause": "keep"},
            },
        },
        "inline",
    )
    target = SimTarget(scenario.target, tmp_path / "sim")
    try:
        await target.start()
        assert target.sim is not None
        said = await target.inject(scenario)
        assert said.startswith("fault pause {'mode': 'keep'}, then fault weight_update")
        faults = {f["name"]: f["params"] for f in target.sim.control.faults()}
        assert faults["pause"]["mode"] == "keep"
        assert faults["weight_update"]["version"] == "v2"
        assert "pause" not in faults["weight_update"]
        await target.clear(scenario)
        assert target.sim.control.faults() == []
    finally:
        await target.stop()


def test_schema_error_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(_with("fault.duration", None)))
    with pytest.raises(ScenarioError, match=rf"{path}: fault.duration: required"):
        load_scenario(path)


def test_every_shipped_scenario_is_valid() -> None:
    paths = sorted((Path(__file__).parents[2] / "chaos" / "scenarios").glob("*.yaml"))
    assert paths
    names = [load_scenario(p).name for p in paths]
    assert len(set(names)) == len(names)
    assert {n.removeprefix("sim-").removeprefix("vllm-") for n in names} >= {
        "engine-hang",
        "sigstop-engine",
        "structured-hang",
        "multimodal-hang",
        "slow-decode",
        "saturation",
        "sigkill-engine",
    }


def test_probe_settings_come_from_the_manifest() -> None:
    settings = ProbeSettings.from_manifest(MANIFEST)
    spec = yaml.safe_load_all(MANIFEST.read_text())
    deployment = next(d for d in spec if d and d.get("kind") == "Deployment")
    vllm = next(c for c in deployment["spec"]["template"]["spec"]["containers"])
    probe = vllm["livenessProbe"]
    assert settings == ProbeSettings(
        float(probe["periodSeconds"]),
        float(probe["timeoutSeconds"]),
        int(probe["failureThreshold"]),
        float(probe["terminationGracePeriodSeconds"]),
    )


def test_kill_arithmetic_on_a_scripted_sequence() -> None:
    arithmetic = KillArithmetic(ProbeSettings(period=5, timeout=3, failure_threshold=3, grace=10))
    script = [
        (0, True),
        (5, False),
        (10, False),
        (15, True),  # the streak resets: no kill
        (20, False),
        (25, False),
        (30, False),  # third in a row: kill, SIGKILL at 40
        (35, False),  # the container is being replaced: not counted
        (40, False),  # counting starts afresh
        (45, False),
        (50, False),  # kill again
        (55, True),
    ]
    kills = [kill for at, ok in script if (kill := arithmetic.feed(at, ok)) is not None]
    assert [(k.at, k.sigkill_at, k.streak_started) for k in kills] == [
        (30, 40, 20),
        (50, 60, 40),
    ]
    assert arithmetic.kills == kills


def test_blackbox_modules_keep_their_own_streaks_and_share_a_restart() -> None:
    arithmetic = BlackboxArithmetic(BlackboxSettings(15, 10, failure_threshold=3, grace=10))
    script = [
        ("vllm_health", 0, True),
        ("vllm_completion", 0, False),
        ("vllm_health", 15, False),
        ("vllm_completion", 15, True),  # the completion streak resets
        ("vllm_health", 30, True),
        ("vllm_completion", 30, False),
        ("vllm_health", 45, False),
        ("vllm_completion", 45, False),
        ("vllm_health", 60, False),  # health: 2 in a row, completion: 2 in a row
        ("vllm_completion", 60, False),  # completion's third: restart, SIGKILL at 70
        ("vllm_health", 62, False),  # health's third comes inside the restart: not counted
        ("vllm_health", 75, False),
        ("vllm_health", 90, False),
        ("vllm_health", 105, False),  # a fresh streak of three after the restart
    ]
    kills = [k for m, at, ok in script if (k := arithmetic.feed(m, at, ok)) is not None]
    assert [(k.at, k.sigkill_at, k.streak_started, k.by) for k in kills] == [
        (60, 70, 30, "vllm_completion"),
        (105, 115, 75, "vllm_health"),
    ]
    assert arithmetic.kills == kills


def test_blackbox_settings_scale_with_the_scenarios_prober() -> None:
    manifest = ProbeSettings.from_manifest(MANIFEST)
    # a scenario with the manifest's own prober: Prometheus's usual 15 s / 10 s
    assert BlackboxSettings.for_scenario(BlackboxSpec(), manifest, manifest.period) == (
        BlackboxSettings(15.0, 10.0, 3, manifest.grace)
    )
    # the simulator scenarios probe every 1 s instead of 5 s: one fifth of each
    fast = ProbeSettings(period=1, timeout=1, failure_threshold=3, grace=3)
    scaled = BlackboxSettings.for_scenario(BlackboxSpec(), fast, 5.0)
    assert (scaled.interval, scaled.scrape_timeout, scaled.grace) == (3.0, 2.0, 3)
    stated = BlackboxSpec(interval=30, scrape_timeout=25, failure_threshold=5)
    assert BlackboxSettings.for_scenario(stated, fast, 5.0) == BlackboxSettings(30, 25, 5, 3)


@pytest.mark.parametrize(
    ("text", "outcome"),
    [
        ("probe_success 1\nprobe_http_status_code 200\n", (True, "ok")),
        (
            "probe_success 0\nprobe_http_status_code 200\nprobe_failed_due_to_regex 1\n",
            (False, "body regexp"),
        ),
        ("probe_success 0\nprobe_http_status_code 503\n", (False, "http 503")),
        ("probe_success 0\nprobe_http_status_code 0\n", (False, "no answer")),
        ("# HELP up\n", (False, "no probe_success")),
    ],
)
def test_probe_outcome_reads_the_exporters_answer(text: str, outcome: tuple[bool, str]) -> None:
    assert probe_outcome(text) == outcome


def test_naive_canary_trips_once_failures_span_the_hang_window() -> None:
    spec = next(s for s in load_catalog(None).enabled() if s.kind.value == "text")
    naive = NaiveCanary("http://127.0.0.1:1", "m", spec, hang_window=15)
    assert naive.body["priority"] == 0
    assert naive.body["messages"] == list(spec.request["messages"])
    assert naive.verdict(NaiveResult(0, 8, False, "timeout")) is None
    assert not naive.tripped
    trip = naive.verdict(NaiveResult(8, 8, False, "timeout"))
    assert trip is not None
    assert (trip.at, trip.failures) == (16, 2)
    assert naive.tripped
    assert naive.verdict(NaiveResult(16, 0.1, True, "ok")) is None
    assert not naive.tripped


def _hang_record() -> RunRecord:
    """A scripted engine hang: fault 10-20 s, /livez red at 14 s, green at 23 s."""
    scenario = parse_scenario(
        {
            **VALID,
            "fault": {"kind": "engine_hang", "start": 5, "duration": 10},
            "expect": {"detect_within": 5, "hang_kinds": ["engine"], "green_again_within": 5},
        },
        "inline",
    )
    record = RunRecord(scenario, ProbeSettings(period=1, timeout=1, failure_threshold=2, grace=2))
    record.ready_at, record.fault_start, record.fault_end, record.end = 5.0, 10.0, 20.0, 30.0
    for at in range(5, 30):
        red = 14 <= at < 23
        record.samples.append(
            Sample(float(at), 503 if red else 200, 200, 200, 200, ["engine"] if red else [])
        )
    record.canaries = [
        CanaryPoint("text", 8.0, 0.2, True, "ok"),
        CanaryPoint("text", 11.0, 1.5, False, "timeout"),
        CanaryPoint("structured", 12.0, 1.5, False, "timeout"),
    ]
    record.kills = {"sentinel": [Kill(16.0, 18.0, 14.0), Kill(3.0, 5.0, 2.0)], "vllm_health": []}
    record.events = [Event(10.0, "inject")]
    record.blackbox_settings = BlackboxSettings(3, 2, 3, 2)
    for at in range(0, 30, 3):
        hung = 10 <= at < 20
        record.blackbox += [
            ScrapePoint("vllm_health", float(at), 0.01, True, "ok"),
            ScrapePoint(
                "vllm_completion",
                float(at),
                1.5 if hung else 0.1,
                not hung,
                "no answer" if hung else "ok",
            ),
        ]
    record.blackbox[3] = ScrapePoint("vllm_completion", 3.0, 0.1, False, "http 503")
    record.kills["blackbox"] = [
        Kill(19.5, 21.5, 13.5, "vllm_completion"),
        Kill(4.5, 6.5, 4.5, "vllm_health"),  # scripted: a false one before the fault
    ]
    return record


def test_summary_figures_from_a_scripted_record() -> None:
    summary = summarize(_hang_record())
    sentinel = summary.sentinel
    assert sentinel.livez_red_s == 4.0
    assert sentinel.hang_kinds == ("engine",)
    assert sentinel.green_again_s == 3.0
    assert sentinel.first_failed_canary is not None
    assert (sentinel.first_failed_canary.at_s, sentinel.first_failed_canary.kind) == (2.5, "text")
    assert sentinel.kills.would_kill_at == (16.0, 3.0)
    assert (sentinel.kills.detection_s, sentinel.kills.false_kills) == (6.0, 1)
    text = sentinel.canary_latency["text"]
    assert (text.all.count, text.all.failed, text.during_fault.count) == (2, 1, 1)
    assert summary.vllm_health.stayed_200_during_fault
    blackbox = summary.blackbox
    assert blackbox.ran
    assert blackbox.first_failure_s == 3.5  # the scrape at 12 s gave up at 13.5 s
    completion = blackbox.modules["vllm_completion"]
    assert (completion.scrapes, completion.failed) == (10, 4)
    assert blackbox.modules["vllm_health"].failed == 0
    assert (blackbox.kills.detection_s, blackbox.kills.false_kills) == (9.5, 1)
    assert blackbox.killed_by == ("vllm_completion", "vllm_health")
    assert [c.ok for c in summary.checks] == [True, True, True]
    assert summary.passed


def test_summary_fails_a_check_it_does_not_meet() -> None:
    record = _hang_record()
    record.samples = [s for s in record.samples if s.at < 14]  # never red
    summary = summarize(record)
    assert not summary.passed
    assert [c.detail for c in summary.checks if not c.ok] == [
        "never red",
        "seen []",
        "not green again",
    ]


def test_summary_json_keeps_the_report_shape() -> None:
    doc = summarize(_hang_record()).to_json()
    assert doc["sentinel"]["detection_s"] == 6.0
    assert doc["sentinel"]["false_kills"] == 1
    assert doc["sentinel"]["hang_kinds"] == ["engine"]
    assert doc["sentinel"]["canary_latency"]["text"]["all"]["count"] == 2
    assert doc["vllm_health"]["would_kill_at"] == []
    assert doc["blackbox"]["would_kill_at"] == [19.5, 4.5]
    assert (doc["blackbox"]["detection_s"], doc["blackbox"]["false_kills"]) == (9.5, 1)
    assert doc["blackbox"]["settings"] == {
        "interval": 3,
        "scrape_timeout": 2,
        "failure_threshold": 3,
        "grace": 2,
    }
    assert doc["blackbox"]["modules"]["vllm_completion"]["failures_seen"] == [
        "http 503",
        "no answer",
    ]
    assert doc["prober"] == {"period": 1, "timeout": 1, "failure_threshold": 2, "grace": 2}
    assert doc["events"] == [{"at_s": 10.0, "what": "inject"}]
    assert doc["checks"][0] == {
        "check": "/livez red within 5s",
        "ok": True,
        "detail": "red after 4.0s",
    }
    assert json.loads(json.dumps(doc)) == doc


def test_report_shows_blackbox_beside_the_other_baselines() -> None:
    table = report.markdown([summarize(_hang_record())])
    header = next(line for line in table.splitlines() if line.startswith("| scenario | target"))
    row = next(line for line in table.splitlines() if line.startswith("| t | sim"))
    cells = dict(zip(header.split(" | "), row.split(" | "), strict=True))
    assert (cells["blackbox fail"], cells["blackbox kill"]) == ("3.5", "9.5")
    assert cells["false kills (sentinel / health / naive / blackbox)"] == "1 / 0 / 0 / 1"
    assert "| t | 1 / 1 / 2 / 2 | 3 / 2 / 3 | vllm_completion, vllm_health |" in table
    record = _hang_record()
    record.kills["blackbox"].append(Kill(25.0, 27.0, 22.0, "vllm_completion"))
    table = report.markdown([summarize(record)])
    assert "| t | 1 / 1 / 2 / 2 | 3 / 2 / 3 | vllm_completion x2, vllm_health |" in table


def test_blackbox_not_run_is_reported_not_raised(tmp_path: Path) -> None:
    record = _hang_record()
    record.blackbox, record.kills["blackbox"] = [], []
    record.blackbox_not_run = "prometheus-blackbox-exporter not found on PATH"
    summary = summarize(record)
    assert not summary.blackbox.ran
    assert summary.passed  # a missing baseline is no failure of sentinel's
    assert summary.to_json()["blackbox"]["not_run"] == record.blackbox_not_run
    table = report.markdown([summary])
    row = next(line for line in table.splitlines() if line.startswith("| t | sim"))
    assert "| not run | not run | 1 / 0 / 0 / not run |" in row
    paths = report.write([(summary, record)], tmp_path / "report")
    assert paths["png"].stat().st_size > 10_000


async def test_runner_goes_on_without_the_exporter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    scenario = parse_scenario(VALID, "inline")
    console_out = io.StringIO()
    run = ScenarioRun(
        scenario, SimTarget(scenario.target, tmp_path), tmp_path, Console(file=console_out)
    )
    async with contextlib.AsyncExitStack() as stack:
        assert await run._blackbox(stack) is None
    assert run.record.blackbox_not_run is not None
    assert "make prometheus-tools" in run.record.blackbox_not_run
    assert "blackbox_exporter baseline not run" in console_out.getvalue()


def test_result_inbox_hands_over_every_result_once() -> None:
    inbox = ResultInbox(origin=100.0)
    results = [
        CanaryResult("text", CanaryKind.TEXT, Reason.OK, 100.0 + i, 0.1) for i in range(2000)
    ]

    def write() -> None:
        for result in results:
            inbox.put(result)

    writer = threading.Thread(target=write)
    taken: list[CanaryPoint] = []
    writer.start()
    while writer.is_alive():
        taken += inbox.take()
    writer.join()
    taken += inbox.take()
    assert [p.started for p in taken] == [float(i) for i in range(2000)]
    assert taken[0] == CanaryPoint("text", 0.0, 0.1, True, "ok")


async def test_sim_engine_hang_end_to_end(tmp_path: Path) -> None:
    scenario = parse_scenario(
        {
            "name": "sim-engine-hang-short",
            "target": {"kind": "sim"},
            "sentinel": {
                "scrape_interval": 0.5,
                "scrape_timeout": 2,
                "health_interval": 0.5,
                "process_interval": 0.5,
                "eval_interval": 0.25,
                "idle_window": 2,
                "hang_window": 3,
                "no_evidence_window": 5,
                "diagnostics": False,
                "canaries": {
                    "text": {"interval": 1, "deadline": 1.5, "jitter": 0},
                    "structured": {"interval": 2, "deadline": 1.5},
                    "multimodal": {"interval": 2, "deadline": 1.5},
                    "correctness": {"interval": 2, "deadline": 1.5},
                },
            },
            "prober": {"period": 1, "timeout": 1, "failure_threshold": 2, "grace": 2},
            "fault": {"kind": "engine_hang", "start": 3, "duration": 9},
            "observe_after": 12,
            "startup_timeout": 20,
            "expect": {"detect_within": 9, "vllm_health_stays_200": True},
        },
        "inline",
    )
    target = SimTarget(scenario.target, tmp_path / "sim")
    console = Console(file=io.StringIO())
    try:
        await target.start()
        assert target.sim is not None
        engine_pid = target.sim.engine_pid
        record = await ScenarioRun(scenario, target, tmp_path / "run", console).run()
    finally:
        await target.stop()
    assert not psutil.pid_exists(engine_pid) or psutil.Process(engine_pid).status() == "zombie"
    assert record.error is None, record.error
    summary = summarize(record)
    sentinel, health = summary.sentinel, summary.vllm_health
    assert summary.passed, summary.checks
    assert sentinel.livez_red_s is not None
    assert sentinel.livez_red_s <= 9
    assert sentinel.hang_kinds == ("engine",)
    assert sentinel.kills.detection_s is not None  # the prober would have killed during the hang
    assert sentinel.kills.false_kills == 0
    assert health.codes_seen == ("200",)
    assert health.kills.would_kill_at == ()
    assert summary.naive.kills.false_kills == 0
    blackbox = summary.blackbox
    if shutil.which("prometheus-blackbox-exporter") or shutil.which("blackbox_exporter"):
        # scraped every 3 s (15 s scaled like the prober's 1 s period): the hung
        # engine fails the completion probe while vLLM's /health keeps passing
        assert blackbox.ran, blackbox.not_run
        assert blackbox.modules["vllm_completion"].failed > 0
        assert blackbox.modules["vllm_completion"].first_failure_s is not None
        assert blackbox.modules["vllm_health"].failed == 0
        assert blackbox.kills.false_kills == 0
    else:
        assert not blackbox.ran
    assert sentinel.green_again_s is not None
    # canary results came over through sentinel's result listener, each once; a
    # canary answered late gives a second result (same start, the late duration)
    assert {c.kind for c in record.canaries} >= {"text"}
    once = {(c.kind, c.started, c.duration) for c in record.canaries}
    assert len(once) == len(record.canaries)
    starts: dict[tuple[str, float], list[CanaryPoint]] = {}
    for point in record.canaries:
        starts.setdefault((point.kind, point.started), []).append(point)
    for first, *later in starts.values():
        assert len(later) <= 1, [first, *later]
        assert all(not first.ok and p.duration > first.duration for p in later), [first, *later]
    docs = tmp_path / "docs"
    paths = report.write(
        [(summary, record)],
        tmp_path / "report",
        latest=tmp_path / "latest",
        docs=docs,
        docs_name="sim-report",
    )
    for path in (paths["png"], tmp_path / "report" / "sim-engine-hang-short.png"):
        assert path.stat().st_size > 10_000
    assert "| sim-engine-hang-short | sim | engine_hang |" in paths["markdown"].read_text()
    assert (tmp_path / "latest" / "report.json").exists()
    # The committed table is the run's own (make chaos-sim), never copied by hand.
    assert (docs / "sim-report.md").read_text() == paths["markdown"].read_text()
    assert sorted(p.name for p in docs.iterdir()) == ["sim-report.md", "sim-report.png"]
