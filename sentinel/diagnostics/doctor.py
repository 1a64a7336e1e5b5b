"""``sentinel doctor``: the pod setup pitfalls that make hangs (or false restarts) likely.

Owns the checks and the report. Each check is a function of numbers or text,
so it is tested without a pod; :func:`sentinel.diagnostics.checkup.run_doctor`
only gathers the inputs, for the one target it was given:

- *CPU*: the cgroup CPU quota against each vLLM process's ``OMP_NUM_THREADS``
  (or the CPUs in its affinity mask) and thread count: unset on a 192-CPU host
  with a 12-CPU quota, OpenMP starts 192 threads that throttle the container.
- *Processes*: how the target's API server is attributed and which process
  evidence is off (:mod:`sentinel.diagnostics.access`), each naming the
  permission it needs and the manifest component that grants it.
- *Priority*: canaries jump the queue only when vLLM runs
  ``--scheduling-policy priority``; vLLM silently ignores ``priority`` otherwise.
  A command line that is not vLLM's says nothing of the policy: "unknown".
- *Metrics*: sentinel's progress evidence comes from vLLM's ``/metrics``
  (``vllm:generation_tokens_total``, ``vllm:iteration_tokens_total``); without
  them hangs are confirmed on canaries alone, more slowly: a note, since
  ``sentinel run`` works without them.
- *Canaries*: each kind is probed with one canary (what the server answers,
  not what its command line suggests): one it cannot do (an image refused, an
  endpoint missing) is set aside when sentinel runs, and one that cannot be
  validated, known from a vLLM command line (the structured kind behind
  ``--reasoning-parser``), disables itself; the doctor names both beforehand.
- *Probe timing*: sentinel's windows against the kubelet's probe settings.
- *A running sentinel* (``--sentinel URL``, :mod:`.running`): the canary kinds
  it set aside for this server, a server not answering.

Exit code: 0 when nothing is a problem (warnings allowed), 1 otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table

from sentinel.canary.catalog import load_catalog
from sentinel.canary.spec import CanarySpec
from sentinel.config.settings import Settings
from sentinel.diagnostics import access, cgroup
from sentinel.diagnostics.bundle import DEFAULT_BUDGET_S
from sentinel.evidence.process_model import (
    ProcessPatterns,
    ProcessSnapshot,
    SchedulingPolicy,
    scheduling_policy,
)

PROGRESS_COUNTERS = ("vllm:generation_tokens_total", "vllm:iteration_tokens_total")


class Severity(StrEnum):
    OK = "ok"
    NOTE = "note"  # worth knowing, nothing to fix: sentinel works without it
    WARN = "warn"
    PROBLEM = "problem"
    SKIPPED = "skipped"


@dataclass(frozen=True, slots=True)
class DoctorCheck:
    area: str
    severity: Severity
    summary: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class DoctorReport:
    checks: tuple[DoctorCheck, ...]

    @property
    def problems(self) -> list[DoctorCheck]:
        return [c for c in self.checks if c.severity is Severity.PROBLEM]

    @property
    def exit_code(self) -> int:
        return 1 if self.problems else 0


def _default(name: str) -> float:
    """A setting's declared default, so the doctor judges what ``sentinel run`` would run."""
    return float(Settings.model_fields[name].default)


@cache
def shipped_canaries() -> tuple[CanarySpec, ...]:
    return load_catalog().enabled()


def _longest(specs: Sequence[CanarySpec], attr: str, *, text: bool) -> float:
    """The longest ``attr`` (deadline, interval) of the text canaries, or of all the others."""
    return float(max((getattr(s, attr) for s in specs if (s.kind == "text") is text), default=0))


def _shipped_longest(attr: str, *, text: bool) -> Any:
    """A field defaulting to the shipped catalog's :func:`_longest`, read when first needed."""
    return field(default_factory=lambda: _longest(shipped_canaries(), attr, text=text))


@dataclass(frozen=True, slots=True)
class ProbeTimings:
    """sentinel's windows, its canaries' deadlines and the kubelet's liveness settings, in seconds.

    The defaults are the settings' declared defaults and the shipped catalog's
    canaries; :meth:`of` takes them from a configuration and its catalog. The
    kubelet's numbers are the vLLM container's liveness probe in the shipped manifests.
    """

    scrape_interval_s: float = _default("scrape_interval")
    idle_window_s: float = _default("idle_window")
    text_interval_s: float = _shipped_longest("interval", text=True)
    text_deadline_s: float = _shipped_longest("deadline", text=True)
    path_deadline_s: float = _shipped_longest("deadline", text=False)
    hang_window_s: float = _default("hang_window")
    diagnostics_budget_s: float = DEFAULT_BUDGET_S
    liveness_period_s: float = 5.0
    liveness_timeout_s: float = 3.0
    liveness_failure_threshold: int = 4
    liveness_grace_s: float = 10.0
    sentinel_restart_s: float = 15.0  # how long a sentinel restart may take unnoticed

    @classmethod
    def of(cls, settings: Settings, specs: Sequence[CanarySpec]) -> ProbeTimings:
        """The windows ``settings`` configure and the deadlines of the canaries they run."""
        specs = [s for s in specs if s.enabled]
        return cls(
            scrape_interval_s=settings.scrape_interval,
            idle_window_s=settings.idle_window,
            text_interval_s=_longest(specs, "interval", text=True),
            text_deadline_s=_longest(specs, "deadline", text=True),
            path_deadline_s=_longest(specs, "deadline", text=False),
            hang_window_s=settings.hang_window,
        )


# The design's budget from hang to restart is under 60 s; past this it is a problem.
MAX_HANG_TO_RESTART_S = 120.0


def check_probe_timings(t: ProbeTimings) -> list[DoctorCheck]:
    """Pure: do the numbers fit together? One check per rule, named after it."""
    out: list[DoctorCheck] = []

    def rule(ok: bool, summary: str, detail: str, bad: Severity = Severity.PROBLEM) -> None:
        out.append(DoctorCheck("timing", Severity.OK if ok else bad, summary, detail))

    rule(
        t.scrape_interval_s * 3 <= t.hang_window_s,
        f"scrape interval {t.scrape_interval_s:g} s gives >= 3 scrapes per "
        f"{t.hang_window_s:g} s hang window",
        "progress can only be called flat after several scrapes",
    )
    rule(
        t.idle_window_s >= t.scrape_interval_s,
        f"idle window {t.idle_window_s:g} s >= scrape interval {t.scrape_interval_s:g} s",
        "otherwise idle gating cannot see recent completions",
        Severity.WARN,
    )
    rule(
        max(t.text_deadline_s, t.path_deadline_s) < t.hang_window_s,
        f"canary deadlines ({t.text_deadline_s:g} s, {t.path_deadline_s:g} s) "
        f"< hang window {t.hang_window_s:g} s",
        "a canary must be able to miss its deadline inside the confirmation window",
    )
    rule(
        t.diagnostics_budget_s < t.hang_window_s,
        f"diagnostics budget {t.diagnostics_budget_s:g} s < hang window {t.hang_window_s:g} s",
        "the bundle, started at the first missed deadline, lands before liveness turns red",
    )
    rule(
        t.liveness_timeout_s < t.liveness_period_s,
        f"liveness timeout {t.liveness_timeout_s:g} s < period {t.liveness_period_s:g} s",
        "overlapping probes make the kubelet's count meaningless",
        Severity.WARN,
    )
    tolerated = t.liveness_period_s * (t.liveness_failure_threshold - 1)
    rule(
        tolerated >= t.sentinel_restart_s,
        f"liveness tolerates {tolerated:g} s of sentinel outage "
        f"(>= {t.sentinel_restart_s:g} s for a sentinel restart)",
        "a sentinel restart must never restart vLLM",
    )
    kubelet = t.liveness_period_s * t.liveness_failure_threshold + t.liveness_grace_s
    to_restart = t.hang_window_s + t.text_interval_s + kubelet
    rule(
        to_restart <= MAX_HANG_TO_RESTART_S,
        f"worst case from hang to restart about {to_restart:g} s",
        f"hang window + canary interval + kubelet failures + grace; over "
        f"{MAX_HANG_TO_RESTART_S:g} s a hung server holds requests too long",
        Severity.WARN,
    )
    return out


def check_cpu(section: cgroup.CgroupSection) -> list[DoctorCheck]:
    """Pure: the quota and each process's OpenMP and thread counts against it."""
    root = section.root
    if root.error and not section.per_process:
        quota = DoctorCheck("cpu", Severity.SKIPPED, f"CPU quota unknown: {root.error}", root.path)
    elif root.cpus is None and not section.per_process:
        quota = DoctorCheck("cpu", Severity.OK, "no CPU quota (unlimited)", root.path)
    else:
        throttled = root.throttling.get("nr_throttled", 0)
        periods = root.throttling.get("nr_periods", 0)
        share = f"{throttled}/{periods} periods throttled" if periods else "no throttling data"
        quota = DoctorCheck(
            "cpu",
            Severity.WARN if periods and throttled / periods > 0.2 else Severity.OK,
            f"CPU quota {root.cpus if root.cpus is not None else 'unlimited'} CPUs; {share}",
            root.path,
        )
    out = [quota]
    if not section.checks:
        out.append(DoctorCheck("cpu", Severity.SKIPPED, "no vLLM process visible for OMP checks"))
    for check in section.checks:
        if check.omp_oversubscribed:
            severity = Severity.PROBLEM
            found = (
                f"OpenMP oversubscribed ({check.omp_effective} threads "
                f"on {check.quota_cpus:g} CPUs); set OMP_NUM_THREADS to the quota"
            )
        elif check.threads_exceed_quota:
            severity = Severity.WARN
            found = f"{check.num_threads} threads on {check.quota_cpus:g} CPUs"
        else:
            severity = Severity.OK
            found = (
                f"OMP_NUM_THREADS={check.omp_num_threads or 'unset'}, {check.num_threads} threads"
            )
        out.append(
            DoctorCheck("cpu", severity, f"pid {check.pid}: {found}", "; ".join(check.notes))
        )
    return out


def is_vllm(argv: Sequence[str]) -> bool:
    """Whether a command line is vLLM's API server's (``vllm serve``, its module)."""
    joined = " ".join(argv)
    return any(pattern in joined for pattern in ProcessPatterns().api)


def check_scheduling_policy(api_cmdlines: Sequence[Sequence[str]]) -> DoctorCheck:
    """Pure: is canary priority honoured by every visible API server?

    Only a vLLM command line says: another server's flags (llama.cpp, a
    gateway) mean something else or nothing, so its policy is "unknown".
    """
    if not api_cmdlines:
        why = "no vLLM API server visible (shareProcessNamespace?); cannot tell the policy"
        return DoctorCheck("priority", Severity.SKIPPED, why)
    foreign = [" ".join(argv)[:80] for argv in api_cmdlines if not is_vllm(argv)]
    if foreign:
        why = (
            f"the server's command line is not vLLM's ({foreign[0]}); canary priority may not apply"
        )
        return DoctorCheck("priority", Severity.SKIPPED, "scheduling policy unknown", why)
    # The run's own reading: a title set with setproctitle is one argument
    # holding the whole command line, split on whitespace there.
    policies = [(scheduling_policy(argv) or SchedulingPolicy.FCFS).value for argv in api_cmdlines]
    if all(p == "priority" for p in policies):
        return DoctorCheck("priority", Severity.OK, "--scheduling-policy priority: effective")
    return DoctorCheck(
        "priority",
        Severity.WARN,
        f"scheduling policy {', '.join(sorted(set(policies)))}: canary priority is ignored",
        "start vLLM with --scheduling-policy priority so canaries jump the queue under load "
        "(a policy set in a --config file is not seen here)",
    )


def check_processes(snapshot: ProcessSnapshot) -> list[DoctorCheck]:
    """Pure: the attribution and each piece of process evidence (off: what grants it)."""
    return [DoctorCheck("processes", Severity(s), *f) for s, *f in access.findings(snapshot)]


def check_metrics(text: str | None, error: str | None = None) -> DoctorCheck:
    """Pure: does vLLM's ``/metrics`` carry the progress counters sentinel relies on?"""
    if text is None:
        return DoctorCheck(
            "metrics",
            Severity.NOTE,
            f"no /metrics: {error or 'no answer'}",
            "progress evidence off; sentinel run still works, confirming hangs on canaries alone",
        )
    try:
        families = text_string_to_metric_families(text)
        names = {sample.name for family in families for sample in family.samples}
    except ValueError as exc:
        return DoctorCheck("metrics", Severity.PROBLEM, f"vLLM /metrics unparsable: {exc}")
    missing = [c for c in PROGRESS_COUNTERS if c not in names and f"{c}_count" not in names]
    if missing and not any(name.startswith("vllm:") for name in names):
        return DoctorCheck(
            "metrics",
            Severity.NOTE,
            "/metrics carries no vLLM series (a server that is not vLLM)",
            "progress evidence off; sentinel run still works, confirming hangs on canaries alone",
        )
    if missing:
        return DoctorCheck(
            "metrics",
            Severity.PROBLEM,
            f"progress counters missing: {', '.join(missing)}",
            "metrics disabled or renamed: hangs are confirmed on canaries alone, more slowly",
        )
    return DoctorCheck("metrics", Severity.OK, "vLLM metrics enabled with progress counters")


async def fetch_metrics(
    target_url: str, *, timeout_s: float = 3.0, transport: httpx.AsyncBaseTransport | None = None
) -> tuple[str | None, str | None]:
    """One ``/metrics`` scrape: (text, None) or (None, why not)."""
    url = target_url.rstrip("/") + "/metrics"
    try:
        async with httpx.AsyncClient(timeout=timeout_s, transport=transport) as http:
            response = await http.get(url)
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"
    if response.status_code != 200:
        return None, f"HTTP {response.status_code} from {url}"
    return response.text, None


_STYLE = {
    Severity.OK: "green",
    Severity.NOTE: "cyan",
    Severity.WARN: "yellow",
    Severity.PROBLEM: "bold red",
}


def render_report(report: DoctorReport, console: Console | None = None) -> None:
    """A readable table, worst first within each area, and a one-line verdict."""
    out = console or Console()
    table = Table(title="sentinel doctor", show_lines=False)
    table.add_column("area")
    table.add_column("result")
    table.add_column("finding", overflow="fold")
    table.add_column("why", overflow="fold", style="dim")
    for check in report.checks:
        result = f"[{_STYLE.get(check.severity, 'dim')}]{check.severity.value}[/]"
        table.add_row(check.area, result, check.summary, check.detail)
    out.print(table)
    problems = len(report.problems)
    warnings = sum(1 for c in report.checks if c.severity is Severity.WARN)
    verdict = "no problems found" if not problems else f"{problems} problem(s) found"
    out.print(f"{verdict}, {warnings} warning(s)")
