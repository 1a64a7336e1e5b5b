"""Legitimate stalls against hangs in the same clothes, on a virtual clock.

Each working-server case below must stay green for minutes of stall; the hung
server dressed the same way (same gauges, same canaries, no work) must turn
red. Times are plain seconds; nothing sleeps or reads a clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.evidence.compilers import compilers_under
from sentinel.evidence.metrics import parse_vllm_metrics
from sentinel.progress.path_traffic import PathTraffic
from sentinel.progress.prefill import PrefillWatch
from sentinel.record.lifecycle import LifecycleTracker, Readings, phase_of
from sentinel.verdict import (
    EngineProgress,
    Evidence,
    HangKind,
    KindEvidence,
    Lifecycle,
    Phase,
    Policy,
    VerdictState,
    evaluate,
)
from sentinel.verdict.stall import COMPILE, CompileSection

TEXT = CanaryKind.TEXT
STRUCTURED = CanaryKind.STRUCTURED


def ok(sent: float, kind: CanaryKind = TEXT) -> CanaryResult:
    return CanaryResult(f"{kind}-canary", kind, Reason.OK, sent, 0.3)


def timeout(sent: float, kind: CanaryKind = TEXT, **fields: object) -> CanaryResult:
    return CanaryResult(f"{kind}-canary", kind, Reason.TIMEOUT, sent, 8.0, **fields)  # type: ignore[arg-type]


def canaries_every(start: float, end: float, step: float = 9.0) -> tuple[CanaryResult, ...]:
    """A text canary timing out every ``step`` seconds: a server that answers nothing."""
    out: list[CanaryResult] = [ok(1.0)]
    t = start
    while t + 8.0 <= end:
        out.append(timeout(t))
        t += step
    return tuple(out)


def run(
    end: float, evidence_at: Callable[[float], Evidence], policy: Policy | None = None
) -> list[tuple[float, bool, bool, str]]:
    """Evaluate every second up to ``end``: (now, live, ready, liveness reason)."""
    state, seen = VerdictState(), []
    for now in range(2, int(end) + 1):
        state, verdict = evaluate(state, evidence_at(float(now)), policy or Policy(), float(now))
        seen.append(
            (float(now), verdict.liveness.ok, verdict.readiness.ok, verdict.liveness.reason)
        )
    return seen


def base(now: float, **fields: object) -> Evidence:
    results = tuple(r for r in canaries_every(10.0, 1_000.0) if r.finished <= now)
    return Evidence(
        kinds={TEXT: KindEvidence(TEXT, results=results)},
        progress_available=True,
        last_progress_at=0.5,
        last_evidence_at=now,
        sampled_at=now,
        **fields,  # type: ignore[arg-type]
    )


def first_red(seen: list[tuple[float, bool, bool, str]]) -> float | None:
    return next((t for t, live, _, _ in seen if not live), None)


# --- prefill is work ------------------------------------------------------------


def test_a_long_chunked_prefill_setting_kv_highs_stays_alive_for_minutes() -> None:
    """A 471 s prefill: no counter moves, KV-cache highs every sample keep it alive."""

    def at(now: float) -> Evidence:
        last_high = now - (now % 2.0)  # a scrape every 2 s shows a new high
        return base(now, last_prefill_at=last_high)

    assert first_red(run(480.0, at)) is None


def test_the_same_server_with_kv_frozen_is_an_engine_hang() -> None:
    def at(now: float) -> Evidence:
        return base(now, last_prefill_at=min(now, 12.0))  # highs stop at 12 s: hung

    red = first_red(run(120.0, at))
    assert red is not None
    assert red <= 45.0


def test_prefill_watch_counts_highs_not_churn_nor_admissions() -> None:
    watch = PrefillWatch()
    gauges = {"running": 1.0, "waiting": 1.0, "kv_cache_usage": 0.10}
    assert not watch.observe(gauges, 0.0, canaries=1, progressed=False)  # first sample
    # chunk after chunk, the same prompt running, the canary waiting
    for i in range(1, 6):
        g = dict(gauges, kv_cache_usage=0.10 + 0.05 * i)
        assert watch.observe(g, 2.0 * i, canaries=1, progressed=False)
    assert watch.last_at == 10.0
    # churn: down and back up to the old high is no new maximum
    assert not watch.observe(dict(gauges, kv_cache_usage=0.2), 12.0, canaries=1, progressed=False)
    assert not watch.observe(dict(gauges, kv_cache_usage=0.35), 14.0, canaries=1, progressed=False)
    # an admission (running grew) raising the cache is no prefill work, nor later
    g = {"running": 2.0, "waiting": 0.0, "kv_cache_usage": 0.5}
    assert not watch.observe(g, 16.0, canaries=1, progressed=False)
    assert not watch.observe(g, 18.0, canaries=1, progressed=False)
    # only sentinel's canary running: not a real request's prefill
    lone = PrefillWatch()
    assert not lone.observe(
        {"running": 1.0, "waiting": 0.0, "kv_cache_usage": 0.1}, 0.0, canaries=1, progressed=False
    )
    assert not lone.observe(
        {"running": 1.0, "waiting": 0.0, "kv_cache_usage": 0.2}, 2.0, canaries=1, progressed=False
    )


# --- lifecycle ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("readings", "phase"),
    [
        pytest.param(Readings(), Phase.AWAKE, id="nothing-known"),
        pytest.param(
            Readings(gauges={"sleep_awake": 0.0, "sleep_weights_offloaded": 1.0}),
            Phase.ASLEEP,
            id="sleep-gauge",
        ),
        pytest.param(
            Readings(gauges={"sleep_awake": 1.0}, is_sleeping=True, is_paused=True),
            Phase.PAUSED,
            id="0.32-pause-says-sleeping-too",
        ),
        pytest.param(
            Readings(gauges={"sleep_awake": 1.0}, is_sleeping=True),
            Phase.PAUSED,
            id="sleeping-endpoint-but-gauge-awake",
        ),
        pytest.param(Readings(is_sleeping=True), Phase.ASLEEP, id="old-release-no-gauge"),
        pytest.param(Readings(gauges={"weight_updates": 1.0}), Phase.PAUSED, id="weight-update"),
        pytest.param(Readings(maintenance="rl sync"), Phase.PAUSED, id="maintenance-window"),
        pytest.param(
            Readings(gauges={"sleep_awake": 1.0}, is_sleeping=False, is_paused=False),
            Phase.AWAKE,
            id="awake",
        ),
    ],
)
def test_the_phase_from_every_source(readings: Readings, phase: Phase) -> None:
    assert phase_of(readings)[0] is phase


def test_sleep_gauge_parsed_from_an_exposition() -> None:
    text = (
        'vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="awake"} 0.0\n'
        'vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="discard_all"} 1.0\n'
        'vllm:rl_weight_update_operations_in_flight{engine="0",model_name="m"} 0.0\n'
    )
    sample = parse_vllm_metrics(text, 1.0)
    assert sample.gauges["sleep_discard_all"] == 1.0
    assert sample.gauges["sleep_awake"] == 0.0
    assert phase_of(Readings(gauges=sample.gauges))[0] is Phase.ASLEEP


def stalled(phase: Phase, since: float, until: float | None) -> Callable[[float], Evidence]:
    def at(now: float) -> Evidence:
        if until is None or now < until:
            life = Lifecycle(phase, since, "test") if now >= since else Lifecycle()
        else:
            life = Lifecycle(Phase.AWAKE, until, "", resumed_at=until)
        return base(now, lifecycle=life)

    return at


@pytest.mark.parametrize("phase", [Phase.ASLEEP, Phase.PAUSED])
def test_no_hang_while_asleep_or_paused_and_readiness_names_it(phase: Phase) -> None:
    seen = run(600.0, stalled(phase, 5.0, None), Policy(pause_bound=10_000.0))
    assert first_red(seen) is None
    assert all(not ready for t, _, ready, _ in seen if t > 5.0)


def test_a_hang_right_after_wake_up_is_red_within_45s() -> None:
    seen = run(400.0, stalled(Phase.ASLEEP, 5.0, 300.0))
    red = first_red(seen)
    assert red is not None
    assert 300.0 < red <= 345.0


def test_after_resume_every_kind_passes_again_before_ready() -> None:
    life = Lifecycle(Phase.AWAKE, 50.0, "", resumed_at=50.0)
    kinds = {
        TEXT: KindEvidence(TEXT, results=(ok(10.0), ok(55.0))),
        STRUCTURED: KindEvidence(STRUCTURED, path=True, results=(ok(10.0),)),
    }
    ev = Evidence(kinds=kinds, progress_available=True, last_progress_at=56.0, lifecycle=life)
    state = replace(VerdictState(), epoch=0, startup_passed=True)
    _, verdict = evaluate(state, ev, Policy(), 60.0)
    assert verdict.liveness.ok
    assert not verdict.readiness.ok
    assert "structured" in verdict.readiness.reason
    kinds[STRUCTURED] = KindEvidence(STRUCTURED, path=True, results=(ok(10.0), ok(56.0)))
    _, verdict = evaluate(state, replace(ev, kinds=kinds), Policy(), 60.0)
    assert verdict.readiness.ok


def test_a_pause_past_its_bound_is_an_alert_not_a_restart() -> None:
    seen = run(200.0, stalled(Phase.PAUSED, 5.0, None), Policy(pause_bound=60.0))
    assert first_red(seen) is None
    state = VerdictState()
    for now in range(2, 80):
        state, verdict = evaluate(
            state, stalled(Phase.PAUSED, 5.0, None)(float(now)), Policy(pause_bound=60.0), now
        )
    assert [h.kind for h in verdict.hangs] == [HangKind.PAUSED]


def test_dead_engine_while_asleep_is_still_dead() -> None:
    def at(now: float) -> Evidence:
        return replace(stalled(Phase.ASLEEP, 5.0, None)(now), engine_down_since=20.0)

    red = first_red(run(60.0, at))
    assert red is not None
    assert red <= 30.0


# --- a long compile step ----------------------------------------------------------


def test_a_busy_compiler_under_the_engine_holds_within_the_grace() -> None:
    def at(now: float) -> Evidence:
        return base(now, sections={COMPILE.name: CompileSection(since=11.0)})

    assert first_red(run(200.0, at, Policy(compile_grace=300.0))) is None
    red = first_red(run(200.0, at, Policy(compile_grace=60.0)))
    assert red is not None
    assert 71.0 <= red <= 75.0


def test_a_spinning_engine_without_a_compiler_is_judged_as_today() -> None:
    red = first_red(run(120.0, base))
    assert red is not None
    assert red <= 45.0


def test_compilers_found_under_the_engine_through_proc_children(tmp_path: Path) -> None:
    def proc(pid: int, name: str, children: list[int], cpu: int = 0) -> None:
        task = tmp_path / str(pid) / "task" / str(pid)
        task.mkdir(parents=True)
        (task / "children").write_text(" ".join(map(str, children)))
        (tmp_path / str(pid) / "comm").write_text(name + "\n")
        fields = ["S", "1"] + ["0"] * 9 + [str(cpu), str(cpu)] + ["0"] * 10
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({name}) " + " ".join(fields))

    proc(10, "VLLM::EngineCore", [11])
    proc(11, "python3", [12])
    proc(12, "ptxas", [], cpu=500)
    proc(20, "VLLM::Worker", [21])
    proc(21, "bash", [])
    found = compilers_under([10, 20], proc=tmp_path)
    assert [(c.pid, c.name, c.parent) for c in found] == [(12, "ptxas", 11)]
    assert found[0].cpu_seconds > 0


# --- late answers and never-working paths -------------------------------------------


def test_a_late_answer_keeps_a_server_without_metrics_alive() -> None:
    """No /metrics (401): canaries answered after their deadline are still answers."""

    def at(now: float) -> Evidence:
        results = [ok(1.0)]
        t = 10.0
        while t + 20.0 <= now:  # each canary answered 20 s after it was sent
            results.append(CanaryResult("text-canary", TEXT, Reason.OK, t, 20.0))
            t += 9.0
        return Evidence(kinds={TEXT: KindEvidence(TEXT, results=tuple(results))})

    assert first_red(run(300.0, at)) is None


def test_lifecycle_tracker_remembers_since_and_resume() -> None:
    tracker = LifecycleTracker()
    assert tracker.update(Readings(is_paused=True), 10.0).since == 10.0
    assert tracker.update(Readings(is_paused=True), 20.0).since == 10.0
    awake = tracker.update(Readings(is_paused=False), 30.0)
    assert awake.phase is Phase.AWAKE
    assert awake.resumed_at == 30.0


# --- a path judged by its own traffic ----------------------------------------------


def test_real_image_traffic_beyond_own_canaries_vouches_for_the_path() -> None:
    traffic = PathTraffic()
    mm = CanaryKind.MULTIMODAL
    traffic.observe({"mm_queries": 10.0}, 0.0)
    traffic.canary_sent(mm, 1.0)
    traffic.observe({"mm_queries": 10.0}, 2.0)  # queued: nothing through yet
    traffic.observe({"mm_queries": 11.0}, 4.0)  # only sentinel's own canary got through
    assert mm not in traffic.last_at
    traffic.canary_sent(mm, 5.0)
    traffic.observe({"mm_queries": 11.0}, 6.0)
    # a canary waiting in the queue the whole time is charged once, not every interval:
    # real images getting through beside it still vouch
    traffic.observe({"mm_queries": 12.0}, 8.0)
    traffic.observe({"mm_queries": 13.0}, 10.0)
    assert traffic.last_at[mm] == 10.0


def _path_misses(traffic_at: float | None) -> Evidence:
    mm = CanaryKind.MULTIMODAL
    controls = [ok(100.0), ok(110.0), ok(120.0)]
    results = (
        CanaryResult("mm", mm, Reason.OK, 90.0, 0.5),
        CanaryResult("mm", mm, Reason.TIMEOUT, 100.0, 10.0),
        CanaryResult("mm", mm, Reason.TIMEOUT, 110.0, 10.0),
    )
    return Evidence(
        kinds={
            TEXT: KindEvidence(TEXT, results=(ok(90.0), *controls)),
            mm: KindEvidence(
                mm,
                path=mm != TEXT,
                results=results,
                controls=(None, controls[0], controls[1]),
                traffic_at=traffic_at,
            ),
        },
        progress_available=True,
        last_progress_at=125.0,
    )


@pytest.mark.parametrize(
    ("traffic_at", "hung"),
    [
        pytest.param(None, True, id="no-path-counter"),
        pytest.param(80.0, True, id="real-images-stopped-before-the-misses"),
        pytest.param(112.0, False, id="real-images-got-through-after-they-were-sent"),
    ],
)
def test_a_path_with_real_traffic_getting_through_is_slow_not_hung(
    traffic_at: float | None, hung: bool
) -> None:
    state = replace(VerdictState(), epoch=0, startup_passed=True)
    _, verdict = evaluate(state, _path_misses(traffic_at), Policy(), 125.0)
    assert (HangKind(CanaryKind.MULTIMODAL.value) in [h.kind for h in verdict.hangs]) is hung


# --- starvation: a served canary is not a served user ----------------------------------


def _starving(now: float, **fields: object) -> Evidence:
    canaries = tuple(ok(t) for t in range(10, int(now), 5))
    base_fields: dict[str, object] = {
        "kinds": {TEXT: KindEvidence(TEXT, results=canaries)},
        "progress_available": True,
        "decode_available": True,
        "last_decode_at": 5.0,
        "last_progress_at": 5.0,
        "waiting_since": 10.0,
        "waiting_real": 12.0,
    }
    return Evidence(**{**base_fields, **fields})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "starved_kind"),
    [
        pytest.param({}, True, id="waiting-no-progress-canaries-pass"),
        pytest.param({"last_decode_at": 39.0}, False, id="decode-moving-a-busy-server"),
        pytest.param({"last_prefill_at": 39.0}, False, id="a-long-prefill-ahead-of-them"),
        pytest.param({"waiting_since": None}, False, id="nobody-waiting"),
        pytest.param(
            {"lifecycle": Lifecycle(Phase.PAUSED, 8.0, "/is_paused is true")},
            False,
            id="paused-server",
        ),
        pytest.param(
            {"kinds": {TEXT: KindEvidence(TEXT, results=(ok(5.0), timeout(20.0)))}},
            False,
            id="canaries-failing-too-is-the-engine-rule",
        ),
    ],
)
def test_starvation(fields: dict[str, object], starved_kind: bool) -> None:
    state = replace(VerdictState(), epoch=0, startup_passed=True)
    _, verdict = evaluate(state, _starving(40.0, **fields), Policy(), 40.0)
    kinds = [h.kind for h in verdict.hangs]
    assert (HangKind.STARVED in kinds) is starved_kind, kinds


def test_one_token_completions_prove_no_decode() -> None:
    from sentinel.evidence.metrics import MetricsSample
    from sentinel.progress.tracker import ProgressTracker

    tracker = ProgressTracker()

    def sample(at: float, n: float) -> MetricsSample:
        # n one-token requests finished: each a first token, a completion and nothing decoded
        counters = {
            "generation_tokens": 100.0 + n,
            "first_tokens": 50.0 + n,
            "completions": 40.0 + n,
            "finished": 40.0 + n,
            "finished_one_token": 10.0 + n,
            "prompt_tokens": 500.0 + 5 * n,
        }
        return MetricsSample(at, counters=counters)

    tracker.observe(sample(0.0, 0))
    update = tracker.observe(sample(2.0, 20))
    assert update.progressed  # work, yes: prefills, first tokens, completions
    assert tracker.last_decode_at is None  # but no decode: one-token requests cannot fake it
    tracker.observe(
        MetricsSample(
            4.0,
            counters={
                "generation_tokens": 160.0,
                "first_tokens": 71.0,
                "completions": 61.0,
                "finished": 61.0,
                "finished_one_token": 30.0,
                "prompt_tokens": 610.0,
            },
        )
    )
    assert tracker.last_decode_at == 4.0  # a request decoded past its first token


@pytest.mark.parametrize(
    ("now", "traffic_at", "hung"),
    [
        pytest.param(125.0, None, False, id="awaited-25s-a-slow-queue-may-still-answer"),
        pytest.param(131.0, None, True, id="awaited-two-hang-windows-nothing-through"),
        pytest.param(131.0, 120.0, False, id="awaited-but-real-images-got-through"),
    ],
)
def test_an_awaited_path_canary_is_the_probe_of_its_path(
    now: float, traffic_at: float | None, hung: bool
) -> None:
    mm = CanaryKind.MULTIMODAL
    control = ok(100.0)
    results = (
        CanaryResult("mm", mm, Reason.OK, 90.0, 0.5),
        CanaryResult("mm", mm, Reason.TIMEOUT, 100.0, 10.0, awaiting_late=True),
    )
    ev = Evidence(
        kinds={
            TEXT: KindEvidence(TEXT, results=(ok(90.0), control, ok(120.0))),
            mm: KindEvidence(
                mm, path=True, results=results, controls=(None, control), traffic_at=traffic_at
            ),
        },
        progress_available=True,
        last_progress_at=now - 1.0,
    )
    state = replace(VerdictState(), epoch=0, startup_passed=True)
    _, verdict = evaluate(state, ev, Policy(), now)
    assert (HangKind(mm.value) in [h.kind for h in verdict.hangs]) is hung


@pytest.mark.parametrize(
    ("since", "progress_at", "hung"),
    [
        pytest.param("timeout", 100.5, False, id="engine-stopped-serving-after-the-control"),
        pytest.param("timeout", 104.0, False, id="work-shown-by-the-next-scrape-only"),
        pytest.param("ok", 100.5, True, id="text-served-since-the-path-alone-hung"),
        pytest.param("timeout", 130.0, True, id="real-work-served-since"),
    ],
)
def test_an_awaited_path_canary_is_the_paths_only_while_the_engine_serves(
    since: str, progress_at: float, hung: bool
) -> None:
    """A compile step can take the path canary's step after its control passed in the one
    before: nothing served since says the engine stopped, not the path (the engine rule's)."""
    mm = CanaryKind.MULTIMODAL
    control = ok(100.0)
    later = ok(110.0) if since == "ok" else CanaryResult("t", TEXT, Reason.TIMEOUT, 110.0, 8.0)
    results = (
        CanaryResult("mm", mm, Reason.OK, 90.0, 0.5),
        CanaryResult("mm", mm, Reason.TIMEOUT, 100.0, 10.0, awaiting_late=True),
    )
    ev = Evidence(
        kinds={
            TEXT: KindEvidence(TEXT, results=(ok(90.0), control, later)),
            mm: KindEvidence(mm, path=True, results=results, controls=(None, control)),
        },
        progress_available=True,
        last_progress_at=progress_at,
    )
    state = replace(VerdictState(), epoch=0, startup_passed=True)
    _, verdict = evaluate(state, ev, Policy(), 131.0)
    assert (HangKind(mm.value) in [h.kind for h in verdict.hangs]) is hung


@pytest.mark.parametrize(
    ("text_engine", "hung"),
    [
        pytest.param(0, False, id="another-engine-serving-says-nothing-of-this-one"),
        pytest.param(1, True, id="its-own-engine-served-text-since"),
    ],
)
def test_under_data_parallelism_only_the_path_canarys_engine_counts(
    text_engine: int, hung: bool
) -> None:
    mm = CanaryKind.MULTIMODAL
    control = replace(ok(100.0), engine=1)
    later = replace(ok(110.0), engine=text_engine)
    results = (
        CanaryResult("mm", mm, Reason.OK, 90.0, 0.5, engine=1),
        CanaryResult("mm", mm, Reason.TIMEOUT, 100.0, 10.0, awaiting_late=True, engine=1),
    )
    ev = Evidence(
        kinds={
            TEXT: KindEvidence(TEXT, results=(ok(90.0), control, later)),
            mm: KindEvidence(mm, path=True, results=results, controls=(None, control)),
        },
        progress_available=True,
        last_progress_at=130.0,  # the server's other engine works on
        engines=(EngineProgress("0", 0.0, 130.0), EngineProgress("1", 0.0, 99.0)),
    )
    state = replace(VerdictState(), epoch=0, startup_passed=True)
    _, verdict = evaluate(state, ev, Policy(), 131.0)
    assert (HangKind(mm.value) in [h.kind for h in verdict.hangs]) is hung


def test_an_awaited_path_canary_waits_out_time_sentinel_did_not_observe() -> None:
    """31 s since the send, 10 of them a sidecar stall: 21 s observed, no path hang yet."""
    mm = CanaryKind.MULTIMODAL
    control = ok(100.0)
    results = (
        CanaryResult("mm", mm, Reason.OK, 90.0, 0.5),
        CanaryResult("mm", mm, Reason.TIMEOUT, 100.0, 10.0, awaiting_late=True),
    )
    ev = Evidence(
        kinds={
            TEXT: KindEvidence(TEXT, results=(ok(90.0), control, ok(120.0))),
            mm: KindEvidence(mm, path=True, results=results, controls=(None, control)),
        },
        progress_available=True,
        last_progress_at=130.0,
        unobserved=((110.0, 120.0),),
    )
    state = replace(VerdictState(), epoch=0, startup_passed=True)
    _, verdict = evaluate(state, ev, Policy(), 131.0)
    assert HangKind(mm.value) not in [h.kind for h in verdict.hangs]
