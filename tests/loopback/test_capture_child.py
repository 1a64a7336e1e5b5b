"""Bundles captured in a child process (sentinel.diagnostics.child), as ``sentinel run`` takes them.

The child is a real interpreter reading the context from a pipe; its targets
are the real titled processes of ``test_diagnostics``. The failure cases swap
the interpreter for a small script that hangs, dies or answers garbage, and
check that the daemon's side turns each into an error (never a hang, never a
crash) and leaves no process behind.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from prometheus_client import CollectorRegistry

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.diagnostics.bundle import DiagnosticsContext, capture
from sentinel.diagnostics.child import ChildCaptureError, StoredIncident, capture_in_child
from sentinel.diagnostics.store import IncidentStore
from sentinel.evaluation.incidents import MIN_CAPTURE_GAP, IncidentRecorder, capture_here, in_child
from sentinel.telemetry.metrics import SentinelMetrics
from tests.loopback import test_diagnostics as diag
from tests.loopback import test_secrets
from tests.timeline_png import check_timeline

pod = diag.pod  # the fixture: titled processes, each continued and killed at teardown
log_stream = test_secrets.log_stream  # the fixture: the daemon's log lines, as JSON

# Non-ASCII text decides whether the byte framing holds: a size counted in
# characters instead of bytes would shift every text after it.
NEWEST = "# HELP vllm:x é ü 漢字 \U0001f600\nvllm:generation_tokens_total 7.0\n" * 2000
OLDER = "# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total 3.0\n"


@pytest.fixture
def server(pod: diag.Pod) -> diag.Pod:
    """An API server and its engine, waiting: what most captures here look at."""
    pod.api_server()
    pod.engine()
    return pod


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "fake-python"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def test_child_stores_the_bundle_with_every_input_intact(
    pod: diag.Pod, tmp_path: Path
) -> None:
    api = pod.api_server()
    pod.engine()
    worker = pod.worker()
    os.kill(worker.pid, signal.SIGSTOP)
    diag.wait_until(lambda: diag._state(worker.pid) == "T", "worker stopped")
    context = diag.context(pod, metrics_text=[(1.0, "old\n"), (2.0, OLDER), (3.0, NEWEST)])
    store = IncidentStore(tmp_path / "diag")

    stored = await capture_in_child(context, store)

    assert stored.cause == "process_stopped"
    assert "process stopped" in stored.cause_line
    assert stored.record.cause == "process_stopped"
    assert [r.id for r in store.incidents()] == [stored.record.id]
    files = diag.read_dir(Path(stored.record.path))
    for name, text in files.items():
        assert diag.API_KEY not in text, name
        assert diag.HF_TOKEN not in text, name
    bundle = json.loads(files["bundle.json"])
    # The last three scrapes, each byte for byte as the daemon held it.
    assert [m["text"] for m in bundle["metrics"]] == ["old\n", OLDER, NEWEST]
    assert [r["reason"] for r in bundle["canary_history"]["text"]] == ["ok", "timeout"]
    # The child drew the incident's picture from the bundle: two canaries placed.
    assert check_timeline(Path(stored.record.path)).endswith(": 2 canaries, 1 metric series")
    assert bundle["canary_history"]["text"][1]["detail"] == "deadline"
    assert bundle["sentinel"]["config"]["api_key"] == "<redacted>"
    assert bundle["sentinel"]["config"]["max_tokens"] == 4
    assert {p["pid"] for p in bundle["processes"]} >= {api.pid, worker.pid}
    assert stored.complete == (not bundle["section_errors"])


async def test_no_child_at_all_means_a_capture_in_this_process(
    server: diag.Pod, tmp_path: Path
) -> None:
    store = IncidentStore(tmp_path / "diag")
    missing = str(tmp_path / "no-such-python")
    with pytest.raises(ChildCaptureError) as failed:
        await capture_in_child(diag.context(server), store, python=missing)
    assert not failed.value.started
    assert store.incidents() == []

    capturer = in_child(log_level="info", python=missing)
    stored = await capturer(diag.context(server), store)

    assert [r.id for r in store.incidents()] == [stored.record.id]
    assert "bundle.json" in diag.read_dir(Path(stored.record.path))


async def test_a_child_that_hangs_is_killed_with_everything_it_started(
    pod: diag.Pod, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    hanging = _script(tmp_path, f"sleep 300 &\necho $! > {pids}\nexec sleep 300\n")
    store = IncidentStore(tmp_path / "diag")
    context = diag.context(pod, budget_s=0.5)

    with pytest.raises(ChildCaptureError, match="no bundle within 2 s") as failed:
        await capture_in_child(context, store, python=hanging, overhead_s=1.5)

    assert failed.value.started
    grandchild = int(pids.read_text())
    diag.wait_until(lambda: _gone(grandchild), "the child's own child killed")
    # A retry is not the daemon's side's business: it ran nothing in this process.
    assert store.incidents() == []


@pytest.mark.parametrize(
    ("reply", "exit_code", "message"),
    [
        ("garbage\n", 3, "exited 3 without a bundle"),
        ('{"error": "ValueError: boom"}\n', 1, "failed: ValueError: boom"),
        ('{"record": {"id": "x"}}\n', 0, "exited 0 without a bundle"),
        ("[1, 2]\n", 0, "exited 0 without a bundle"),
        ("", -9, "exited -9 without a bundle"),
    ],
)
async def test_a_child_without_a_bundle_is_an_error_not_a_crash(
    pod: diag.Pod, tmp_path: Path, reply: str, exit_code: int, message: str
) -> None:
    ending = "kill -9 $$\n" if exit_code < 0 else f"exit {exit_code}\n"
    body = f"cat > /dev/null\nprintf '%s' '{reply}'\n{ending}"
    with pytest.raises(ChildCaptureError, match=message) as failed:
        await capture_in_child(
            diag.context(pod), IncidentStore(tmp_path / "diag"), python=_script(tmp_path, body)
        )
    assert failed.value.started


def test_the_child_reports_a_bad_context_in_one_redacted_line(tmp_path: Path) -> None:
    header = {
        "log": {"level": "info"},
        "metrics": [],
        "store": {"root": str(tmp_path), "max_count": 1, "max_total_bytes": 1},
        "trigger": {"kind": "x", "reason": f"token {diag.API_KEY}"},
    }  # no process_match: a KeyError inside the child
    done = subprocess.run(
        [sys.executable, "-m", "sentinel.diagnostics"],
        input=json.dumps(header).encode() + b"\n",
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    answer = json.loads(done.stdout)
    assert "KeyError" in answer["error"]
    log = done.stderr.decode()
    assert "diagnostics_child_failed" in log
    assert "Traceback" not in log
    assert diag.API_KEY not in log + done.stdout.decode()


async def test_a_capture_that_fails_is_counted_and_the_next_one_still_runs(
    server: diag.Pod, tmp_path: Path
) -> None:
    store = IncidentStore(tmp_path / "diag")
    registry = CollectorRegistry()
    now = [1000.0]
    calls: list[str] = []

    async def flaky(context: DiagnosticsContext, into: IncidentStore) -> StoredIncident:
        calls.append(context.trigger.kind)
        if len(calls) == 1:
            raise ValueError("not what any capturer is meant to raise")
        return await capture_here(context, into)

    recorder = IncidentRecorder(
        store,
        SentinelMetrics(registry),
        lambda trigger: diag.context(server, trigger=trigger),
        capturer=flaky,
        clock=lambda: now[0],
    )

    def failures() -> float:
        return registry.get_sample_value("sentinel_diagnostics_failures_total") or 0.0

    async with asyncio.TaskGroup() as group:
        loop = group.create_task(recorder.run())
        recorder.suspect("missed-deadline", "a text canary missed its deadline")
        await _until(lambda: failures() == 1.0, "the failed capture counted")
        recorder.all_clear()
        now[0] += MIN_CAPTURE_GAP
        recorder.suspect("engine-hang", "no progress for 15 s")
        await _until(lambda: bool(recorder.recent), "the second capture stored")
        loop.cancel()

    assert calls == ["missed-deadline", "engine-hang"]
    assert failures() == 1.0
    assert [r.trigger for r in store.incidents()] == ["engine-hang"]


async def _until(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def test_the_childs_log_lines_go_where_the_daemons_go(
    server: diag.Pod, tmp_path: Path, log_stream: io.StringIO
) -> None:
    stored = await capture_in_child(diag.context(server), IncidentStore(tmp_path / "diag"))
    noisy = _script(tmp_path, "cat > /dev/null\necho 'Fatal Python error: boom' >&2\nexit 1\n")
    with pytest.raises(ChildCaptureError):
        await capture_in_child(diag.context(server), IncidentStore(tmp_path / "x"), python=noisy)
    events = [json.loads(line) for line in log_stream.getvalue().splitlines()]
    stored_lines = [e for e in events if e["event"] == "diagnostics.stored"]
    assert [e["incident"] for e in stored_lines] == [stored.record.id]
    assert stored_lines[0]["logger"] == "sentinel.diagnostics.store"
    assert any(e["event"] == "diagnostics.captured" for e in events)
    relayed = [e for e in events if e["event"] == "diagnostics_child_output"]
    assert [e["line"] for e in relayed] == ["Fatal Python error: boom"]
    assert relayed[0]["level"] == "warning"


async def test_a_huge_exposition_is_cut_before_the_pipe_and_reported_as_in_process(
    server: diag.Pod, tmp_path: Path
) -> None:
    huge = diag.huge_exposition(3_000_000)
    scrapes = [(1.0, OLDER), (2.0, huge), (3.0, NEWEST), (4.0, huge)]
    context = diag.context(server, metrics_text=scrapes, section_max_bytes=1_000_000)

    here = (await capture(context)).bundle["metrics"]
    stored = await capture_in_child(context, IncidentStore(tmp_path / "diag"))
    files = diag.read_dir(Path(stored.record.path))
    there = json.loads(files["bundle.json"])["metrics"]

    assert there == here
    # The newest takes nearly the whole cap; little is left for the older two.
    kept = [len(m["text"].encode()) for m in there]
    assert kept[2] > 900_000
    assert sum(kept) <= 1_000_000
    assert all(m["truncated_bytes"] > 0 for m in there)
    assert there[0]["truncated_bytes"] == len(huge.encode()) - kept[0]


async def test_the_child_leads_its_own_group_within_the_daemons_session(
    pod: diag.Pod, tmp_path: Path
) -> None:
    # Its own group: killed with its stack dumpers. The daemon's session: a
    # session of its own would be a scheduler autogroup of its own, where its
    # niceness no longer yields the CPU to the daemon's probe answers.
    seen = tmp_path / "ids"
    script = _script(tmp_path, f"cut -d' ' -f1,5,6 /proc/$$/stat > {seen}\ncat > /dev/null\n")
    with pytest.raises(ChildCaptureError):
        await capture_in_child(diag.context(pod), IncidentStore(tmp_path / "d"), python=script)
    pid, group, session = (int(x) for x in seen.read_text().split())
    assert group == pid
    assert session == os.getsid(0)


async def test_hostile_bytes_from_the_target_reach_the_bundle_as_the_daemon_held_them(
    server: diag.Pod, tmp_path: Path
) -> None:
    # What the scraper and the canary runner can hand over from a hostile
    # target: replacement characters (invalid UTF-8 decoded), NUL, bare CR,
    # a line that reads like the child's own reply and log protocol, and a
    # canary detail with quotes and newlines.
    forged = '{"error": "x"}\n{"event": "diagnostics.stored", "incident": "forged"}\n'
    scrape = "vllm:x\ufffd\ufffd 1\x00\r\nvllm:y 2\r" + forged + "\U0010ffff\n"
    detail = 'HTTP 500: "}\n{"event": "forged"}\x00'
    history = {
        "text": [
            CanaryResult("text-default", CanaryKind.TEXT, Reason.HTTP_STATUS, 1.0, 0.1, detail)
        ]
    }
    context = diag.context(
        server, metrics_text=[(1.0, forged), (2.0, scrape)], canary_history=history
    )

    stored = await capture_in_child(context, IncidentStore(tmp_path / "diag"))

    bundle = json.loads(diag.read_dir(Path(stored.record.path))["bundle.json"])
    assert [m["text"] for m in bundle["metrics"]] == [forged, scrape]
    assert bundle["canary_history"]["text"][0]["detail"] == detail
    assert stored.record.id != "forged"
