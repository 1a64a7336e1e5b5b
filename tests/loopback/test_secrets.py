"""The planted-secret corpus through every sink: a real bundle, the log, an Event, /incidents.

The fake vLLM is a real interpreter started with the corpus in its
environment and on its command line (``vllm serve TAG ...``, so the bundle's
process section and the cause line see it), stopped so that the cause line
quotes its title. Nothing it carries may reach any sink; its ordinary flags
must.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest
import structlog
from prometheus_client import CollectorRegistry

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.diagnostics.bundle import DiagnosticsContext, Incident, Trigger, capture
from sentinel.diagnostics.procs import ProcessMatch
from sentinel.diagnostics.store import IncidentStore
from sentinel.evaluation.incidents import IncidentRecorder
from sentinel.telemetry.events import EventReason, PodIdentity, build_event
from sentinel.telemetry.logging import configure_default_logging, configure_logging, get_logger
from sentinel.telemetry.metrics import SentinelMetrics
from sentinel_sim.launch import SimProcess
from tests import secret_corpus as corpus
from tests.loopback.sidecar import eventually, running_sidecar


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _read_dir(path: Path) -> dict[str, str]:
    # The text files; timeline.png is drawn from the redacted bundle read here.
    return {f.name: f.read_text() for f in path.iterdir() if f.suffix != ".png"}


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@pytest.fixture
def fake_vllm() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    tag = uuid.uuid4().hex[:8]
    argv = ["vllm", "serve", tag, *corpus.SECRET_ARGV, *corpus.HARMLESS_ARGV]
    env = dict(os.environ, **corpus.ENV, **corpus.HARMLESS_ENV)
    child = subprocess.Popen(
        [sys.executable, "-c", "import threading; threading.Event().wait()", *argv], env=env
    )
    try:
        wait_until(lambda: Path(f"/proc/{child.pid}/cmdline").read_bytes().count(b"\0") > 3, "argv")
        os.kill(child.pid, signal.SIGSTOP)
        wait_until(lambda: _state(child.pid) == "T", "stopped")
        yield tag, child
    finally:
        os.kill(child.pid, signal.SIGCONT)
        child.kill()
        child.wait(timeout=10)


@pytest.fixture
async def incident(fake_vllm: tuple[str, subprocess.Popen[bytes]]) -> Incident:
    tag, _child = fake_vllm
    failure = CanaryResult(
        "text-default", CanaryKind.TEXT, Reason.HTTP_STATUS, 100.0, 0.2, corpus.ERROR_BODY
    )
    context = DiagnosticsContext(
        trigger=Trigger("engine-hang", f"canary failed: {corpus.EXCEPTION_MESSAGE}"),
        process_match=ProcessMatch(titles=(f"VLLM::EngineCore_{tag}",), cmdlines=(f"serve {tag}",)),
        metrics_text=[(time.time(), "vllm:num_requests_running 1.0\n")],
        canary_history={"text": [failure]},
        config=corpus.CONFIG,
        gpu_enabled=False,
    )
    return await capture(context)


async def test_bundle_files_and_incidents_leak_nothing(incident: Incident, tmp_path: Path) -> None:
    assert "process stopped" in incident.cause_line
    assert "--passphrase <redacted>" in incident.cause_line  # the title, minus its secrets

    store = IncidentStore(tmp_path / "diag")
    record = await store.write_async(incident)
    files = await asyncio.to_thread(_read_dir, Path(record.path))
    assert set(files) == {"bundle.json", "summary.txt", "incident.json"}
    for name, text in files.items():
        assert corpus.leaked(text) == [], name
    [process] = json.loads(files["bundle.json"])["processes"]
    readable = files["bundle.json"] + " ".join(process["cmdline"])
    assert [s for s in corpus.SURVIVORS if s not in readable] == []
    assert process["environ"]["HF_TOKEN"] == "<redacted>"
    assert process["environ"]["CUDA_VISIBLE_DEVICES"] == "0"

    recorder = IncidentRecorder(store, SentinelMetrics(CollectorRegistry()), lambda t: None)  # type: ignore[arg-type,return-value]
    served = json.dumps(await recorder.incidents_json())
    assert record.id in served
    assert corpus.leaked(served) == []


def test_event_message_is_redacted_where_it_is_built() -> None:
    # What reaches an Event: reasons and cause lines quoting titles, errors and
    # env entries. (A multi-line value cannot be told apart in free text; the
    # API key's lines are covered by the bundle and log tests.)
    env = [f"{k}={v}" for k, v in corpus.ENV.items() if "\n" not in v]
    raw = " ".join(
        [corpus.EXCEPTION_MESSAGE, corpus.ERROR_BODY, corpus.TARGET_URL, *corpus.SECRET_ARGV, *env]
    )
    event = build_event(
        PodIdentity("vllm-0", "default"),
        EventReason.DIAGNOSTICS,
        raw,
        now=datetime(2026, 1, 1, tzinfo=UTC),
    )
    assert corpus.leaked(raw)  # the corpus is really in what was handed over
    assert corpus.leaked(event.message) == []


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    configure_logging("debug", renderer="json", stream=stream)
    try:
        yield stream
    finally:
        root = logging.getLogger()
        for handler in list(root.handlers):
            root.removeHandler(handler)
        structlog.reset_defaults()
        configure_default_logging()


def test_log_lines_and_tracebacks_leak_nothing(log_stream: io.StringIO) -> None:
    log = get_logger("sentinel.test")
    log.warning(
        "sentinel_started",
        target=corpus.TARGET_URL,
        settings=corpus.CONFIG,
        env=corpus.ENV,
        argv=["vllm", *corpus.SECRET_ARGV],
        detail=corpus.ERROR_BODY,
        api_key=corpus.ENV["SENTINEL_API_KEY"],
    )
    try:
        raise ConnectionError(corpus.EXCEPTION_MESSAGE + "\n" + corpus.ERROR_BODY)
    except ConnectionError:
        log.exception("canary_failed")
    logging.getLogger("httpx").error("upstream said %s", corpus.ERROR_BODY)

    text = log_stream.getvalue()
    events = [json.loads(line) for line in text.splitlines()]
    assert [e["event"] for e in events][:2] == ["sentinel_started", "canary_failed"]
    assert "ConnectionError" in events[1]["exception"]
    assert corpus.leaked(text) == []


def _files(folder: Path) -> list[str]:
    """The text of every file below ``folder``."""
    return [p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file()]


def test_sentinel_diagnose_leaks_nothing(
    fake_vllm: tuple[str, subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    """``sentinel diagnose`` over the planted process: its output and its bundle are clean."""
    tag, _child = fake_vllm
    with SimProcess() as sim:
        target = sim.base_url.replace("http://", f"http://sentinel:{corpus.TARGET_PASSWORD}@")
        env = {k: v for k, v in os.environ.items() if not k.startswith("SENTINEL_")}
        env["SENTINEL_API_KEY"] = corpus.API_KEY
        argv = [sys.executable, "-m", "sentinel", "diagnose", "--target", target]
        argv += ["--process-cmdline", f"serve {tag}", "--diagnostics-dir", str(tmp_path)]
        argv += ["--reason", f"canary failed: {corpus.EXCEPTION_MESSAGE}"]
        done = subprocess.run(argv, capture_output=True, env=env, timeout=120, check=False)
    output = done.stdout.decode() + done.stderr.decode()
    assert done.returncode == 0, output
    bundle = "\n".join(_files(tmp_path))
    assert bundle, "no bundle written"
    assert corpus.leaked(output + bundle) == []
    assert tag in bundle  # the planted process was captured, ordinary flags kept
    assert "--max-num-seqs" in bundle


async def test_a_daemon_incident_status_and_incidents_leak_nothing(tmp_path: Path) -> None:
    """A live daemon whose target URL and API key carry secrets.

    The simulated vLLM's engine is stopped and sentinel captures an incident:
    ``/status``, ``/incidents``, ``/metrics`` and every bundle file are read
    back. (The simulator retitles its processes, which overwrites their
    environment, so a server's planted environment and argv are the capture
    test's: ``test_bundle_files_and_incidents_leak_nothing``.)
    """
    key_file = tmp_path / "api-key"
    key_file.write_text(corpus.API_KEY + "\n")
    diagnostics = tmp_path / "diagnostics"
    with SimProcess() as sim:
        target = sim.base_url.replace("http://", f"http://sentinel:{corpus.TARGET_PASSWORD}@")
        async with running_sidecar(
            target, diagnostics=True, diagnostics_dir=str(diagnostics), api_key_file=str(key_file)
        ) as sidecar:
            await eventually(sidecar.green, 30.0, "startup, readiness and liveness all 200")
            engine = sim.engine_pid
            server = {child.pid for child in psutil.Process(engine).parents()}
            sim.control.stop_engine()
            try:

                async def captured() -> bool:
                    return bool((await sidecar.json("/incidents"))["incidents"])

                async def red() -> bool:
                    return await sidecar.code("/livez") == 503

                await eventually(captured, 30.0, "an incident in /incidents")
                await eventually(red, 30.0, "/livez 503")
                pages = [
                    (await sidecar.client.get(sidecar.url + path)).text
                    for path in ("/status", "/incidents", "/metrics", "/livez", "/readyz")
                ]
            finally:
                sim.control.resume_engine()
    bundle = "\n".join(await asyncio.to_thread(_files, diagnostics))
    assert bundle, "no bundle written"
    assert corpus.leaked("\n".join([*pages, bundle])) == []
    assert "VLLM::EngineCore" in bundle  # the server's processes were captured ...
    (found,) = await asyncio.to_thread(lambda: list(diagnostics.rglob("bundle.json")))
    pids = {p["pid"] for p in json.loads(found.read_text())["processes"]}
    assert engine in pids
    assert pids <= {engine, *server}, "only the target's processes, never another server's"
    assert "127.0.0.1" in pages[0]  # the target stays named, without its userinfo
