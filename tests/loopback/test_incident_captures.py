"""The bundle that matters: a start-up suspicion never uses up the capture of the hang after it.

A first correctness check waiting on a compile, or a canary missing its
deadline while the model warms up, opens an incident and captures a bundle;
the engine hang that follows seconds later is the one a restart will
destroy, so it gets a bundle of its own, whatever was captured before it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry

from sentinel.diagnostics.child import StoredIncident
from sentinel.diagnostics.store import IncidentStore
from sentinel.evaluation.incidents import MIN_CAPTURE_GAP, IncidentRecorder
from sentinel.telemetry.metrics import SentinelMetrics


async def _until(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def test_a_confirmed_hang_is_captured_after_a_start_up_suspicion(tmp_path: Path) -> None:
    now = [1000.0]
    captured: list[str] = []

    async def capturer(context: Any, store: IncidentStore) -> StoredIncident:
        captured.append(context.kind)  # the context factory below hands the trigger itself
        raise ValueError("no bundle written in this test")

    recorder = IncidentRecorder(
        IncidentStore(tmp_path / "diag"),
        SentinelMetrics(CollectorRegistry()),
        lambda trigger: trigger,  # type: ignore[arg-type,return-value]
        capturer=capturer,
        clock=lambda: now[0],
    )
    async with asyncio.TaskGroup() as group:
        loop = group.create_task(recorder.run())
        recorder.suspect("missed-deadline", "a correctness check missed its deadline")
        await _until(lambda: len(captured) == 1, "the start-up suspicion captured")
        now[0] += 5.0  # well within the gap between captures
        recorder.suspect("missed-deadline", "again")  # a suspicion while one is open: nothing
        recorder.suspect("engine-hang", "canary unanswered for 15s", confirmed=True)
        await _until(lambda: len(captured) == 2, "the confirmed hang captured too")
        recorder.suspect("engine-hang", "still", confirmed=True)  # the same incident: once
        recorder.all_clear()
        now[0] += 5.0
        recorder.suspect("engine-hang", "another hang within the gap", confirmed=True)
        now[0] += MIN_CAPTURE_GAP
        recorder.all_clear()
        recorder.suspect("engine-hang", "a hang past the gap", confirmed=True)
        await _until(lambda: len(captured) == 3, "a later hang captured")
        loop.cancel()
    assert captured == ["missed-deadline", "engine-hang", "engine-hang"]
    assert recorder.current is not None
    assert recorder.current.trigger.reason == "a hang past the gap"


async def test_suspicions_without_a_hang_are_captured_ever_more_rarely(tmp_path: Path) -> None:
    """A working server whose canaries queue behind its load misses deadlines again
    and again: each stored suspicion's bundle doubles the gap before the next (60 s,
    then 120, ...; 30 s before); a confirmed hang is never held by that."""
    now = [0.0]
    captured: list[float] = []

    async def capturer(context: Any, store: IncidentStore) -> StoredIncident:
        captured.append(now[0])
        record = SimpleNamespace(id=f"i{len(captured)}", path=str(tmp_path))
        stored = SimpleNamespace(
            complete=True, record=record, cause="-", cause_line="-", duration_s=0.1
        )
        return stored  # type: ignore[return-value]

    recorder = IncidentRecorder(
        IncidentStore(tmp_path / "diag"),
        SentinelMetrics(CollectorRegistry()),
        lambda trigger: trigger,  # type: ignore[arg-type,return-value]
        capturer=capturer,
        clock=lambda: now[0],
    )
    async with asyncio.TaskGroup() as group:
        loop = group.create_task(recorder.run())
        for _ in range(8):  # a suspicion every 30 s for 210 s, each cleared
            recorder.suspect("missed-deadline", "a canary queued behind the load")
            await _until(
                lambda: recorder._queue.empty() and len(recorder.recent) == len(captured),
                "any capture queued taken and stored",
            )
            recorder.all_clear()
            now[0] += MIN_CAPTURE_GAP
        suspicions = list(captured)
        recorder.suspect("engine-hang", "canary unanswered for 15s", confirmed=True)
        await _until(lambda: len(captured) == len(suspicions) + 1, "the hang captured")
        loop.cancel()
    assert suspicions == [0.0, 60.0, 180.0]
