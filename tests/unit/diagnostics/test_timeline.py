"""The incident timeline drawn from a bundle: what it places where, and the picture."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from sentinel.diagnostics.timeline import (
    ANSWERS_TITLE,
    DPI,
    HEIGHT_IN,
    PROBES,
    RESTART_LABEL,
    TIMELINE_FILE,
    WIDTH_IN,
    answers,
    canaries,
    draw,
    figure,
    restarts,
    series,
)
from tests.timeline_png import check_timeline

WALL = 1_800_000_000.0
MONOTONIC = 5_000.0


def scrape(seconds_before: float, tokens: float, running: float) -> dict[str, str]:
    at = datetime.fromtimestamp(WALL - seconds_before, tz=UTC).isoformat()
    text = (
        "# TYPE vllm:generation_tokens_total counter\n"
        f'vllm:generation_tokens_total{{engine="0"}} {tokens}\n'
        f'vllm:generation_tokens_total{{engine="1"}} {tokens}\n'
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{engine="0"}} {running}\n'
    )
    return {"at": at, "text": text}


def bundle() -> dict[str, Any]:
    text = [
        {"started": MONOTONIC - 30, "duration": 0.1, "ok": True, "reason": "ok"},
        {"started": MONOTONIC - 20, "duration": 10.0, "ok": False, "reason": "timeout"},
    ]
    return {
        "id": "20261204T200000Z-engine-hang",
        "started_at": datetime.fromtimestamp(WALL, tz=UTC).isoformat(),
        "trigger": {"kind": "engine-hang", "reason": "no progress"},
        "cause": {"class": "engine_blocked", "summary": "engine blocked: pid 7"},
        "clock": {"monotonic": MONOTONIC, "wall": WALL},
        "canary_history": {"text": text, "structured": [text[0]]},
        "metrics": [scrape(30, 10, 1), scrape(20, 20, 1), scrape(10, 20, 1), {"at": "x"}],
    }


def test_canaries_are_placed_on_the_capture_s_clock() -> None:
    placed = canaries(bundle())
    assert placed["text"] == [(-30.0, -29.9, True, "ok"), (-20.0, -10.0, False, "timeout")]
    assert list(placed) == ["text", "structured"]


def test_an_older_bundle_without_its_clock_places_no_canary() -> None:
    old = bundle()
    del old["clock"]
    assert canaries(old) == {}


def test_counters_are_summed_over_engines_and_a_broken_scrape_is_skipped() -> None:
    drawn = series(bundle())
    assert drawn["vllm:generation_tokens"] == [(-30.0, 20.0), (-20.0, 40.0), (-10.0, 40.0)]
    assert drawn["vllm:num_requests_running"][0] == (-30.0, 1.0)


def test_the_picture_has_its_size_and_four_drawn_panels(tmp_path: Path) -> None:
    png, said = draw(bundle())
    assert png is not None, said
    assert said == "3 canaries, 2 metric series"
    (tmp_path / TIMELINE_FILE).write_bytes(png)
    (tmp_path / "incident.json").write_text(f'{{"timeline": "{TIMELINE_FILE}: {said}"}}')
    check_timeline(tmp_path)


def test_a_blank_picture_fails_the_check(tmp_path: Path) -> None:
    from PIL import Image

    size = (int(WIDTH_IN * DPI), int(HEIGHT_IN * DPI))
    Image.new("RGB", size, "white").save(tmp_path / TIMELINE_FILE)
    (tmp_path / "incident.json").write_text(f'{{"timeline": "{TIMELINE_FILE}: 0"}}')
    with pytest.raises(AssertionError, match="nearly blank"):
        check_timeline(tmp_path)


def flip(before: float, probe: str, ok: bool, reason: str, **extra: Any) -> dict[str, Any]:
    entry = {"at": MONOTONIC - before, "probe": probe, "ok": ok, "reason": reason}
    return entry | {"hangs": [], "restart": False} | extra


def with_answers() -> dict[str, Any]:
    """The bundle above with the answers' flips the evaluator kept (oldest first)."""
    return bundle() | {
        "probe_answers": [
            flip(3600, "liveness", True, "no hang confirmed"),
            flip(3600, "readiness", False, "startup has not passed"),
            flip(3600, "startup", False, "waiting for every canary kind to succeed"),
            flip(3500, "startup", True, "every kind passed"),
            flip(3500, "readiness", True, "serving"),
            flip(12, "readiness", False, "engine hang: no progress", hangs=["engine"]),
            flip(12, "liveness", False, "engine hang: no progress", hangs=["engine"], restart=True),
            flip(12, "startup", False, "a restart was asked for", hangs=["engine"]),
        ]
    }


def test_answers_are_spans_from_flip_to_flip_on_the_capture_s_clock() -> None:
    lanes = answers(with_answers())
    assert lanes["liveness"] == [
        (-3600.0, -12.0, True, ""),
        (-12.0, 0.0, False, "engine"),  # red until the capture
    ]
    assert [ok for _, _, ok, _ in lanes["readiness"]] == [False, True, False]
    assert lanes["startup"][-1] == (-12.0, 0.0, False, "engine")
    assert restarts(with_answers()) == [(-12.0, "engine")]


def test_an_older_bundle_without_answers_or_its_clock_places_none() -> None:
    assert answers(bundle()) == {}
    assert restarts(bundle()) == []
    old = with_answers()
    del old["clock"]
    assert answers(old) == {}
    assert restarts(old) == []
    cut = with_answers() | {"probe_answers": {"truncated": True}}  # dropped, or foreign
    assert answers(cut) == {}


def test_a_green_liveness_or_observe_only_red_is_no_restart_ask() -> None:
    observed = bundle() | {"probe_answers": [flip(5, "liveness", False, "x", hangs=["engine"])]}
    assert restarts(observed) == []
    assert answers(observed)["liveness"] == [(-5.0, 0.0, False, "engine")]


def _red_lane_rows(axis: Any) -> set[float]:
    """The rows of the answers' panel with a red span drawn."""
    return {
        float(line.get_ydata()[0])
        for line in axis.get_lines()
        if line.get_color() == "tab:red" and len(set(line.get_ydata())) == 1
    }


def test_the_figure_draws_a_lane_per_probe_and_the_restart_ask() -> None:
    drawn = figure(with_answers())
    try:
        lane, top, *_ = drawn.axes
        assert lane.get_title(loc="left") == ANSWERS_TITLE
        assert [t.get_text() for t in lane.get_yticklabels()] == list(PROBES)
        # Liveness, readiness and startup each end red; the old green is cut at the left edge.
        assert _red_lane_rows(lane) == {0.0, 1.0, 2.0}
        starts = [min(line.get_xdata()) for line in lane.get_lines() if len(line.get_xdata())]
        assert min(starts) >= -30.0, "an hour-old flip must not widen the incident's axis"
        texts = [t.get_text() for t in lane.texts]
        assert f"{RESTART_LABEL}: engine" in texts
        assert "capture: engine-hang" in texts
        # The restart ask is a dashed line at -12 s on every panel, the capture one at 0.
        for axis in drawn.axes:
            dashed = [
                line.get_xdata()[0] for line in axis.get_lines() if line.get_linestyle() == "--"
            ]
            assert dashed == [-12.0]
        assert top.get_title(loc="left").startswith("canaries")
    finally:
        from matplotlib import pyplot

        pyplot.close(drawn)


def test_a_bundle_without_answers_says_so_in_their_panel() -> None:
    drawn = figure(bundle())
    try:
        lane = drawn.axes[0]
        assert "no probe answers in this bundle" in [t.get_text() for t in lane.texts]
        assert _red_lane_rows(lane) == set()
    finally:
        from matplotlib import pyplot

        pyplot.close(drawn)


def test_the_picture_with_answers_says_what_it_shows(tmp_path: Path) -> None:
    png, said = draw(with_answers())
    assert png is not None, said
    assert said == "3 canaries, 2 metric series, 8 probe answers, restart asked 12.0 s before"
    (tmp_path / TIMELINE_FILE).write_bytes(png)
    (tmp_path / "incident.json").write_text(f'{{"timeline": "{TIMELINE_FILE}: {said}"}}')
    check_timeline(tmp_path)
