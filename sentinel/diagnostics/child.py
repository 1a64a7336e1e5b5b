"""Diagnostics captured in a child process: the daemon hands over the context and reads one line.

Why a child: a capture is a burst of Python work (psutil reads of every
process, py-spy output, redaction of every text, JSON of up to 32 MiB). In the
daemon it competes for the GIL with the thread that answers the kubelet's
probes, and what it imports and allocates (the NVML bindings, redaction
caches, allocator arenas grown for the bundle) stays in the daemon's resident
memory for good. In a child it costs the daemon one pipe write and one read,
and its memory is returned to the node when it exits.

The protocol, all of it local to one pod:

- stdin: one JSON header line (the context without its ``/metrics`` texts,
  the store, the log settings), then the UTF-8 bytes of each ``/metrics``
  text back to back, their byte sizes named in the header. Secrets in the config
  travel through the pipe, never through the child's argv (which ``/proc``
  shows to every process in the pod).
- stdout: one JSON line, the stored incident (:class:`StoredIncident`).
- stderr: the child's log lines as JSON, logged again by the daemon, so they
  go wherever (and in whatever format) the daemon's own lines go.

The child runs a little niced, so on a small node the daemon's probe answers
win the CPU. :func:`capture_in_child` never hangs: the child is killed (with
the stack dumpers it started) once its deadline passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.diagnostics.bundle import DiagnosticsContext, Incident, Trigger, capture
from sentinel.diagnostics.procs import ProcessMatch
from sentinel.diagnostics.sections import ProbeTransition
from sentinel.diagnostics.sizes import kept_metrics
from sentinel.diagnostics.store import IncidentRecord, IncidentStore, RetentionPolicy
from sentinel.telemetry.logging import configure_logging, get_logger
from sentinel.telemetry.redact import redact, structlog_processor

CHILD_MODULE = "sentinel.diagnostics.child"
CHILD_ENTRY = "sentinel.diagnostics"  # its __main__ boots, then runs main() below
CHILD_NICENESS = 10
# Interpreter start and imports (about 0.5 s idle, several seconds on a loaded
# node), then the store write, on top of the capture's own budget.
CHILD_OVERHEAD_S = 20.0
MAX_HEADER_BYTES = 16 * 1024 * 1024
MAX_REPLY_BYTES = 1024 * 1024
MAX_LOG_LINE_BYTES = 1024 * 1024
# What a relayed log line may not set: the daemon's own logger stamps these.
_STAMPED = ("event", "level", "logger", "timestamp")
_PIECE = 1024 * 1024  # encoded and written a piece at a time: no long GIL hold in the daemon


class ChildCaptureError(RuntimeError):
    """The child gave no stored incident; ``started`` is False when it could not even start."""

    def __init__(self, message: str, *, started: bool = True) -> None:
        super().__init__(message)
        self.started = started


@dataclass(frozen=True, slots=True)
class StoredIncident:
    """What the daemon needs of a captured and stored bundle (not the bundle itself)."""

    record: IncidentRecord
    cause: str
    cause_line: str
    duration_s: float
    complete: bool  # no section failed or ran out of time

    @classmethod
    def of(cls, incident: Incident, record: IncidentRecord) -> StoredIncident:
        return cls(
            record=record,
            cause=incident.cause.value,
            cause_line=incident.cause_line,
            duration_s=incident.duration_s,
            complete=not incident.bundle.get("section_errors"),
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StoredIncident:
        record = data["record"]
        names = {f.name for f in fields(IncidentRecord)}
        if not isinstance(record, dict) or set(record) != names:
            raise ValueError("the child's record has unexpected fields")
        return cls(
            record=IncidentRecord(**record),
            cause=str(data["cause"]),
            cause_line=str(data["cause_line"]),
            duration_s=float(data["duration_s"]),
            complete=bool(data["complete"]),
        )


# -- the context on the wire ------------------------------------------------------

# DiagnosticsContext fields that are not plain JSON values; every other field
# travels as it is, so a field added to the context reaches the child too.
_SHAPED = (
    "trigger",
    "process_match",
    "metrics_text",
    "metrics_cut",
    "canary_history",
    "probe_answers",
    "samples",
    "cgroup_root",
)
_PLAIN = tuple(f.name for f in fields(DiagnosticsContext) if f.name not in _SHAPED)


def encode_context(context: DiagnosticsContext) -> tuple[dict[str, Any], list[str]]:
    """The JSON header of ``context``, and the ``/metrics`` texts to send after it.

    Only what a bundle keeps of the scrapes is sent (a 60 MB exposition is cut
    to the section cap here, not piped whole); the header names each text's
    time, byte size and the bytes cut from it.
    """
    kept = kept_metrics(context.metrics_text, context.section_max_bytes, context.metrics_cut)
    header = {name: getattr(context, name) for name in _PLAIN}
    header.update(
        trigger=asdict(context.trigger),
        process_match=asdict(context.process_match),
        metrics=[[k.at, k.size, k.cut] for k in kept],
        canary_history={
            kind: [_result_json(r) for r in results]
            for kind, results in context.canary_history.items()
        },
        probe_answers=[t.to_json() for t in context.probe_answers],
        samples=list(context.samples),
        cgroup_root=str(context.cgroup_root),
    )
    return header, [k.text for k in kept]


def decode_context(header: Mapping[str, Any], texts: Sequence[str]) -> DiagnosticsContext:
    match: dict[str, Any] = {
        k: tuple(v) if isinstance(v, list) else v for k, v in header["process_match"].items()
    }
    metrics = header["metrics"]
    scrapes = [(float(at), text) for (at, _, _), text in zip(metrics, texts, strict=True)]
    return DiagnosticsContext(
        **{name: header[name] for name in _PLAIN},
        trigger=Trigger(**header["trigger"]),
        process_match=ProcessMatch(**match),
        metrics_text=tuple(scrapes),
        metrics_cut=tuple(int(cut) for _, _, cut in metrics),
        canary_history={
            kind: tuple(_result_from_json(r) for r in results)
            for kind, results in header["canary_history"].items()
        },
        probe_answers=tuple(ProbeTransition.from_json(t) for t in header["probe_answers"]),
        samples=tuple(header["samples"]),
        cgroup_root=Path(header["cgroup_root"]),
    )


def _result_json(result: CanaryResult) -> dict[str, Any]:
    data = {f.name: getattr(result, f.name) for f in fields(result)}
    data["kind"] = str(result.kind)
    data["reason"] = result.reason.value
    return data


def _result_from_json(data: Mapping[str, Any]) -> CanaryResult:
    values = dict(data)
    values["kind"] = CanaryKind(values["kind"])
    values["reason"] = Reason(values["reason"])
    return CanaryResult(**values)


# -- the daemon's side ------------------------------------------------------------


async def capture_in_child(
    context: DiagnosticsContext,
    store: IncidentStore,
    *,
    log_level: str = "info",
    python: str = sys.executable,
    overhead_s: float = CHILD_OVERHEAD_S,
) -> StoredIncident:
    """Capture and store one bundle in a child process; raises :class:`ChildCaptureError`.

    The child gets ``context.budget_s`` plus ``overhead_s`` before it is killed.
    """
    # Cutting a large exposition is CPU work: off the daemon's event loop.
    header, texts = await asyncio.to_thread(encode_context, context)
    header["store"] = {
        "root": str(store.root),
        "max_count": store.retention.max_count,
        "max_total_bytes": store.retention.max_total_bytes,
    }
    header["log"] = {"level": log_level}
    deadline = context.budget_s + overhead_s
    try:
        proc = await asyncio.create_subprocess_exec(
            python,
            "-P",  # the working folder is not searched: sentinel's own modules only
            "-m",
            CHILD_ENTRY,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            # A group of its own, so its stack dumpers are killed with it; not a
            # session of its own, which would put it in a scheduler autogroup of
            # its own where its niceness no longer yields the CPU to the daemon.
            process_group=0,
            limit=MAX_LOG_LINE_BYTES,
        )
    except OSError as exc:
        raise ChildCaptureError(f"the capture process did not start: {exc}", started=False) from exc
    try:
        async with asyncio.timeout(deadline):
            reply = await _exchange(proc, header, texts)
    except TimeoutError:
        message = f"the capture process gave no bundle within {deadline:.0f} s"
        raise ChildCaptureError(message) from None
    finally:
        _kill_group(proc)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(proc.wait(), 5.0)
    try:
        answer = json.loads(reply)
        if isinstance(answer, dict) and "error" in answer:
            raise ChildCaptureError(f"the capture process failed: {answer['error']}")
        return StoredIncident.from_json(answer)
    except (ValueError, KeyError, TypeError) as exc:
        code = proc.returncode
        raise ChildCaptureError(f"the capture process exited {code} without a bundle") from exc


async def _exchange(
    proc: asyncio.subprocess.Process, header: dict[str, Any], texts: Sequence[str]
) -> bytes:
    assert proc.stdin is not None
    assert proc.stdout is not None
    # Its stderr is read from the start: a child blocked on a full pipe would never answer.
    relay = asyncio.create_task(_relay_logs(proc.stderr), name="diagnostics-child-log")
    try:
        try:
            proc.stdin.write(json.dumps(header, default=str).encode() + b"\n")
            await proc.stdin.drain()
            for text in texts:
                for i in range(0, len(text), _PIECE):
                    proc.stdin.write(text[i : i + _PIECE].encode("utf-8", "surrogatepass"))
                    await proc.stdin.drain()
            proc.stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            pass  # it exited early; its reply (or its lack of one) says why
        reply = bytearray()
        while len(reply) < MAX_REPLY_BYTES and (piece := await proc.stdout.read(65536)):
            reply += piece
        await proc.wait()
        await relay
    finally:
        relay.cancel()
    return bytes(reply)


async def _relay_logs(stderr: asyncio.StreamReader | None) -> None:
    """Log each of the child's JSON lines again as the daemon's own; anything else as text."""
    if stderr is None:
        return
    while True:
        try:
            line = await stderr.readline()
        except ValueError:  # a line past the limit: the rest is not worth relaying
            while await stderr.read(65536):
                pass
            return
        if not line:
            return
        text = line.decode("utf-8", "replace").rstrip("\n")
        try:
            event = json.loads(text)
        except ValueError:
            event = None
        if not isinstance(event, dict) or not isinstance(event.get("event"), str):
            get_logger(CHILD_MODULE).warning("diagnostics_child_output", line=text[:2000])
            continue
        level = logging.getLevelName(str(event.get("level", "info")).upper())
        name = str(event.get("logger") or CHILD_MODULE)
        fields = {k: v for k, v in event.items() if k not in _STAMPED}
        get_logger(name).log(
            level if isinstance(level, int) else logging.INFO, event["event"], **fields
        )


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


# -- the child's side -------------------------------------------------------------


def main() -> int:
    """Read the context, capture, store, answer; every failure is a logged line and exit 1."""
    with contextlib.suppress(OSError):
        os.nice(CHILD_NICENESS)
    stdin = sys.stdin.buffer
    try:
        header = json.loads(stdin.readline(MAX_HEADER_BYTES))
        settings = header["log"]
        configure_logging(settings["level"], renderer="json", redactors=[structlog_processor])
        texts = [
            stdin.read(int(size)).decode("utf-8", "surrogatepass")
            for _, size, _ in header["metrics"]
        ]
        stored = _capture_and_store(header, texts)
    except Exception as exc:  # a failure is reported to the daemon, never a raw traceback
        error = redact(f"{type(exc).__name__}: {exc}")
        get_logger(CHILD_MODULE).error("diagnostics_child_failed", error=error)
        sys.stdout.write(json.dumps({"error": error}) + "\n")
        return 1
    sys.stdout.write(json.dumps(stored.to_json()) + "\n")
    sys.stdout.flush()
    return 0


def _capture_and_store(header: Mapping[str, Any], texts: list[str]) -> StoredIncident:
    context = decode_context(header, texts)
    kept = header["store"]
    store = IncidentStore(
        Path(kept["root"]), RetentionPolicy(int(kept["max_count"]), int(kept["max_total_bytes"]))
    )
    incident = asyncio.run(capture(context))
    return StoredIncident.of(incident, store.write(incident, timeline=True))
