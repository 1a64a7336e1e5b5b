"""Container CPU: the cgroup v2 quota and throttling, and OpenMP oversubscription.

Owns reading ``cpu.max`` and ``cpu.stat`` from a cgroup v2 directory (the root
is configurable, ``/sys/fs/cgroup`` by default, so tests use a fake tree) and
checking each vLLM process's ``OMP_NUM_THREADS`` and thread count against the
quota.

Why: a known production cause of slow or stuck CPU inference is
``OMP_NUM_THREADS`` left unset, so OpenMP starts one thread per CPU it can see
(the host's, e.g. 192) while the container may only use 12. The threads then
fight over the quota and the whole container is throttled. OpenMP's default is
the size of the process's CPU affinity mask, which is what we compare.

Which cgroup: in a pod the sidecar sees its *own* cgroup at the root, not the
vLLM container's. When a process's ``/proc/PID/cgroup`` path resolves under the
root (a shared cgroup namespace, or the host's cgroupfs mounted), that
directory is used; otherwise the root's quota is reported and marked as such.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True, slots=True)
class CpuQuota:
    """``cpu.max``: ``quota_us`` None means unlimited (``max``)."""

    path: str
    quota_us: int | None
    period_us: int
    cpus: float | None  # quota / period; None when unlimited
    throttling: dict[str, int] = field(default_factory=dict)  # from cpu.stat
    error: str | None = None


@dataclass(frozen=True, slots=True)
class OmpCheck:
    """One process's threads against the CPU it may use."""

    pid: int
    title: str
    omp_num_threads: str | None  # as set in the environment; None when unset
    omp_effective: int | None  # what OpenMP will start: the variable, else the affinity size
    affinity_cpus: int | None
    num_threads: int | None
    quota_cpus: float | None
    omp_oversubscribed: bool
    threads_exceed_quota: bool
    notes: list[str]

    @property
    def oversubscribed(self) -> bool:
        return self.omp_oversubscribed or self.threads_exceed_quota


@dataclass(frozen=True, slots=True)
class ProcessThreads:
    """What the check needs to know about a process (from the process snapshot)."""

    pid: int
    title: str
    omp_num_threads: str | None
    environ_readable: bool
    affinity_cpus: int | None
    num_threads: int | None


def read_cpu_quota(directory: Path) -> CpuQuota:
    """Read ``cpu.max`` and the throttling counters of ``cpu.stat``; errors are recorded.

    A cgroup v1 hierarchy (``cpu/cpu.cfs_quota_us``) is read as a fallback, since
    older nodes still run it; the numbers mean the same.
    """
    try:
        raw = (directory / "cpu.max").read_text().split()
    except FileNotFoundError:
        return _read_v1_quota(directory)
    except OSError as exc:
        return CpuQuota(str(directory), None, 100_000, None, error=f"cpu.max: {exc}")
    try:
        quota = None if raw[0] == "max" else int(raw[0])
        period = int(raw[1]) if len(raw) > 1 else 100_000
    except (IndexError, ValueError):
        return CpuQuota(str(directory), None, 100_000, None, error=f"cpu.max unreadable: {raw!r}")
    cpus = None if quota is None or period <= 0 else round(quota / period, 3)
    return CpuQuota(str(directory), quota, period, cpus, throttling=read_cpu_stat(directory))


def _read_v1_quota(directory: Path) -> CpuQuota:
    for base in (directory / "cpu", directory / "cpu,cpuacct", directory):
        try:
            quota = int((base / "cpu.cfs_quota_us").read_text().strip())
            period = int((base / "cpu.cfs_period_us").read_text().strip())
        except (OSError, ValueError):
            continue
        limited = quota > 0 and period > 0
        return CpuQuota(
            f"{base} (cgroup v1)",
            quota if limited else None,
            period,
            round(quota / period, 3) if limited else None,
            throttling=read_cpu_stat(base),
        )
    return CpuQuota(str(directory), None, 100_000, None, error="no cgroup cpu controller here")


def read_cpu_stat(directory: Path) -> dict[str, int]:
    """``cpu.stat`` as a mapping (usage_usec, nr_periods, nr_throttled, throttled_usec, ...)."""
    try:
        text = (directory / "cpu.stat").read_text()
    except OSError:
        return {}
    stat: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            stat[parts[0]] = int(parts[1])
    return stat


def cgroup_dir_of(pid: int, root: Path, proc_root: Path = Path("/proc")) -> Path | None:
    """The cgroup v2 directory of ``pid`` under ``root``, when it is visible from here."""
    try:
        lines = (proc_root / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "" and path:
            relative = path.lstrip("/")
            if ".." in Path(relative).parts:
                return None  # outside our cgroup namespace: not reachable from here
            candidate = root / relative
            return candidate if (candidate / "cpu.max").exists() else None
    return None


def check_threads(proc: ProcessThreads, quota_cpus: float | None) -> OmpCheck:
    """Flag OpenMP and thread oversubscription of one process against the quota."""
    notes: list[str] = []
    omp_effective: int | None = None
    if proc.omp_num_threads is not None:
        first = proc.omp_num_threads.split(",")[0].strip()
        if first.isdigit():
            omp_effective = int(first)
        else:
            notes.append(f"OMP_NUM_THREADS={proc.omp_num_threads!r} is not a number")
    elif proc.environ_readable:
        omp_effective = proc.affinity_cpus
        if proc.affinity_cpus is not None:
            notes.append(
                f"OMP_NUM_THREADS unset: OpenMP defaults to the {proc.affinity_cpus} CPUs "
                "in the affinity mask"
            )
    else:
        notes.append("environment unreadable: OMP_NUM_THREADS unknown")

    limit = None if quota_cpus is None else max(math.ceil(quota_cpus), 1)
    omp_over = limit is not None and omp_effective is not None and omp_effective > limit
    threads_over = limit is not None and proc.num_threads is not None and proc.num_threads > limit
    if omp_over:
        notes.append(f"OpenMP would start {omp_effective} threads on a {quota_cpus:g}-CPU quota")
    if threads_over:
        notes.append(f"{proc.num_threads} threads on a {quota_cpus:g}-CPU quota")
    return OmpCheck(
        pid=proc.pid,
        title=proc.title,
        omp_num_threads=proc.omp_num_threads,
        omp_effective=omp_effective,
        affinity_cpus=proc.affinity_cpus,
        num_threads=proc.num_threads,
        quota_cpus=quota_cpus,
        omp_oversubscribed=omp_over,
        threads_exceed_quota=threads_over,
        notes=notes,
    )


@dataclass(frozen=True, slots=True)
class CgroupSection:
    """The bundle's container-CPU section."""

    root: CpuQuota
    per_process: dict[int, CpuQuota]  # pid -> its own cgroup, where visible
    checks: list[OmpCheck]

    @property
    def omp_oversubscribed(self) -> list[OmpCheck]:
        return [c for c in self.checks if c.omp_oversubscribed]


def snapshot(
    processes: Sequence[ProcessThreads],
    *,
    root: Path = DEFAULT_CGROUP_ROOT,
    proc_root: Path = Path("/proc"),
) -> CgroupSection:
    """The quota that governs each process and the oversubscription checks against it."""
    root_quota = read_cpu_quota(root)
    per_process: dict[int, CpuQuota] = {}
    checks: list[OmpCheck] = []
    seen: dict[Path, CpuQuota] = {}
    for proc in processes:
        directory = cgroup_dir_of(proc.pid, root, proc_root)
        quota = root_quota
        if directory is not None:
            quota = seen.get(directory) or read_cpu_quota(directory)
            seen[directory] = quota
            per_process[proc.pid] = quota
        checks.append(check_threads(proc, quota.cpus))
    return CgroupSection(root=root_quota, per_process=per_process, checks=checks)


def threads_from_snapshot(
    pid: int,
    title: str,
    environ: Mapping[str, str] | None,
    affinity: Sequence[int] | None,
    num_threads: int | None,
) -> ProcessThreads:
    return ProcessThreads(
        pid=pid,
        title=title,
        omp_num_threads=None if environ is None else environ.get("OMP_NUM_THREADS"),
        environ_readable=environ is not None,
        affinity_cpus=None if affinity is None else len(affinity),
        num_threads=num_threads,
    )
