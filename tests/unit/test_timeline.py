"""The incident timeline drawn from a bundle: what it places where, and the picture."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from sentinel.diagnostics.timeline import TIMELINE_FILE, canaries, draw, series
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


def test_the_picture_has_its_size_and_three_drawn_panels(tmp_path: Path) -> None:
    png, said = draw(bundle())
    assert png is not None, said
    assert said == "3 canaries, 2 metric series"
    (tmp_path / TIMELINE_FILE).write_bytes(png)
    (tmp_path / "incident.json").write_text(f'{{"timeline": "{TIMELINE_FILE}: {said}"}}')
    check_timeline(tmp_path)


def test_a_blank_picture_fails_the_check(tmp_path: Path) -> None:
    from PIL import Image

    Image.new("RGB", (1000, 700), "white").save(tmp_path / TIMELINE_FILE)
    (tmp_path / "incident.json").write_text(f'{{"timeline": "{TIMELINE_FILE}: 0"}}')
    with pytest.raises(AssertionError, match="nearly blank"):
        check_timeline(tmp_path)
