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

import pytest
import structlog
from prometheus_client import CollectorRegistry

from sentinel.canary.result import CanaryKind, CanaryResult, Reason
from sentinel.diagnostics.bundle import DiagnosticsContext, Incident, Trigger, capture
from sentinel.diagnostics.procs import ProcessMatch
from sentinel.diagnostics.store import IncidentStore
from sentinel.incidents import IncidentRecorder
from sentinel.k8s import EventReason, PodIdentity, build_event
from sentinel.telemetry.logging import configure_default_logging, configure_logging, get_logger
from sentinel.telemetry.metrics import SentinelMetrics
from tests import secret_corpus as corpus


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _read_dir(path: Path) -> dict[str, str]:
    return {f.name: f.read_text() for f in path.iterdir()}


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
