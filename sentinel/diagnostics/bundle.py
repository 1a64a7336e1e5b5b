"""The diagnostics collector: one bundle of evidence per suspected hang.

Owns :class:`DiagnosticsContext` (what the daemon hands over: the trigger, how
to find vLLM's processes, the recent ``/metrics`` scrapes and minutes of their
samples, the canary history and the canaries unanswered, the answers' flips
(:class:`~sentinel.diagnostics.sections.ProbeTransition`), the effective
config), :class:`Incident` (the redacted bundle and its summary) and :func:`capture`.

Capture rules, because a restart destroys the evidence and the daemon must
keep answering probes while it runs:

- Process status is read first, before any stack dump starts.
- Every section (stacks, processes, GPU, cgroup) runs concurrently under one
  overall budget (8 s by default); blocking psutil, NVML and file reads run in
  worker threads and py-spy in subprocesses, so the event loop serving
  ``/livez`` is never blocked.
- :func:`capture` never raises: a section that fails or runs out of time
  records its own error and the others still land.
- Everything is redacted on the way out (:mod:`sentinel.telemetry.redact`):
  secrets by name and by shape, and the secret values found in any process's
  argv or environment, or in the config, wherever else they appear. The cause
  line is redacted where it is made, because it quotes a process title and
  travels on to the log, ``/incidents``, ``/status`` and the Event.
- A bundle is bounded: the ``/metrics`` scrapes and each stack dump are cut
  to ``section_max_bytes`` *before* they are redacted (redaction costs about
  0.3 s per 780 kB and copies the text), so a 60 MB exposition never costs
  three copies of itself; a section that was cut says how much
  (``truncated_bytes``). If the redacted bundle still exceeds
  ``bundle_max_bytes``, its largest sections are replaced by a marker naming
  their size, largest first, until it fits.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from sentinel import __version__
from sentinel.canary.result import CanaryResult
from sentinel.diagnostics import access, cgroup, gpu, procs, sections, stacks, watchdog, window
from sentinel.diagnostics.cause import Cause, CauseClass, ProcessObservation, classify
from sentinel.diagnostics.headline import of_path
from sentinel.diagnostics.sections import ProbeTransition
from sentinel.diagnostics.sizes import fit
from sentinel.diagnostics.stuck import of_stuck_engines, stuck_json
from sentinel.diagnostics.summary import render_summary
from sentinel.diagnostics.workload import engine_work
from sentinel.evidence.process_model import named_placements
from sentinel.telemetry.logging import get_logger
from sentinel.telemetry.redact import (
    SecretScrubber,
    redact,
    secret_values_in_argv,
    secret_values_in_value,
)

_T = TypeVar("_T")
log = get_logger(__name__)

DEFAULT_BUDGET_S = 8.0
DEFAULT_CPU_WINDOW_S = 0.5
DEFAULT_SECTION_MAX_BYTES = 8 * 1024 * 1024
DEFAULT_BUNDLE_MAX_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Trigger:
    """Why a bundle is taken: ``kind`` is a short slug (``engine-hang``, ``on-demand``)."""

    kind: str
    reason: str


@dataclass(frozen=True, slots=True)
class DiagnosticsContext:
    """Everything a capture needs from the daemon, and nothing of its internals.

    ``metrics_text`` holds recent raw ``/metrics`` scrapes as (wall-clock epoch
    seconds, text), oldest first. ``canary_history`` maps a canary kind to its
    recent results, oldest first. ``probe_answers`` holds the recent flips of
    the liveness, readiness and startup answers, oldest first (empty where no
    evaluator runs: ``sentinel diagnose``). ``config`` is the effective
    configuration as JSON-able data; it is redacted here.
    """

    trigger: Trigger
    process_match: procs.ProcessMatch = field(default_factory=procs.ProcessMatch)
    metrics_text: Sequence[tuple[float, str]] = ()
    # Bytes already cut from each of ``metrics_text`` before it got here (one
    # per text, aligned at the newest; empty: none), reported with the bundle's own cuts.
    metrics_cut: Sequence[int] = ()
    canary_history: Mapping[str, Sequence[CanaryResult]] = field(default_factory=dict)
    # The send times of canaries still unanswered, per kind (on the canaries' clock), and
    # the recent /metrics samples (sentinel.diagnostics.window): both plain JSON.
    outstanding: Mapping[str, Sequence[float]] = field(default_factory=dict)
    samples: Sequence[window.Sample] = ()
    probe_answers: Sequence[ProbeTransition] = ()
    config: Mapping[str, Any] = field(default_factory=dict)
    version: str = __version__
    budget_s: float = DEFAULT_BUDGET_S
    cpu_window_s: float = DEFAULT_CPU_WINDOW_S
    stack_timeout_s: float = stacks.DEFAULT_DUMP_TIMEOUT_S
    cgroup_root: Path = cgroup.DEFAULT_CGROUP_ROOT
    py_spy: str | None = None  # None: found on PATH or beside the interpreter
    gpu_enabled: bool = True
    xid_window_s: float = 0.2
    section_max_bytes: int = DEFAULT_SECTION_MAX_BYTES
    bundle_max_bytes: int = DEFAULT_BUNDLE_MAX_BYTES
    # The correctness fingerprint and the recent checks against it
    # (sentinel.fingerprint.book.bundle_section; empty: no correctness check runs).
    correctness: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Incident:
    """One captured bundle: ``bundle`` is redacted JSON-able data, ``summary`` human text."""

    id: str
    trigger: Trigger
    started_at: str  # ISO 8601, UTC
    duration_s: float
    cause: CauseClass
    cause_line: str
    summary: str
    bundle: dict[str, Any]


async def capture(context: DiagnosticsContext) -> Incident:
    """Take one bundle now. Never raises; returns within about ``context.budget_s``."""
    started_wall = datetime.now(UTC)
    started = time.monotonic()
    run = _Run(
        context, started + context.budget_s, SecretScrubber(secret_values_in_value(context.config))
    )
    read = await _read_sections(run)
    finding = _find_cause(run, read)
    stamp = _Stamp(
        incident_id_for(started_wall, context.trigger.kind),
        started_wall.isoformat(),
        round(time.monotonic() - started, 3),
        context.trigger,
        finding.cause,
    )
    safe, summary = await _write(run, read, finding, stamp)
    log.warning(
        "diagnostics.captured",
        incident=stamp.id,
        cause=stamp.cause.cause.value,
        summary=safe["cause"]["summary"],
        duration_s=stamp.duration_s,
        processes=len(read.snapshots) or len(read.discovered),
        section_errors=sorted(run.errors),
    )
    return Incident(
        id=stamp.id,
        trigger=context.trigger,
        started_at=stamp.started_at,
        duration_s=stamp.duration_s,
        cause=stamp.cause.cause,
        cause_line=safe["cause"]["summary"],
        summary=summary,
        bundle=safe,
    )


@dataclass(slots=True)
class _Run:
    """One capture's shared state, handed from step to step.

    Every section races the same deadline, and what each one failed at (and how
    long it took) lands in the bundle, never in an exception.
    """

    context: DiagnosticsContext
    deadline: float
    scrubber: SecretScrubber  # learns each process's secrets as it is read
    errors: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def remaining(self) -> float:
        return max(self.deadline - time.monotonic(), 0.05)

    def section(self, name: str, step: Callable[[], Awaitable[_T]]) -> Awaitable[_T | None]:
        # The time left is read now, as the section is made, not when it first runs.
        return _section(self.errors, self.timings, name, step, self.remaining())


@dataclass(frozen=True, slots=True)
class _Read:
    """What the sections read; None (or empty) where one failed, its error in the run."""

    discovered: list[procs.Discovered]
    snapshots: list[procs.ProcessRecord]
    dumps: dict[int, stacks.StackDump] | None
    gpus: gpu.GpuSection | None
    cpu: cgroup.CgroupSection | None
    watchdog: dict[str, Any] | None  # vLLM's own stack dumps (sentinel.diagnostics.watchdog)


@dataclass(frozen=True, slots=True)
class _Finding:
    """The cause and where it is stuck, shared by the bundle, its summary and the log."""

    observations: list[ProcessObservation]
    stuck: dict[str, list[int]]
    cause: Cause


@dataclass(frozen=True, slots=True)
class _Stamp:
    """What heads every bundle, even the small one left when assembling it fails."""

    id: str
    started_at: str  # ISO 8601, UTC
    duration_s: float
    trigger: Trigger
    cause: Cause

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "started_at": self.started_at,
            "duration_s": self.duration_s,
            "trigger": asdict(self.trigger),
            "cause": {
                "class": self.cause.cause.value,
                "summary": self.cause.summary,
                "pid": self.cause.pid,
            },
        }


async def _read_sections(run: _Run) -> _Read:
    # Status of every process first, before anything else touches them.
    found = await run.section(
        "discovery",
        lambda: asyncio.to_thread(procs.discover, run.context.process_match),
    )
    discovered: list[procs.Discovered] = found or []
    # Then everything else at once.
    snaps, dumps, gpus, vllm_dumps = await asyncio.gather(
        run.section("processes", lambda: _describe(run, discovered)),
        run.section("stacks", lambda: _dump_stacks(run, discovered)),
        run.section("gpu", lambda: _gpu_state(run.context)),
        run.section("watchdog", lambda: asyncio.to_thread(watchdog.of_discovered, discovered)),
    )
    snapshots: list[procs.ProcessRecord] = snaps or []
    # The CPU quota's check needs each process's threads and affinity, read above.
    threads = [
        cgroup.threads_from_snapshot(s.pid, s.title, s.environ, s.cpu_affinity, s.num_threads)
        for s in snapshots
    ]
    cpu = await run.section(
        "cgroup",
        lambda: asyncio.to_thread(cgroup.snapshot, threads, root=run.context.cgroup_root),
    )
    return _Read(discovered, snapshots, dumps, gpus, cpu, vllm_dumps)


async def _describe(run: _Run, discovered: list[procs.Discovered]) -> list[procs.ProcessRecord]:
    # CPU use is measured over this window, opened when the processes were discovered.
    await asyncio.sleep(min(run.context.cpu_window_s, run.remaining() / 4))
    return await asyncio.to_thread(procs.describe, discovered, scrubber=run.scrubber)


async def _dump_stacks(
    run: _Run, discovered: list[procs.Discovered]
) -> dict[int, stacks.StackDump]:
    # Each dump ends before the section does, so a slow one is recorded as
    # timed out instead of taking every other dump down with the section.
    return await stacks.dump_stacks(
        [d.pid for d in discovered],
        py_spy=run.context.py_spy,
        timeout_s=max(min(run.context.stack_timeout_s, run.remaining() - 0.3), 0.1),
        total_s=max(run.remaining() - 0.3, 0.1),
    )


async def _gpu_state(context: DiagnosticsContext) -> gpu.GpuSection:
    if not context.gpu_enabled:
        return gpu.GpuSection(False, "GPU collection disabled in config")
    return await asyncio.to_thread(gpu.snapshot, xid_window_s=context.xid_window_s)


def _find_cause(run: _Run, read: _Read) -> _Finding:
    if read.snapshots:
        observations = [s.observation() for s in read.snapshots]
    else:
        observations = procs.observations_from_discovery(read.discovered)
    stuck = named_placements(run.context.trigger.reason)
    judged = of_stuck_engines(observations, stuck.get("engine", []))
    running, compilers = engine_work(run.context.trigger.kind, judged, run.context.metrics_text)
    cause = classify(judged, running=running, compilers=compilers)
    # A path hang's headline names its path: its engine merely waits for work.
    context = run.context
    history = {k: [sections.canary_json(r) for r in v] for k, v in context.canary_history.items()}
    cause = of_path(cause, context.trigger.kind, history, context.outstanding, time.monotonic())
    if "discovery" in run.errors:  # discovery itself failed: we do not know
        cause = Cause(cause.cause, f"{cause.summary} (process discovery failed)", cause.pid)
    # The cause line quotes a process title, which may carry a secret of its argv.
    for item in read.discovered:
        run.scrubber.add_all(secret_values_in_argv(item.cmdline))
    cause = Cause(cause.cause, run.scrubber.scrub_text(redact(cause.summary)), cause.pid)
    return _Finding(observations, stuck, cause)


async def _write(
    run: _Run, read: _Read, finding: _Finding, stamp: _Stamp
) -> tuple[dict[str, Any], str]:
    try:
        return await asyncio.to_thread(_assemble, run, read, finding, stamp)
    except Exception as exc:  # a bug here must still leave a (small) bundle behind
        run.errors["assemble"] = f"{type(exc).__name__}: {exc}"
        safe: dict[str, Any] = run.scrubber.scrub(stamp.to_json() | {"section_errors": run.errors})
        return safe, safe["cause"]["summary"] + "\n"


def _assemble(
    run: _Run, read: _Read, finding: _Finding, stamp: _Stamp
) -> tuple[dict[str, Any], str]:
    # Plain CPU work over a few hundred kB of text: run off the event loop.
    context = run.context
    bundle: dict[str, Any] = stamp.to_json() | {
        # The data-parallel engines and tensor-parallel ranks the trigger
        # or the cause's process names ([] where none is named).
        "stuck": stuck_json(finding.stuck, finding.observations, finding.cause.pid),
        "sentinel": {"version": context.version, "config": dict(context.config)},
        "processes": [asdict(s) for s in read.snapshots]
        or [sections.discovered_json(d) for d in read.discovered],
        "stacks": {
            str(pid): sections.stack_json(d, context.section_max_bytes)
            for pid, d in (read.dumps or {}).items()
        },
        "gpu": read.gpus.to_json() if read.gpus is not None else None,
        "watchdog": read.watchdog,
        "cgroup": sections.cgroup_json(read.cpu),
        "metrics": sections.metrics_json(
            context.metrics_text, context.section_max_bytes, context.metrics_cut
        ),
        "outstanding": {k: list(v) for k, v in context.outstanding.items()},
        # Progress and queue over the last minutes: the flat stretch that confirmed a hang.
        "samples": list(context.samples),
        "canary_history": {
            kind: [sections.canary_json(r) for r in results]
            for kind, results in context.canary_history.items()
        },
        # The answers' flips on the canaries' clock, their reasons redacted with the rest.
        "probe_answers": [t.to_json() for t in context.probe_answers],
        "correctness": dict(context.correctness) or None,
        "section_errors": run.errors,
        "section_durations_s": run.timings,
        # Where the canaries' and the answers' monotonic times and the scrapes' wall times meet
        # (CLOCK_MONOTONIC is the host's, the daemon's and its child's alike).
        "clock": {"monotonic": time.monotonic(), "wall": time.time()},
    }
    # What the process and stack sections could not read, field by field, and why.
    bundle["lacks"] = access.lacks(bundle["processes"], bundle["stacks"])
    safe: dict[str, Any] = run.scrubber.scrub(bundle)
    fit(safe, context.bundle_max_bytes)
    return safe, run.scrubber.scrub_text(render_summary(safe))


async def _section(
    errors: dict[str, Any],
    timings: dict[str, float],
    name: str,
    run: Callable[[], Awaitable[_T]],
    timeout_s: float,
) -> _T | None:
    """Run one section under its time limit; record its error instead of raising."""
    started = time.monotonic()
    try:
        async with asyncio.timeout(timeout_s):
            return await run()
    except TimeoutError:
        errors[name] = f"timed out after {timeout_s:.1f} s"
    except Exception as exc:  # a section must never take the bundle (or the daemon) down
        errors[name] = f"{type(exc).__name__}: {exc}"
    finally:
        timings[name] = round(time.monotonic() - started, 3)
    return None


def incident_id_for(at: datetime, kind: str) -> str:
    slug = "".join(c if c.isalnum() else "-" for c in kind.lower()).strip("-") or "incident"
    return f"{at.strftime('%Y%m%dT%H%M%SZ')}-{slug[:40]}"
