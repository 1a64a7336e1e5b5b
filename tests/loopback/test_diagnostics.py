"""Diagnostics bundles from real processes: stopped, blocked, spinning, non-Python.

Children are real interpreters titled like vLLM's processes (with a per-test
tag, so processes of other tests on the machine are never matched). Every
child is continued (SIGCONT) and killed at teardown.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.diagnostics.bundle import DiagnosticsContext, Incident, Trigger, capture
from sentinel.diagnostics.cause import CauseClass
from sentinel.diagnostics.procs import ProcessMatch
from sentinel.diagnostics.store import IncidentStore, RetentionPolicy, incidents_payload

API_KEY = "sk-secret-4f9a1c7e2b"
HF_TOKEN = "hf_secret_8d3e6a0b5c"

BEHAVIOURS = {
    "wait": "import threading; threading.Event().wait()",
    "pipe": "import sys; sys.stdin.buffer.read(1)",
    "spin": "while True:\n    pass",
    # A server that starts a titled engine, never reaps it, and prints its pid.
    "parent": (
        "import subprocess, threading\n"
        "engine = subprocess.Popen([sys.executable, '-c', "
        "'import setproctitle, sys, threading; setproctitle.setproctitle(sys.argv[1]); "
        "threading.Event().wait()', sys.argv[2]])\n"
        "print(engine.pid, flush=True)\n"
        "threading.Event().wait()"
    ),
}

CHILD = """
import sys, setproctitle
title = sys.argv[1]
if title:
    setproctitle.setproctitle(title)
{behaviour}
"""


@dataclass
class Pod:
    tag: str
    children: list[subprocess.Popen[bytes]]

    @property
    def match(self) -> ProcessMatch:
        return ProcessMatch(
            titles=(f"VLLM::EngineCore_{self.tag}", f"VLLM::Worker_{self.tag}"),
            cmdlines=(f"vllm serve {self.tag}",),
        )

    def spawn(self, title: str, behaviour: str, *extra: str) -> subprocess.Popen[bytes]:
        env = dict(os.environ, HF_TOKEN=HF_TOKEN, OMP_NUM_THREADS="1")
        script = CHILD.format(behaviour=BEHAVIOURS[behaviour])
        child = subprocess.Popen(
            [sys.executable, "-c", script, title, *extra],
            stdin=subprocess.PIPE,
            env=env,
        )
        self.children.append(child)
        if title:
            wait_until(lambda: _cmdline(child.pid).startswith(title), f"title of {child.pid}")
        return child

    def shell(self, script: str) -> subprocess.Popen[bytes]:
        child = subprocess.Popen(["sh", "-c", script])
        self.children.append(child)
        wait_until(lambda: bool(_cmdline(child.pid)), f"shell {child.pid}")
        return child

    def spawn_parent(self, *argv: str) -> tuple[subprocess.Popen[bytes], int]:
        """A server (``argv`` after the engine's title) with an engine it never reaps."""
        env = dict(os.environ, OMP_NUM_THREADS="1")
        server = subprocess.Popen(
            [sys.executable, "-c", CHILD.format(behaviour=BEHAVIOURS["parent"]), "", *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        self.children.append(server)
        assert server.stdout is not None
        engine = int(server.stdout.readline())
        wait_until(lambda: _cmdline(engine).startswith(argv[0]), f"title of {engine}")
        return server, engine

    def api_server(self) -> subprocess.Popen[bytes]:
        return self.spawn("", "wait", "vllm", "serve", self.tag, "--api-key", API_KEY)

    def engine(self, behaviour: str = "wait") -> subprocess.Popen[bytes]:
        return self.spawn(f"VLLM::EngineCore_{self.tag}", behaviour)

    def worker(self, behaviour: str = "wait") -> subprocess.Popen[bytes]:
        return self.spawn(f"VLLM::Worker_{self.tag}", behaviour)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def read_dir(path: Path) -> dict[str, str]:
    """An incident's text files (its timeline.png is drawn from the redacted bundle)."""
    return {
        f.name: (f.read_text() if f.is_file() else "") for f in path.iterdir() if f.suffix != ".png"
    }


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def pod() -> Iterator[Pod]:
    state = Pod(tag=uuid.uuid4().hex[:8], children=[])
    try:
        yield state
    finally:
        for child in state.children:
            try:
                os.kill(child.pid, signal.SIGCONT)
                child.kill()
            except ProcessLookupError:
                pass
            child.wait(timeout=10)


def history() -> dict[str, list[CanaryResult]]:
    return {
        "text": [
            CanaryResult("text-default", CanaryKind.TEXT, Reason.OK, 100.0, 0.05),
            CanaryResult("text-default", CanaryKind.TEXT, Reason.TIMEOUT, 105.0, 8.0, "deadline"),
        ]
    }


def context(pod: Pod, **overrides: object) -> DiagnosticsContext:
    metrics = "# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total 42.0\n"
    fields: dict[str, object] = {
        "trigger": Trigger("engine-hang", "text canary missed its 8 s deadline"),
        "process_match": pod.match,
        "metrics_text": [(time.time() - 2, metrics), (time.time(), metrics)],
        "canary_history": history(),
        "config": {"target": "http://127.0.0.1:8000", "api_key": API_KEY, "max_tokens": 4},
        "gpu_enabled": True,
    }
    fields.update(overrides)
    return DiagnosticsContext(**fields)  # type: ignore[arg-type]


def by_pid(incident: Incident) -> dict[int, dict[str, object]]:
    return {p["pid"]: p for p in incident.bundle["processes"]}


async def test_stopped_worker(pod: Pod, tmp_path: Path) -> None:
    api = pod.api_server()
    engine = pod.engine()
    worker = pod.worker()
    os.kill(worker.pid, signal.SIGSTOP)
    wait_until(lambda: _state(worker.pid) == "T", "worker stopped")

    incident = await capture(context(pod))
    print(f"capture took {incident.duration_s:.2f} s")

    assert incident.cause is CauseClass.PROCESS_STOPPED
    assert incident.bundle["cause"]["pid"] == worker.pid
    procs = by_pid(incident)
    assert set(procs) == {api.pid, engine.pid, worker.pid}
    assert procs[worker.pid]["status"] == "stopped"
    assert procs[engine.pid]["status"] == "sleeping"
    assert procs[engine.pid]["role"] == "engine_core"
    assert procs[api.pid]["role"] == "api_server"
    assert procs[worker.pid]["wchan"] == "do_signal_stop"
    assert procs[api.pid]["omp_num_threads"] == "1"
    assert procs[api.pid]["environ_source"] == "own"
    # setproctitle overwrites a titled process's /proc/PID/environ.
    assert str(procs[engine.pid]["environ_source"]).startswith("inherited from pid")
    # Stacks of the API server and the EngineCore (and the stopped worker too).
    stacks = incident.bundle["stacks"]
    for pid in (api.pid, engine.pid, worker.pid):
        dump = stacks[str(pid)]
        assert dump["ok"], dump["error"]
        assert "wait (threading.py" in dump["text"]
    assert _state(worker.pid) == "T"  # still stopped: dumping did not continue it
    assert len(incident.bundle["metrics"]) == 2
    assert [r["reason"] for r in incident.bundle["canary_history"]["text"]] == ["ok", "timeout"]
    assert incident.bundle["gpu"]["visible"] in (True, False)
    assert incident.summary.splitlines()[0] == incident.cause_line
    assert "process stopped" in incident.cause_line

    # Stored: one directory, and no secret anywhere in it.
    store = IncidentStore(tmp_path / "diag")
    record = store.write(incident)
    files = read_dir(Path(record.path))
    assert set(files) == {"bundle.json", "summary.txt", "incident.json"}
    for name, text in files.items():
        assert API_KEY not in text, name
        assert HF_TOKEN not in text, name
    bundle = json.loads(files["bundle.json"])
    api_entry = next(p for p in bundle["processes"] if p["pid"] == api.pid)
    assert api_entry["cmdline"][-2:] == ["--api-key", "<redacted>"]
    assert api_entry["environ"]["HF_TOKEN"] == "<redacted>"
    assert bundle["sentinel"]["config"]["api_key"] == "<redacted>"
    assert bundle["sentinel"]["config"]["max_tokens"] == 4
    listed = incidents_payload(store.incidents())
    assert listed["count"] == 1
    assert listed["incidents"][0]["cause"] == "process_stopped"


async def test_engine_blocked_on_a_pipe(pod: Pod) -> None:
    pod.api_server()
    engine = pod.engine("pipe")
    wait_until(lambda: "pipe" in Path(f"/proc/{engine.pid}/wchan").read_text(), "pipe wait")

    incident = await capture(context(pod))

    assert incident.cause is CauseClass.ENGINE_BLOCKED, incident.cause_line
    assert incident.bundle["cause"]["pid"] == engine.pid
    assert "pipe" in by_pid(incident)[engine.pid]["wchan"]  # type: ignore[operator]
    assert "read" in incident.bundle["stacks"][str(engine.pid)]["text"]


async def test_engine_spinning(pod: Pod) -> None:
    pod.api_server()
    engine = pod.engine("spin")

    incident = await capture(context(pod, cpu_window_s=1.0))

    cpu = by_pid(incident)[engine.pid]["cpu_percent"]
    assert incident.cause is CauseClass.ENGINE_SPINNING, (incident.cause_line, cpu)


async def test_unreadable_process_is_reported_not_raised(pod: Pod) -> None:
    # A shell is not a Python process: py-spy cannot dump it, the bundle says why.
    shell = pod.shell(f"sleep 60; : vllm serve {pod.tag}")

    incident = await capture(context(pod, py_spy=None))

    dump = incident.bundle["stacks"][str(shell.pid)]
    assert not dump["ok"]
    assert dump["error"]
    assert "no stacks" in incident.summary


async def test_missing_py_spy_and_no_processes(pod: Pod, tmp_path: Path) -> None:
    pod.engine()
    incident = await capture(context(pod, py_spy=str(tmp_path / "no-such-py-spy")))
    [dump] = incident.bundle["stacks"].values()
    assert not dump["ok"]
    assert "cannot run py-spy" in dump["error"]

    nothing = await capture(
        context(pod, process_match=ProcessMatch(titles=("none-" + pod.tag,), cmdlines=()))
    )
    assert nothing.cause is CauseClass.PROCESS_GONE


async def test_budget_is_kept_when_a_section_hangs(pod: Pod, tmp_path: Path) -> None:
    # A "py-spy" that never answers: its dump times out, the bundle still lands.
    slow = tmp_path / "slow-py-spy"
    slow.write_text("#!/bin/sh\nexec sleep 30\n")
    slow.chmod(0o755)
    pod.engine()
    started = time.monotonic()
    incident = await capture(context(pod, py_spy=str(slow), budget_s=2.0, stack_timeout_s=10.0))
    elapsed = time.monotonic() - started
    [dump] = incident.bundle["stacks"].values()
    assert "timed out" in dump["error"]
    assert elapsed < 4.0
    assert incident.cause is CauseClass.ENGINE_BLOCKED


async def test_retention_by_count_and_size(pod: Pod, tmp_path: Path) -> None:
    ctx = context(
        pod,
        process_match=ProcessMatch(titles=("none-" + pod.tag,), cmdlines=()),
        cpu_window_s=0.0,
        gpu_enabled=False,
    )
    store = IncidentStore(tmp_path / "diag", RetentionPolicy(max_count=2))
    written = [store.write(await capture(ctx)) for _ in range(3)]
    kept = [r.id for r in store.incidents()]
    assert kept == [written[2].id, written[1].id]  # newest first, oldest removed
    assert written[0].id not in read_dir(tmp_path / "diag")

    tiny = IncidentStore(tmp_path / "diag", RetentionPolicy(max_count=10, max_total_bytes=1))
    newest = tiny.write(await capture(ctx))
    assert [r.id for r in tiny.incidents()] == [newest.id]  # the newest always stays
    assert tiny.read(newest.id) is not None
    assert tiny.read("../etc") is None


def huge_exposition(size: int) -> str:
    """A vLLM-shaped exposition of about ``size`` bytes, with the API key planted in it."""
    line = 'vllm:generation_tokens_total{model_name="m",engine="%d"} 42.0\n'
    head = f'# HELP vllm:x leaked "{API_KEY}"\n# TYPE vllm:generation_tokens_total counter\n'
    count = size // len(line % 0)
    return head + "".join(line % i for i in range(count))


async def test_bundle_with_a_60_mb_exposition_stays_under_the_cap(pod: Pod, tmp_path: Path) -> None:
    text = huge_exposition(60 * 1024 * 1024)
    section_cap, bundle_cap = 4 * 1024 * 1024, 12 * 1024 * 1024
    nothing = ProcessMatch(titles=("none-" + pod.tag,), cmdlines=())
    incident = await capture(
        context(
            pod,
            process_match=nothing,
            metrics_text=[(time.time() - 4, text), (time.time() - 2, text), (time.time(), text)],
            section_max_bytes=section_cap,
            bundle_max_bytes=bundle_cap,
        )
    )
    del text
    scrapes = incident.bundle["metrics"]
    kept = sum(len(m["text"].encode()) for m in scrapes)
    assert kept <= section_cap
    assert sum(m.get("truncated_bytes", 0) for m in scrapes) >= 3 * 60 * 1024 * 1024 - section_cap
    newest = scrapes[-1]
    assert newest["text"].startswith("# HELP vllm:x")
    assert newest["text"].endswith("\n")  # cut on a line boundary
    assert API_KEY not in newest["text"]  # redaction still applied to what was kept
    record = IncidentStore(tmp_path / "diag").write(incident)
    size = sum(len(text.encode()) for text in read_dir(Path(record.path)).values())
    assert size <= bundle_cap + 1024 * 1024, size
    assert "bytes cut" in incident.summary


async def test_bundle_over_the_total_cap_drops_its_largest_section(
    pod: Pod, tmp_path: Path
) -> None:
    text = huge_exposition(3 * 1024 * 1024)
    nothing = ProcessMatch(titles=("none-" + pod.tag,), cmdlines=())
    incident = await capture(
        context(
            pod,
            process_match=nothing,
            metrics_text=[(time.time(), text)],
            section_max_bytes=4 * 1024 * 1024,
            bundle_max_bytes=1024 * 1024,
        )
    )
    assert incident.bundle["metrics"]["truncated"] is True
    assert incident.bundle["metrics"]["truncated_bytes"] > 3 * 1024 * 1024
    assert "metrics" in incident.bundle["section_errors"]
    assert len(json.dumps(incident.bundle).encode()) <= 1024 * 1024
    assert incident.summary.splitlines()[0] == incident.cause_line


def test_discovery_by_roots_takes_the_attributed_server_only() -> None:
    """Two simulated vLLMs on one host: rooted at one, discovery never takes the other.

    By patterns both match (they wear vLLM's titles and command line); the
    daemon roots its bundles at the server it attributed.
    """
    from sentinel.diagnostics.procs import discover
    from sentinel_sim.launch import SimProcess

    with SimProcess() as ours, SimProcess() as other:
        theirs = {other.api_pid, other.engine_pid}
        by_patterns = {d.pid for d in discover(ProcessMatch())}
        assert theirs <= by_patterns  # the patterns alone would take both servers
        rooted = {d.pid for d in discover(ProcessMatch(roots=(ours.api_pid,)))}
        assert {ours.api_pid, ours.engine_pid} <= rooted
        assert not rooted & theirs
        # A root's descendants are the target's, whatever include_descendants says.
        alone = ProcessMatch(roots=(ours.api_pid,), include_descendants=False)
        assert {d.pid for d in discover(alone)} == rooted


async def test_a_zombie_engine_is_the_targets_only_under_its_server(pod: Pod) -> None:
    """A zombie keeps only its 15-character comm, which every vLLM engine shares.

    The pod's own killed engine (its server matched) is in the bundle, and is
    the cause; another server's zombie engine on the same host is not.
    """
    title = f"VLLM::EngineCore_{pod.tag}"
    server, ours = pod.spawn_parent(title, "vllm", "serve", pod.tag)
    foreign_server, theirs = pod.spawn_parent(title, "python", "other-server")
    for pid in (ours, theirs):
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: _state(ours) == "Z" and _state(theirs) == "Z", "both engines zombies")

    incident = await capture(context(pod, cpu_window_s=0.0, py_spy=None))

    procs = by_pid(incident)
    assert set(procs) == {server.pid, ours}, procs.keys()
    assert procs[ours]["status"] == "zombie"
    assert incident.cause is CauseClass.PROCESS_GONE
    assert incident.bundle["cause"]["pid"] == ours
    assert theirs not in procs
    assert foreign_server.pid not in procs
