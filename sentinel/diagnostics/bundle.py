"""The diagnostics collector: one bundle of evidence per suspected hang.

Owns :class:`DiagnosticsContext` (what the daemon hands over: the trigger, how
to find vLLM's processes, the recent ``/metrics`` scrapes, the canary history,
the effective config), :class:`Incident` (the redacted, JSON-able bundle and
its human summary) and :func:`capture`.

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
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from sentinel import __version__
from sentinel.canary.result import CanaryResult
from sentinel.diagnostics import access, cgroup, gpu, procs, stacks
from sentinel.diagnostics.cause import Cause, CauseClass, classify
from sentinel.diagnostics.sizes import cut_text, json_size, kept_metrics
from sentinel.diagnostics.stuck import of_stuck_engines, stuck_json
from sentinel.diagnostics.summary import iso, render_summary
from sentinel.evidence.process_model import named_placements
from sentinel.telemetry.logging import get_logger
from sentinel.telemetry.redact import (
    SecretScrubber,
    redact,
    redact_argv,
    secret_values_in_argv,
    secret_values_in_value,
)

_T = TypeVar("_T")
log = get_logger(__name__)

DEFAULT_BUDGET_S = 8.0
DEFAULT_CPU_WINDOW_S = 0.5
DEFAULT_SECTION_MAX_BYTES = 8 * 1024 * 1024
DEFAULT_BUNDLE_MAX_BYTES = 32 * 1024 * 1024
# Sections that may be dropped whole, in the order they go when a bundle is too large.
DROPPABLE_SECTIONS = ("metrics", "stacks", "canary_history", "processes", "cgroup", "gpu")


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
    recent results, oldest first. ``config`` is the effective configuration as
    JSON-able data; it is redacted here.
    """

    trigger: Trigger
    process_match: procs.ProcessMatch = field(default_factory=procs.ProcessMatch)
    metrics_text: Sequence[tuple[float, str]] = ()
    # Bytes already cut from each of ``metrics_text`` before it got here (one
    # per text, aligned at the newest; empty: none), reported with the bundle's own cuts.
    metrics_cut: Sequence[int] = ()
    canary_history: Mapping[str, Sequence[CanaryResult]] = field(default_factory=dict)
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
    deadline = started + context.budget_s
    scrubber = SecretScrubber(secret_values_in_value(context.config))
    sections: dict[str, Any] = {}
    timings: dict[str, float] = {}

    def remaining() -> float:
        return max(deadline - time.monotonic(), 0.05)

    # Step 1: status of every process, before anything else touches them.
    found = await _section(
        sections,
        timings,
        "discovery",
        lambda: asyncio.to_thread(procs.discover, context.process_match),
        remaining(),
    )
    discovered: list[procs.Discovered] = found or []

    # Step 2: everything else at once.
    async def processes() -> list[procs.ProcessRecord]:
        await asyncio.sleep(min(context.cpu_window_s, remaining() / 4))
        return await asyncio.to_thread(procs.describe, discovered, scrubber=scrubber)

    async def stack_dumps() -> dict[int, stacks.StackDump]:
        # Each dump ends before the section does, so a slow one is recorded as
        # timed out instead of taking every other dump down with the section.
        return await stacks.dump_stacks(
            [d.pid for d in discovered],
            py_spy=context.py_spy,
            timeout_s=max(min(context.stack_timeout_s, remaining() - 0.3), 0.1),
            total_s=max(remaining() - 0.3, 0.1),
        )

    async def gpu_state() -> gpu.GpuSection:
        if not context.gpu_enabled:
            return gpu.GpuSection(False, "GPU collection disabled in config")
        return await asyncio.to_thread(gpu.snapshot, xid_window_s=context.xid_window_s)

    snaps, dumps, gpus = await asyncio.gather(
        _section(sections, timings, "processes", processes, remaining()),
        _section(sections, timings, "stacks", stack_dumps, remaining()),
        _section(sections, timings, "gpu", gpu_state, remaining()),
    )
    snapshots: list[procs.ProcessRecord] = snaps or []

    threads = [
        cgroup.threads_from_snapshot(s.pid, s.title, s.environ, s.cpu_affinity, s.num_threads)
        for s in snapshots
    ]
    cpu_section = await _section(
        sections,
        timings,
        "cgroup",
        lambda: asyncio.to_thread(cgroup.snapshot, threads, root=context.cgroup_root),
        remaining(),
    )

    if snapshots:
        observations = [s.observation() for s in snapshots]
    else:
        observations = procs.observations_from_discovery(discovered)
    stuck = named_placements(context.trigger.reason)
    cause = classify(of_stuck_engines(observations, stuck.get("engine", [])))
    if "discovery" in sections:  # discovery itself failed: we do not know
        cause = Cause(cause.cause, f"{cause.summary} (process discovery failed)", cause.pid)
    for item in discovered:
        scrubber.add_all(secret_values_in_argv(item.cmdline))
    cause = Cause(cause.cause, scrubber.scrub_text(redact(cause.summary)), cause.pid)

    incident_id = incident_id_for(started_wall, context.trigger.kind)

    def assemble() -> tuple[dict[str, Any], str]:
        # Plain CPU work over a few hundred kB of text: done off the event loop.
        bundle: dict[str, Any] = {
            "id": incident_id,
            "started_at": started_wall.isoformat(),
            "duration_s": duration,
            "trigger": asdict(context.trigger),
            "cause": {"class": cause.cause.value, "summary": cause.summary, "pid": cause.pid},
            # The data-parallel engines and tensor-parallel ranks the trigger
            # or the cause's process names ([] where none is named).
            "stuck": stuck_json(stuck, observations, cause.pid),
            "sentinel": {"version": context.version, "config": dict(context.config)},
            "processes": [asdict(s) for s in snapshots]
            or [_discovered_json(d) for d in discovered],
            "stacks": {
                str(pid): _stack_json(d, context.section_max_bytes)
                for pid, d in (dumps or {}).items()
            },
            "gpu": gpus.to_json() if gpus is not None else None,
            "cgroup": _cgroup_json(cpu_section),
            "metrics": _metrics_json(
                context.metrics_text, context.section_max_bytes, context.metrics_cut
            ),
            "canary_history": {
                kind: [_canary_json(r) for r in results]
                for kind, results in context.canary_history.items()
            },
            "correctness": dict(context.correctness) or None,
            "section_errors": sections,
            "section_durations_s": timings,
        }
        # What the process and stack sections could not read, field by field, and why.
        bundle["lacks"] = access.lacks(bundle["processes"], bundle["stacks"])
        safe: dict[str, Any] = scrubber.scrub(bundle)
        _fit(safe, context.bundle_max_bytes)
        return safe, scrubber.scrub_text(render_summary(safe))

    duration = round(time.monotonic() - started, 3)
    try:
        safe, summary = await asyncio.to_thread(assemble)
    except Exception as exc:  # a bug here must still leave a (small) bundle behind
        sections["assemble"] = f"{type(exc).__name__}: {exc}"
        safe = {
            "id": incident_id,
            "started_at": started_wall.isoformat(),
            "duration_s": duration,
            "trigger": asdict(context.trigger),
            "cause": {"class": cause.cause.value, "summary": cause.summary, "pid": cause.pid},
            "section_errors": sections,
        }
        safe = scrubber.scrub(safe)
        summary = safe["cause"]["summary"] + "\n"
    log.warning(
        "diagnostics.captured",
        incident=incident_id,
        cause=cause.cause.value,
        summary=safe["cause"]["summary"],
        duration_s=duration,
        processes=len(snapshots) or len(discovered),
        section_errors=sorted(sections),
    )
    return Incident(
        id=incident_id,
        trigger=context.trigger,
        started_at=started_wall.isoformat(),
        duration_s=duration,
        cause=cause.cause,
        cause_line=safe["cause"]["summary"],
        summary=summary,
        bundle=safe,
    )


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


def _discovered_json(d: procs.Discovered) -> dict[str, Any]:
    return {
        "pid": d.pid,
        "ppid": d.ppid,
        "title": d.name,
        "role": d.role.value,
        "status": d.status.value,
        "cmdline": redact_argv(d.cmdline),
        "errors": d.errors,
    }


def _cgroup_json(section: cgroup.CgroupSection | None) -> dict[str, Any] | None:
    if section is None:
        return None
    return {
        "root": asdict(section.root),
        "per_process": {str(pid): asdict(q) for pid, q in section.per_process.items()},
        "checks": [asdict(c) | {"oversubscribed": c.oversubscribed} for c in section.checks],
        "omp_oversubscribed_pids": [c.pid for c in section.omp_oversubscribed],
    }


def _canary_json(result: CanaryResult) -> dict[str, Any]:
    # Its fields are scalars: a plain copy, not asdict's recursive deep copy.
    data = {f.name: getattr(result, f.name) for f in fields(result)}
    data["ok"] = result.ok
    # A correctness check's token ids are in the bundle's correctness section, with
    # how each left the fingerprint (and no NaN that strict JSON readers refuse).
    data.pop("generations", None)
    return data


def _metrics_json(
    scrapes: Sequence[tuple[float, str]], limit: int, cut_before: Sequence[int]
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for kept in kept_metrics(scrapes, limit, cut_before):
        entry: dict[str, Any] = {"at": iso(kept.at), "text": kept.text}
        if kept.cut:
            entry["truncated_bytes"] = kept.cut
        out.append(entry)
    return out


def _stack_json(dump: stacks.StackDump, limit: int) -> dict[str, Any]:
    data = asdict(dump)
    text = data.get("text")
    if isinstance(text, str):
        data["text"], cut = cut_text(text, limit)
        if cut:
            data["truncated_bytes"] = cut
    return data


def _fit(bundle: dict[str, Any], limit: int) -> None:
    """Drop the largest droppable sections until the bundle's JSON fits ``limit`` bytes."""
    sizes = {
        name: json_size(bundle[name]) for name in DROPPABLE_SECTIONS if bundle.get(name) is not None
    }
    total = json_size(bundle)
    for name, size in sorted(sizes.items(), key=lambda item: -item[1]):
        if total <= limit:
            return
        bundle[name] = {"truncated": True, "truncated_bytes": size}
        total -= size - json_size(bundle[name])
        bundle.setdefault("section_errors", {})[name] = (
            f"dropped: {size} bytes would exceed the bundle cap of {limit} bytes"
        )
