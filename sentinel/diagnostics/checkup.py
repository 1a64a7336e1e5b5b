"""``sentinel doctor``'s inputs, gathered for the one target it was given.

The checks (:mod:`sentinel.diagnostics.doctor`) judge numbers and text; this
module decides what they are shown. A host can run several vLLM servers (or
none on the target's port): only the processes attributed to the target, the
way ``sentinel run`` attributes them (the owner of its listening socket), are
judged, so no other server's policy or process ids are reported as the
target's. A target nothing answers on is one problem, named with its cause
("target unreachable: connection refused"); what can only be known of a
running server is then not judged at all. A target that answers is sent one
canary of each kind (the daemon's runner, a short deadline), so what it can
do is what it answered, whatever server it is.
"""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Sequence
from pathlib import Path

import httpx

from sentinel.canary.result import CanaryResult
from sentinel.canary.runner import CanaryRunner, ModelResolutionError
from sentinel.canary.spec import CanaryKind, CanarySpec
from sentinel.config.settings import Settings
from sentinel.diagnostics import access, cgroup, procs
from sentinel.diagnostics.doctor import (
    DoctorCheck,
    DoctorReport,
    ProbeTimings,
    Severity,
    check_cpu,
    check_metrics,
    check_probe_timings,
    check_processes,
    check_scheduling_policy,
    shipped_canaries,
)
from sentinel.diagnostics.doctor_kinds import check_canary_kinds
from sentinel.evidence.process_model import ProcessRole, ProcessSnapshot

SCRAPE_TIMEOUT_S = 3.0
CANARY_DEADLINE_S = 5.0  # at most, per canary the doctor sends (each kind's own if shorter)
_ERRNO_WORDS = {
    errno.ECONNREFUSED: "connection refused",
    errno.EHOSTUNREACH: "host unreachable",
    errno.ENETUNREACH: "network unreachable",
    errno.ECONNRESET: "connection reset",
}


def unreachable_reason(exc: httpx.HTTPError) -> str | None:
    """Why nothing answered (``connection refused``), or None: the target took the request.

    httpx wraps the socket's error twice (httpcore, anyio's "All connection
    attempts failed"); the cause chain holds the one a person recognises.
    """
    if isinstance(exc, httpx.ConnectTimeout):
        return "connect timed out"
    if not isinstance(exc, httpx.ConnectError):
        return None
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, socket.gaierror):
            return f"name not resolved ({seen.strerror or seen})"
        if isinstance(seen, OSError) and seen.errno in _ERRNO_WORDS:
            return _ERRNO_WORDS[seen.errno]
        seen = seen.__cause__ or seen.__context__
    return f"cannot connect ({exc})"


async def scrape(
    target_url: str, *, transport: httpx.AsyncBaseTransport | None = None
) -> tuple[str | None, str | None, str | None]:
    """One ``/metrics`` read: (text, why not, why the target is unreachable)."""
    url = target_url.rstrip("/") + "/metrics"
    try:
        async with httpx.AsyncClient(timeout=SCRAPE_TIMEOUT_S, transport=transport) as http:
            response = await http.get(url)
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}", unreachable_reason(exc)
    if response.status_code != 200:
        return None, f"HTTP {response.status_code} from {url}", None
    return response.text, None, None


async def probe_kinds(
    target_url: str,
    specs: Sequence[CanarySpec],
    *,
    api_key: str | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> tuple[tuple[CanaryResult, ...] | None, DoctorCheck | None]:
    """One canary of each kind, at once: (results, None), or (None, why none was sent)."""
    one_each: dict[CanaryKind, CanarySpec] = {}
    for spec in specs:
        if spec.enabled:
            one_each.setdefault(spec.kind, spec)
    async with httpx.AsyncClient(transport=transport) as http:
        runner = CanaryRunner(http, target_url.rstrip("/"), api_key=api_key)
        try:
            model = await runner.resolve_model(deadline=SCRAPE_TIMEOUT_S)
        except ModelResolutionError as exc:
            why = f"no canary sent: /v1/models: {exc.reason}: {exc.detail}"
            return None, DoctorCheck("canaries", Severity.WARN, why, "sentinel run needs it too")
        results = await asyncio.gather(
            *(
                runner.run(s, model=model, deadline=min(s.deadline, CANARY_DEADLINE_S))
                for s in one_each.values()
            )
        )
    return tuple(results), None


def target_pids(snapshot: ProcessSnapshot) -> frozenset[int]:
    """The processes attributed to the target: its API server(s), engines, workers."""
    found = (
        *((snapshot.api,) if snapshot.api is not None else ()),
        *snapshot.api_processes,
        *snapshot.engines,
        *snapshot.workers,
        *snapshot.coordinators,
    )
    return frozenset(p.pid for p in found)


def api_cmdlines(snapshot: ProcessSnapshot) -> list[tuple[str, ...]]:
    """The target's API server command lines (none when it was not attributed or unreadable)."""
    apis = (*((snapshot.api,) if snapshot.api is not None else ()), *snapshot.api_processes)
    return list(dict.fromkeys(p.cmdline for p in apis if p.cmdline))


def unreachable_checks(target_url: str, why: str) -> list[DoctorCheck]:
    return [
        DoctorCheck(
            "target",
            Severity.PROBLEM,
            f"target unreachable: {why}",
            f"nothing answers at {target_url}; start the server, or give its URL with --target",
        ),
        DoctorCheck(
            "target",
            Severity.SKIPPED,
            "the target's processes, scheduling policy, canary kinds and metrics not checked",
            "they can only be judged on a server that answers",
        ),
    ]


async def run_doctor(
    target_url: str,
    *,
    process_match: procs.ProcessMatch | None = None,
    cgroup_root: Path = cgroup.DEFAULT_CGROUP_ROOT,
    timings: ProbeTimings | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    specs: Sequence[CanarySpec] | None = None,
    api_key: str | None = None,
) -> DoctorReport:
    """Gather the inputs (processes, cgroup, one /metrics scrape, one canary of each
    kind) and run every check.

    ``specs``: the canaries sentinel would run (None: the shipped catalog's);
    without ``timings``, their deadlines are judged against the default windows.
    """
    match = process_match or procs.ProcessMatch()
    canaries = shipped_canaries() if specs is None else tuple(specs)
    (text, error, unreachable), attributed = await asyncio.gather(
        scrape(target_url, transport=transport),
        asyncio.to_thread(access.sample_target, target_url),
    )
    ours = target_pids(attributed) if unreachable is None else frozenset()

    def local() -> cgroup.CgroupSection:
        snaps = [s for s in procs.describe(procs.discover(match)) if s.pid in ours]
        threads = [
            cgroup.threads_from_snapshot(s.pid, s.title, s.environ, s.cpu_affinity, s.num_threads)
            for s in snaps
            if s.role is not ProcessRole.OTHER
        ]
        return cgroup.snapshot(threads, root=cgroup_root)

    section = await asyncio.to_thread(local)
    timing = check_probe_timings(timings or ProbeTimings.of(Settings(), canaries))
    if unreachable is not None:
        quota = check_cpu(section)[:1]  # the pod's quota; no process of the target to judge
        return DoctorReport((*unreachable_checks(target_url, unreachable), *quota, *timing))
    cmdlines = api_cmdlines(attributed)
    probed, not_probed = await probe_kinds(
        target_url, canaries, api_key=api_key, transport=transport
    )
    checks = [
        DoctorCheck("target", Severity.OK, f"target {target_url} answers"),
        *check_cpu(section),
        *check_processes(attributed),
        check_scheduling_policy(cmdlines),
        *((not_probed,) if not_probed is not None else ()),
        *check_canary_kinds(cmdlines, canaries, probed),
        check_metrics(text, error),
        *timing,
    ]
    return DoctorReport(tuple(checks))
