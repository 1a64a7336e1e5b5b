"""The human summary of a diagnostics bundle: the cause line, then what an operator reads next.

Rendered from the bundle's JSON alone (what :mod:`sentinel.diagnostics.bundle`
captured, after redaction and size caps), so a summary can be made again from a
stored ``bundle.json``; a section dropped for size renders as absent.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sentinel.diagnostics.headline import HANG_SUFFIX, unanswered
from sentinel.diagnostics.stuck import stuck_lines
from sentinel.diagnostics.watchdog import summary_lines as watchdog_lines


def iso(epoch: float) -> str:
    """A bundle timestamp: UTC, ISO 8601."""
    return datetime.fromtimestamp(epoch, tz=UTC).isoformat()


def render_summary(bundle: Mapping[str, Any]) -> str:
    """The human summary: the cause line first, then what an operator looks at next."""
    cause = bundle["cause"]
    lines = [
        cause["summary"],
        "",
        f"incident  {bundle['id']}",
        f"trigger   {bundle['trigger']['kind']}: {bundle['trigger']['reason']}",
        *_suspicion_line(str(bundle["trigger"]["kind"])),
        *stuck_lines(bundle.get("stuck")),
        f"captured  {bundle['started_at']} in {bundle['duration_s']:.2f} s",
        f"sentinel  {bundle['sentinel']['version']}",
        "",
        "processes:",
    ]
    processes = _listed(bundle.get("processes"))
    for p in processes:
        cpu = p.get("cpu_percent")
        cpu_text = "?" if cpu is None else f"{cpu:.0f}%"
        lines.append(
            f"  {p['pid']:>7}  {p.get('status', '?'):<10} cpu {cpu_text:>5}  "
            f"wchan {p.get('wchan') or '-':<22} threads {p.get('num_threads') or '?':>4}  "
            f"{p.get('title', '')[:80]}"
        )
        if p.get("errors"):  # why each is unreadable: "not readable" below
            lines.append(f"           unreadable: {', '.join(p['errors'])}")
    if not processes:
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
    now = (bundle.get("clock") or {}).get("monotonic")
    if isinstance(now, int | float):  # an older bundle has no clock to age them by
        late = unanswered(bundle.get("canary_history") or {}, bundle.get("outstanding") or {}, now)
        lines += ["", "canaries unanswered (oldest first):"]
        lines += [f"  {u.line()}" for u in late] or ["  (none: every kind's last canary passed)"]
    lines += ["", "canaries (last per kind):"]
    for kind, results in _mapped(bundle.get("canary_history")).items():
        if isinstance(results, list) and results:
            last = results[-1]
            lines.append(
                f"  {kind:<11} {last['reason']:<12} {last['duration']:.2f} s  {last['detail'][:80]}"
            )
    scrapes = _listed(bundle.get("metrics"))
    cut = sum(m.get("truncated_bytes", 0) for m in scrapes)
    lines.append(f"metrics   {len(scrapes)} scrape(s) kept" + (f", {cut} bytes cut" if cut else ""))
    samples = [s["at"] for s in _listed(bundle.get("samples")) if isinstance(s, dict) and "at" in s]
    if samples:
        lines.append(f"samples   {len(samples)} over {max(samples) - min(samples):.0f} s")
    lines += watchdog_lines(bundle.get("watchdog"))
    if bundle.get("section_errors"):
        lines += ["", "sections that failed:"]
        lines += [f"  {name}: {err}" for name, err in bundle["section_errors"].items()]
    if bundle.get("lacks"):
        lines += ["", "not readable (and why):"]
        lines += [f"  {name}: {why}" for name, why in _mapped(bundle["lacks"]).items()]
    lines += ["", "stacks:"]
    for pid, dump in _mapped(bundle.get("stacks")).items():
        if not isinstance(dump, dict):
            continue
        if dump["ok"]:
            lines.append(dump["text"])
        else:
            lines.append(f"Process {pid}: no stacks ({dump['error']})")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _suspicion_line(trigger: str) -> list[str]:
    """Says so when no hang was confirmed yet: the confirmed one's bundle follows, drawn red."""
    if trigger.endswith(HANG_SUFFIX) or trigger == "on-demand":
        return []
    return ["          (a suspicion: a confirmed hang gets a bundle of its own, taken once it is)"]


def _listed(section: Any) -> list[Any]:
    """A list section, or nothing when it is absent or was dropped for size."""
    return section if isinstance(section, list) else []


def _mapped(section: Any) -> dict[str, Any]:
    """A mapping section, or nothing when it is absent or was dropped for size."""
    if not isinstance(section, dict) or section.get("truncated") is True:
        return {}
    return section


def _mib(value: int | None) -> str:
    return "?" if value is None else str(value // (1024 * 1024))
