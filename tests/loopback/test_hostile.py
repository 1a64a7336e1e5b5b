"""Nothing the target sends takes sentinel down (a hostile target, not the simulator).

For each misbehaviour of ``/metrics`` or ``/health`` (endless, 500 MB, 2
million series, one 50 MB line, a 1 byte/s trickle, corrupt gzip, invalid
UTF-8; 404, 302 and 401 on ``/health``) the in-process daemon keeps running,
``/healthz`` and ``/livez`` stay 200 while canaries pass, and ``/status`` shows
the evidence error. Shipped caps and deadlines are used (scrape deadline 2 s in
the shortened timings); the endless and 500 MB cases end by sentinel's caps,
never by waiting for the target.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from sentinel.record.observers import LoopFailures, every, supervised
from tests.hostile_target import HostileProcess
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar

pytestmark = pytest.mark.timeout(90)

TEXT_ONLY = {
    "text": {"interval": 1.0, "deadline": 2.0, "jitter": 0.0},
    "structured": {"enabled": False},
    "multimodal": {"enabled": False},
}
WATCH_FOR = 4.0  # seconds /healthz and /livez are watched after the error shows

# (metrics mode, health mode, where in /status the error shows, words it contains)
CASES = {
    "metrics-endless": ("endless", "ok", "scrape", "too_large"),
    "metrics-500mb": ("huge", "ok", "scrape", "too_large"),
    "metrics-2m-series": ("series", "ok", "scrape", "too_large"),
    "metrics-50mb-line": ("longline", "ok", "scrape", "too_large"),
    "metrics-trickle": ("trickle", "ok", "scrape", "timeout"),
    "metrics-bad-gzip": ("badgzip", "ok", "scrape", "bad_body"),
    "metrics-bad-utf8": ("badutf8", "ok", "scrape", "bad_body"),
    "health-endless": ("ok", "endless", "health", "too_large"),
    "health-500mb": ("ok", "huge", "health", "too_large"),
    "health-trickle": ("ok", "trickle", "health", "timeout"),
    "health-404": ("ok", "404", "health", "no health endpoint"),
    "health-302": ("ok", "302", "health", "no health endpoint"),
    "health-401": ("ok", "401", "health", "no health endpoint"),
}


def _error(status: dict[str, Any], where: str) -> str:
    evidence = status["evidence"]
    if where == "scrape":
        return str(evidence["last_scrape_error"] or "")
    return str(evidence["errors"].get("health") or "")


async def _all_up(sidecar: Sidecar) -> None:
    for path in ("/healthz", "/livez"):
        code = await sidecar.code(path)
        assert code == 200, f"{path} answered {code}: {await sidecar.json(path)}"


@pytest.mark.parametrize("case", list(CASES))
async def test_sentinel_survives_a_hostile_target(case: str) -> None:
    metrics_mode, health_mode, where, words = CASES[case]
    with HostileProcess(metrics=metrics_mode, health=health_mode) as target:
        async with running_sidecar(target.base_url, canaries=TEXT_ONLY) as sidecar:
            seen: dict[str, Any] = {}

            async def error_shown() -> bool:
                await _all_up(sidecar)
                seen.update(await sidecar.json("/status"))
                return words in _error(seen, where)

            await eventually(error_shown, 30, f"{words!r} in /status ({where})", interval=0.2)
            watch_until = time.monotonic() + WATCH_FOR
            samples = 0
            while time.monotonic() < watch_until:  # back to back: each GET yields the loop
                await _all_up(sidecar)
                samples += 1
            assert samples > 0
            status = await sidecar.json("/status")
            assert status["canaries"]["text"]["passing"], status["canaries"]
            assert not status["verdict"]["hangs"], status["verdict"]
            assert words in _error(status, where)
            assert not status["evidence"]["errors"]["loops"], status["evidence"]["errors"]


async def test_a_raising_step_is_recorded_and_its_loop_carries_on() -> None:
    """Supervision itself: counted, kept for /status, and the loop keeps beating."""
    now = [0.0]
    beats: list[str] = []
    counted: list[str] = []
    calls = 0

    async def step() -> None:
        nonlocal calls
        calls += 1
        if calls <= 3:
            raise OSError(24, "Too many open files")

    async def sleep(seconds: float) -> None:
        now[0] += seconds
        if calls >= 5:
            raise asyncio.CancelledError

    failures = LoopFailures(lambda: now[0], counted.append)
    with pytest.raises(asyncio.CancelledError):
        await every(
            "processes",
            1.0,
            step,
            beat=lambda name, _: beats.append(name),
            clock=lambda: now[0],
            sleep=sleep,
            failures=failures,
        )
    assert calls == 5
    assert len(beats) == 5
    assert counted == ["processes"] * 3
    shown = failures.to_json(now[0])["processes"]
    assert shown["errors"] == 3
    assert "Too many open files" in shown["last"]


async def test_a_loop_that_dies_is_started_again() -> None:
    runs = 0
    failures = LoopFailures(lambda: 0.0)

    async def loop() -> None:
        nonlocal runs
        runs += 1
        raise RuntimeError(f"run {runs} broke")

    async def sleep(seconds: float) -> None:
        if runs >= 3:
            raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await supervised("scheduler", loop, failures, sleep=sleep)
    assert runs == 3
    assert failures.loops["scheduler"].count == 3
