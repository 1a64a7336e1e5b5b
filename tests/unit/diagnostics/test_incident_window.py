"""An incident read in one look: the minutes of samples, the red that asked, the path named.

The bundle keeps the window of ``/metrics`` samples that confirmed a hang
(bounded), the timeline draws progress from it as rates beside the answers'
lanes, a path hang's headline names its path, and the summary lists the
canaries still unanswered with their ages. The picture is checked through
its data (what each panel is drawn from), not its pixels.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from sentinel.diagnostics.bundle import DiagnosticsContext
from sentinel.diagnostics.cause import Cause, CauseClass
from sentinel.diagnostics.child import StoredIncident
from sentinel.diagnostics.headline import of_path, path_headline, unanswered
from sentinel.diagnostics.store import IncidentStore
from sentinel.diagnostics.summary import render_summary
from sentinel.diagnostics.timeline import answers, awaited, restarts, sampled
from sentinel.diagnostics.window import SampleWindow, rates
from sentinel.evaluation.incidents import IncidentRecorder
from sentinel.evidence.metrics import MetricsSample
from sentinel.telemetry.metrics import SentinelMetrics

CAPTURE = 1000.0  # the bundle's monotonic anchor
HUNG_AT = 940.0  # the engine stops producing here
RED_AT = 956.0  # liveness turns red here, asking for the restart


def _samples(until: float = CAPTURE) -> list[dict[str, Any]]:
    """A scrape every 2 s from 880: 50 tokens a second until the hang, nothing after."""
    out = []
    tokens = 0.0
    at = 880.0
    while at <= until:
        out.append(
            {
                "at": at,
                "counters": {"generation_tokens": tokens, "completions": tokens / 10},
                "gauges": {"running": 2.0, "waiting": 0.0},
            }
        )
        if at < HUNG_AT:
            tokens += 100.0
        at += 2.0
    return out


def _answer(at: float, probe: str, ok: bool, **extra: Any) -> dict[str, Any]:
    return {"at": at, "probe": probe, "ok": ok, "reason": "", "hangs": [], **extra}


def _result(kind: str, started: float, ok: bool, **extra: Any) -> dict[str, Any]:
    return {
        "kind": kind,
        "started": started,
        "duration": 0.2 if ok else 10.0,
        "ok": ok,
        "reason": "ok" if ok else "timeout",
        "detail": "",
        **extra,
    }


def _bundle(*, red: bool = True) -> dict[str, Any]:
    flips = [_answer(870.0, p, True) for p in ("liveness", "readiness", "startup")]
    if red:
        flips.append(_answer(RED_AT, "liveness", False, hangs=["engine"], restart=True))
    return {
        "id": "20261206T000000Z-engine-hang",
        "started_at": "2026-12-06T00:00:00+00:00",
        "duration_s": 1.0,
        "trigger": {"kind": "engine-hang", "reason": "no progress for 15s"},
        "cause": {"class": "engine_blocked", "summary": "engine blocked", "pid": 1},
        "sentinel": {"version": "0"},
        "clock": {"monotonic": CAPTURE, "wall": 1.8e9},
        "samples": _samples(),
        "probe_answers": flips,
        "canary_history": {"text": [_result("text", 930.0, True), _result("text", 945.0, False)]},
        "outstanding": {"text": [990.0]},
    }


def test_the_picture_shows_flat_progress_then_the_red_that_asked_for_the_restart() -> None:
    bundle = _bundle()
    progress = sampled(bundle)["vllm:generation_tokens"]
    # Minutes of the window, not the last two or three scrapes.
    assert progress[0][0] <= -110.0
    assert len(progress) >= 55
    working = [at for at, rate in progress if rate > 0]
    flat = [at for at, rate in progress if at > max(working)]
    assert max(working) <= HUNG_AT - CAPTURE  # work stops at the hang ...
    assert all(rate == 0.0 for at, rate in progress if at in flat)
    red = [span for span in answers(bundle)["liveness"] if not span[2]]
    assert [(start, kinds) for start, _, _, kinds in red] == [(RED_AT - CAPTURE, "engine")]
    flat_before_red = [at for at in flat if at < red[0][0]]
    assert len(flat_before_red) >= 5  # ... and stays flat for the window before the red
    assert restarts(bundle) == [(RED_AT - CAPTURE, "engine")]
    assert sampled(bundle)["vllm:num_requests_running"][-1] == (0.0, 2.0)
    assert awaited(bundle) == {"text": [-10.0]}


def test_a_capture_before_the_red_draws_liveness_green_to_the_end() -> None:
    lanes = answers(_bundle(red=False))
    assert all(ok for _, _, ok, _ in lanes["liveness"])
    assert restarts(_bundle(red=False)) == []


def test_an_older_bundle_without_samples_draws_nothing_from_them() -> None:
    bundle = _bundle()
    del bundle["samples"]
    assert sampled(bundle) == {}
    bundle["samples"] = {"truncated": True, "truncated_bytes": 99}  # dropped for size
    assert sampled(bundle) == {}


def test_rates_skip_a_counter_that_went_down_and_an_absent_one() -> None:
    samples = [
        {"at": 0.0, "counters": {"generation_tokens": 10.0}},
        {"at": 2.0, "counters": {"generation_tokens": 30.0}},
        {"at": 4.0, "counters": {}},  # absent: no evidence, never zero
        {"at": 6.0, "counters": {"generation_tokens": 5.0}},  # restarted
        {"at": 8.0, "counters": {"generation_tokens": 5.0}},
        "not a sample",
    ]
    assert rates(samples, "generation_tokens") == [(2.0, 10.0), (8.0, 0.0)]


def test_the_window_keeps_minutes_and_never_more_than_its_cap() -> None:
    kept = SampleWindow(window_s=60.0, max_samples=1000)
    for i in range(200):  # a scrape a second for 200 s
        kept.observe(MetricsSample(float(i), {"generation_tokens": i, "engine_tokens": 1.0}))
    recent = kept.recent()
    assert [s["at"] for s in (recent[0], recent[-1])] == [139.0, 199.0]
    assert recent[-1]["counters"] == {"generation_tokens": 199}  # only what is drawn
    capped = SampleWindow(window_s=1e9, max_samples=10)
    for i in range(50):
        capped.observe(MetricsSample(float(i), {}, {"running": 1.0}))
    assert len(capped.recent()) == 10


def _path_history(text_ok: bool = True) -> dict[str, Any]:
    return {
        "text": [_result("text", 990.0, text_ok)],
        "structured": [
            _result("structured", 900.0, True),
            _result("structured", 958.0, False, awaiting_late=True),
        ],
    }


def test_a_path_hang_is_headlined_by_its_path_and_its_unanswered_canary() -> None:
    line = path_headline("structured-hang", _path_history(), {}, CAPTURE)
    assert line == (
        "structured-output path hung: the structured canary has not answered for 42 s "
        "while text canaries pass"
    )
    failing = path_headline("structured-hang", _path_history(text_ok=False), {}, CAPTURE)
    assert failing is not None
    assert "while" not in failing
    assert path_headline("engine-hang", _path_history(), {}, CAPTURE) is None
    assert path_headline("missed-deadline", _path_history(), {}, CAPTURE) is None
    assert path_headline("text-hang", _path_history(), {}, CAPTURE) is None  # no path kind


def test_the_summary_lists_the_unanswered_canaries_with_their_ages() -> None:
    bundle = _bundle()
    bundle["canary_history"] = _path_history()
    bundle["outstanding"] = {"structured": [970.0], "text": []}
    late = unanswered(bundle["canary_history"], bundle["outstanding"], CAPTURE)
    assert [(u.kind, round(u.age_s), u.in_flight, u.late, u.failed) for u in late] == [
        ("structured", 42, 1, 1, 0)
    ]
    summary = render_summary(bundle)
    assert "canaries unanswered (oldest first):" in summary
    assert "structured  unanswered for  42.0 s: 1 in flight, 1 awaited past the deadline" in summary
    assert "samples   61 over 120 s" in summary
    bundle["canary_history"] = {"text": [_result("text", 990.0, True)]}
    bundle["outstanding"] = {}
    assert "(none: every kind's last canary passed)" in render_summary(bundle)
    assert "a suspicion" not in render_summary(bundle)  # an engine hang: confirmed
    bundle["trigger"] = {"kind": "missed-deadline", "reason": "a text canary missed"}
    assert "(a suspicion: a confirmed hang gets a bundle of its own" in render_summary(bundle)


BLOCKED = Cause(
    CauseClass.ENGINE_BLOCKED,
    "engine blocked: VLLM::EngineCore (pid 7) is sleeping at 2% CPU in poll, "
    "waiting on something that does not come",
    7,
)


def test_a_path_hang_headlines_a_waiting_engine_but_not_a_stopped_one() -> None:
    cause = of_path(BLOCKED, "structured-hang", _path_history(), {}, CAPTURE)
    assert cause == Cause(
        CauseClass.PATH_HUNG,
        "structured-output path hung: the structured canary has not answered for 42 s while "
        "text canaries pass; VLLM::EngineCore (pid 7) is sleeping at 2% CPU in poll",
        7,
    )
    assert of_path(BLOCKED, "engine-hang", _path_history(), {}, CAPTURE) == BLOCKED
    stopped = Cause(CauseClass.PROCESS_STOPPED, "process stopped: VLLM::EngineCore (pid 7)", 7)
    assert of_path(stopped, "structured-hang", _path_history(), {}, CAPTURE) == stopped


def test_a_path_failing_fast_is_headlined_by_its_failures() -> None:
    history = {
        "text": [_result("text", 990.0, True)],
        "multimodal": [
            _result("multimodal", 950.0, True),
            _result("multimodal", 970.0, False, reason="http_status"),
            _result("multimodal", 980.0, False, reason="http_status"),
        ],
    }
    line = path_headline("multimodal-hang", history, {}, CAPTURE)
    assert line == (
        "multimodal (image preprocessing) path hung: the multimodal canaries have failed "
        "for 30 s (http_status) while text canaries pass"
    )
    late = unanswered(history, {}, CAPTURE)
    assert [(u.kind, u.in_flight, u.late, u.failed) for u in late] == [("multimodal", 0, 0, 2)]


async def test_each_capture_carries_the_samples_kept_until_it_starts(tmp_path: Path) -> None:
    captured: list[DiagnosticsContext] = []
    started = asyncio.Event()

    async def capturer(context: DiagnosticsContext, store: IncidentStore) -> StoredIncident:
        captured.append(context)
        started.set()
        raise ValueError("no bundle written in this test")

    recorder = IncidentRecorder(
        IncidentStore(tmp_path / "diag"),
        SentinelMetrics(CollectorRegistry()),
        lambda trigger: DiagnosticsContext(trigger=trigger),
        capturer=capturer,
    )
    recorder.samples.observe(MetricsSample(1.0, {"generation_tokens": 5.0}))
    async with asyncio.TaskGroup() as group:
        loop = group.create_task(recorder.run())
        recorder.suspect("engine-hang", "no progress", confirmed=True)
        recorder.samples.observe(MetricsSample(3.0, {"generation_tokens": 5.0}))  # before it ran
        async with asyncio.timeout(10.0):
            await started.wait()
        loop.cancel()
    [context] = captured
    assert [s["at"] for s in context.samples] == [1.0, 3.0]
