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
from sentinel.diagnostics import cgroup, gpu, procs, stacks
from sentinel.diagnostics.cause import Cause, CauseClass, classify
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
MAX_METRICS_SCRAPES = 3


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
        cause = classify([s.observation() for s in snapshots])
    else:
        cause = classify(procs.observations_from_discovery(discovered))
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
            "sentinel": {"version": context.version, "config": dict(context.config)},
            "processes": [asdict(s) for s in snapshots]
            or [_discovered_json(d) for d in discovered],
            "stacks": {str(pid): asdict(d) for pid, d in (dumps or {}).items()},
            "gpu": gpus.to_json() if gpus is not None else None,
            "cgroup": _cgroup_json(cpu_section),
            "metrics": [
                {"at": _iso(at), "text": text}
                for at, text in context.metrics_text[-MAX_METRICS_SCRAPES:]
            ],
            "canary_history": {
                kind: [_canary_json(r) for r in results]
                for kind, results in context.canary_history.items()
            },
            "section_errors": sections,
            "section_durations_s": timings,
        }
        safe: dict[str, Any] = scrubber.scrub(bundle)
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
    data = asdict(result)
    data["ok"] = result.ok
    return data


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).isoformat()


def render_summary(bundle: Mapping[str, Any]) -> str:
    """The human summary: the cause line first, then what an operator looks at next."""
    cause = bundle["cause"]
    lines = [
        cause["summary"],
        "",
        f"incident  {bundle['id']}",
        f"trigger   {bundle['trigger']['kind']}: {bundle['trigger']['reason']}",
        f"captured  {bundle['started_at']} in {bundle['duration_s']:.2f} s",
        f"sentinel  {bundle['sentinel']['version']}",
        "",
        "processes:",
    ]
    for p in bundle["processes"]:
        cpu = p.get("cpu_percent")
        cpu_text = "?" if cpu is None else f"{cpu:.0f}%"
        lines.append(
            f"  {p['pid']:>7}  {p.get('status', '?'):<10} cpu {cpu_text:>5}  "
            f"wchan {p.get('wchan') or '-':<22} threads {p.get('num_threads') or '?':>4}  "
            f"{p.get('title', '')[:80]}"
        )
        if p.get("errors"):
            lines.append(f"           unreadable: {p['errors']}")
    if not bundle["processes"]:
        lines.append("  (no vLLM process visible)")
    cg = bundle.get("cgroup") or {}
    root = cg.get("root") or {}
    if root.get("error"):
        lines += ["", f"cpu quota unknown ({root['path']}: {root['error']})"]
    elif root:
        quota = root.get("cpus")
        lines += [
            "",
            f"cpu quota {('unlimited' if quota is None else f'{quota:g} CPUs')}"
            f" ({root.get('path')}), throttled periods "
            f"{(root.get('throttling') or {}).get('nr_throttled', '?')}",
        ]
    for check in cg.get("checks") or []:
        if check.get("omp_oversubscribed"):
            lines.append(f"  OVERSUBSCRIBED pid {check['pid']}: {'; '.join(check['notes'])}")
    g = bundle.get("gpu") or {}
    lines += ["", f"gpu       {g.get('reason', 'not collected')}"]
    for dev in g.get("devices") or []:
        lines.append(
            f"  gpu{dev['index']} {dev.get('name')}: util {dev.get('utilization_gpu_percent')}% "
            f"mem {_mib(dev.get('memory_used_bytes'))}/{_mib(dev.get('memory_total_bytes'))} MiB "
            f"temp {dev.get('temperature_c')} C power {dev.get('power_w')} W"
        )
    for event in g.get("xid_events") or []:
        lines.append(f"  XID {event['xid']} on gpu{event['device_index']}")
    lines += ["", "canaries (last per kind):"]
    for kind, results in (bundle.get("canary_history") or {}).items():
        if results:
            last = results[-1]
            lines.append(
                f"  {kind:<11} {last['reason']:<12} {last['duration']:.2f} s  {last['detail'][:80]}"
            )
    lines.append(f"metrics   {len(bundle.get('metrics') or [])} scrape(s) kept")
    if bundle.get("section_errors"):
        lines += ["", "sections that failed:"]
        lines += [f"  {name}: {err}" for name, err in bundle["section_errors"].items()]
    lines += ["", "stacks:"]
    for pid, dump in (bundle.get("stacks") or {}).items():
        if dump["ok"]:
            lines.append(dump["text"])
        else:
            lines.append(f"Process {pid}: no stacks ({dump['error']})")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _mib(value: int | None) -> str:
    return "?" if value is None else str(value // (1024 * 1024))
