"""The process-tree section of a bundle: every vLLM process, as psutil sees it.

Owns discovery of vLLM processes for diagnostics (by process title or command
line, plus their descendants) and the per-process :class:`ProcessRecord`
(roles, states and patterns are :mod:`sentinel.evidence.processes`'s): pid,
parent, title, status, CPU use over a short window, kernel wait channel,
threads, RSS, open files, connections, start time and the (redacted) environment.

Capture happens in two steps so that nothing else in the bundle can distort
what is recorded here: :func:`discover` reads every status first and starts
the CPU window, before any stack dump runs; :func:`describe` closes the window
and reads the rest. Both block on ``/proc`` reads, so the collector runs them
in a worker thread. An unreadable field is recorded with the reason (``gone``,
or ``access denied`` with the permission it needs) and never raises.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import psutil

from sentinel.diagnostics.access import ACCESS_DENIED, denied, wchan_hidden
from sentinel.diagnostics.cause import ProcessObservation
from sentinel.diagnostics.sockets import connection_json, sockets_by_pid
from sentinel.evidence.process_model import (
    GONE_STATES,
    VLLM_PATTERNS,
    ProcessRole,
    ProcessState,
    process_state,
)
from sentinel.telemetry.redact import (
    SecretScrubber,
    redact_argv,
    redact_env,
    secret_values_in_argv,
    secret_values_in_env,
)

_T = TypeVar("_T")

# vLLM's own patterns, from the evidence layer's one vocabulary; the
# ``--process-title`` and ``--process-cmdline`` flags replace them.
DEFAULT_TITLES = VLLM_PATTERNS.titles
DEFAULT_CMDLINES = VLLM_PATTERNS.api
MAX_PROCESSES = 64  # a runaway fork tree must not turn one bundle into thousands of dumps
MAX_OPEN_FILES = 200
MAX_TITLE = 240
MAX_ENV_ANCESTORS = 3


@dataclass(frozen=True, slots=True)
class ProcessMatch:
    """How vLLM processes are recognised in the shared PID namespace.

    ``titles`` match the process title (vLLM sets ``VLLM::EngineCore``,
    ``VLLM::Worker`` and suffixed variants) as a prefix of the command line or
    of the kernel's 15-character ``comm``; ``cmdlines`` are substrings of the
    space-joined command line (the API server keeps its ordinary argv).
    """

    titles: tuple[str, ...] = DEFAULT_TITLES
    cmdlines: tuple[str, ...] = DEFAULT_CMDLINES
    include_descendants: bool = True
    # The attributed server's PID: it (and its descendants) alone is the
    # target's, whatever the patterns say. Empty: whatever the patterns match.
    roots: tuple[int, ...] = ()

    def matches(self, name: str, cmdline: Sequence[str]) -> bool:
        joined = " ".join(cmdline)
        if not joined:
            # Command line unreadable (or a kernel thread): only the 15-character
            # comm is left, so a title matches on its truncated prefix.
            return bool(name) and any(title[:15] == name[:15] for title in self.titles)
        if any(joined.startswith(title) for title in self.titles):
            return True
        return any(pattern in joined for pattern in self.cmdlines)


def role_of(name: str, cmdline: Sequence[str]) -> ProcessRole:
    """The role by vLLM's own patterns; a matched descendant without one is ``other``."""
    return VLLM_PATTERNS.classify(name, cmdline) or ProcessRole.OTHER


@dataclass(slots=True)
class Discovered:
    """A process found by :func:`discover`, with the status read before any dump."""

    process: psutil.Process
    pid: int
    ppid: int | None
    name: str
    cmdline: list[str]
    status: ProcessState
    raw_status: str | None
    role: ProcessRole
    discovered_at: float
    errors: dict[str, str] = field(default_factory=dict)


def discover(match: ProcessMatch, *, exclude: Iterable[int] = ()) -> list[Discovered]:
    """Find vLLM processes, read each one's status first and start its CPU window."""
    excluded = {os.getpid(), *exclude}
    found = _roots(match.roots, excluded) if match.roots else _matching(match, excluded)
    if match.include_descendants or match.roots:  # a root's descendants are the target's
        for proc in list(found.values()):
            try:
                children = proc.children(recursive=True)
            except (psutil.Error, OSError):
                continue
            for child in children:
                if child.pid not in excluded:
                    found.setdefault(child.pid, child)

    result: list[Discovered] = []
    for pid in sorted(found)[:MAX_PROCESSES]:
        result.append(_discover_one(found[pid]))
    return result


def _roots(pids: Iterable[int], excluded: set[int]) -> dict[int, psutil.Process]:
    """The attributed server's processes, read directly: no scan of every process."""
    found: dict[int, psutil.Process] = {}
    for pid in pids:
        if pid not in excluded:
            with contextlib.suppress(psutil.Error, OSError):  # gone: nothing to capture
                found[pid] = psutil.Process(pid)
    return found


def _matching(match: ProcessMatch, excluded: set[int]) -> dict[int, psutil.Process]:
    """Every process whose title or command line ``match`` recognises.

    A process seen only by its 15-character comm (a zombie, an unreadable
    command line) is ambiguous: every vLLM on the machine shares it. It is
    the target's only when its parent is (an engine's zombie under a server
    these patterns do not match, ``python serve.py``, is left out: a
    ``--process-cmdline`` naming that server, or the attributed roots, take it).
    """
    found: dict[int, psutil.Process] = {}
    by_comm: dict[int, tuple[psutil.Process, int | None]] = {}
    for proc in psutil.process_iter(["pid", "ppid", "name", "cmdline"]):
        name, cmdline = proc.info.get("name") or "", proc.info.get("cmdline") or []
        if proc.pid in excluded or not match.matches(name, cmdline):
            continue
        if cmdline:
            found[proc.pid] = proc
        else:
            by_comm[proc.pid] = (proc, proc.info.get("ppid"))
    added = True
    while added:  # a zombie worker under a zombie engine under the server
        kin = [pid for pid, (_, ppid) in by_comm.items() if ppid in found]
        for pid in kin:
            found[pid] = by_comm.pop(pid)[0]
        added = bool(kin)
    return found


def _discover_one(proc: psutil.Process) -> Discovered:
    errors: dict[str, str] = {}
    raw_status: str | None = None
    try:
        raw_status = proc.status()
    except psutil.NoSuchProcess:
        errors["status"] = "gone"
    except (psutil.Error, OSError) as exc:
        errors["status"] = _reason(exc)
    status = ProcessState.GONE if errors.get("status") == "gone" else process_state(raw_status)
    name = _try(errors, "name", proc.name) or ""
    cmdline = _try(errors, "cmdline", proc.cmdline) or []
    ppid = _try(errors, "ppid", proc.ppid)
    # The first call only records the baseline; describe() reads the percentage.
    _try(errors, "cpu_percent", lambda: proc.cpu_percent(None))
    return Discovered(
        process=proc,
        pid=proc.pid,
        ppid=ppid,
        name=name,
        cmdline=list(cmdline),
        status=status,
        raw_status=raw_status,
        role=role_of(name, cmdline),
        discovered_at=time.monotonic(),
        errors=errors,
    )


@dataclass(frozen=True, slots=True)
class ProcessRecord:
    """One process in the bundle. Secrets in argv and environment are already redacted."""

    pid: int
    ppid: int | None
    title: str
    role: ProcessRole
    status: ProcessState  # read before any stack dump ran
    status_after: ProcessState | None  # read again at the end of the CPU window
    cpu_percent: float | None
    cpu_window_s: float
    wchan: str | None
    num_threads: int | None
    rss_bytes: int | None
    create_time: str | None
    username: str | None
    cmdline: list[str]
    environ: dict[str, str] | None
    environ_source: str  # "own", "inherited from pid N (...)", or why it is unknown
    omp_num_threads: str | None
    cpu_affinity: list[int] | None
    open_files: list[dict[str, Any]]
    connections: list[dict[str, Any]]
    errors: dict[str, str]

    def observation(self) -> ProcessObservation:
        # The status read before the dumps is authoritative, except that a
        # process that died during the window is gone, whatever it was before.
        status = self.status
        if self.status_after in GONE_STATES:
            status = self.status_after
        return ProcessObservation(
            pid=self.pid,
            title=self.title,
            role=self.role,
            status=status,
            cpu_percent=self.cpu_percent,
            wchan=self.wchan,
        )


def describe(
    discovered: Sequence[Discovered],
    *,
    proc_root: Path = Path("/proc"),
    scrubber: SecretScrubber | None = None,
) -> list[ProcessRecord]:
    """Close the CPU window and read everything else about each discovered process."""
    sockets = sockets_by_pid()
    return [_describe_one(item, proc_root, scrubber, sockets) for item in discovered]


def _describe_one(
    item: Discovered,
    proc_root: Path,
    scrubber: SecretScrubber | None,
    sockets: dict[int, list[Any]] | None = None,
) -> ProcessRecord:
    proc = item.process
    errors = dict(item.errors)
    window = max(time.monotonic() - item.discovered_at, 0.0)
    cpu = _try(errors, "cpu_percent", lambda: proc.cpu_percent(None))
    after_raw: str | None = None
    try:
        after_raw = proc.status()
        status_after: ProcessState | None = process_state(after_raw)
    except psutil.NoSuchProcess:
        status_after = ProcessState.GONE
    except (psutil.Error, OSError):
        status_after = None

    env = _try(errors, "environ", proc.environ)
    environ_source = "own" if env else "unreadable"
    if env == {}:
        env, environ_source = _inherited_environ(proc)
    if scrubber is not None:
        scrubber.add_all(secret_values_in_argv(item.cmdline))
        if env:
            scrubber.add_all(secret_values_in_env(env))
    open_files = _try(errors, "open_files", proc.open_files) or []
    if sockets is not None:
        conns: list[Any] = sockets.get(item.pid, [])
        if errors.get("open_files", "").startswith(ACCESS_DENIED):  # its sockets unseen too
            errors["connections"] = denied("connections")
    else:
        conns = _try(errors, "connections", lambda: proc.net_connections(kind="inet")) or []
    memory = _try(errors, "memory_info", proc.memory_info)
    created = _try(errors, "create_time", proc.create_time)
    title = title_of(item.name, item.cmdline)
    return ProcessRecord(
        pid=item.pid,
        ppid=item.ppid,
        title=title,
        role=item.role,
        status=item.status,
        status_after=status_after,
        cpu_percent=None if cpu is None else round(float(cpu), 1),
        cpu_window_s=round(window, 3),
        wchan=_wchan(proc_root, item.pid, errors),
        num_threads=_try(errors, "num_threads", proc.num_threads),
        rss_bytes=None if memory is None else int(memory.rss),
        create_time=None if created is None else _iso(created),
        username=_try(errors, "username", proc.username),
        cmdline=redact_argv(item.cmdline),
        environ=None if env is None else redact_env(env),
        environ_source=environ_source,
        omp_num_threads=None if env is None else env.get("OMP_NUM_THREADS"),
        cpu_affinity=_try(errors, "cpu_affinity", proc.cpu_affinity),
        open_files=[{"path": f.path, "fd": f.fd} for f in list(open_files)[:MAX_OPEN_FILES]],
        connections=[connection_json(c) for c in conns],
        errors=errors,
    )


def title_of(name: str, cmdline: Sequence[str]) -> str:
    """The process title: its (redacted) command line, as ``ps`` shows it.

    setproctitle pads the argv area with spaces, so whitespace is collapsed.
    """
    joined = " ".join(" ".join(redact_argv(cmdline)).split())
    return joined[:MAX_TITLE] or name


def _inherited_environ(proc: psutil.Process) -> tuple[dict[str, str] | None, str]:
    """The environment of the nearest ancestor that still shows one.

    setproctitle (which vLLM uses for ``VLLM::EngineCore`` and ``VLLM::Worker``)
    reuses the memory behind ``/proc/PID/environ`` for the longer title, so a
    titled process shows an empty environment. Its variables were inherited
    from the API server that spawned it (unless the process changed them), so
    the nearest readable ancestor is the best evidence left.
    """
    try:
        ancestors = proc.parents()[:MAX_ENV_ANCESTORS]
    except (psutil.Error, OSError):
        ancestors = []
    for ancestor in ancestors:
        try:
            env = ancestor.environ()
        except (psutil.Error, OSError):
            continue
        if env:
            return env, (
                f"inherited from pid {ancestor.pid} "
                "(the process title overwrote this process's own environment)"
            )
    return None, "unknown (the process title overwrote it and no ancestor shows one)"


def _wchan(proc_root: Path, pid: int, errors: dict[str, str]) -> str | None:
    """The kernel function the process sleeps in (``0`` while it runs, or hidden)."""
    try:
        text = (proc_root / str(pid) / "wchan").read_text().strip() or None
        if text == "0" and wchan_hidden(pid, proc_root):
            errors["wchan"] = f"hidden (the kernel shows 0), {denied('wchan')}"
            return None
        return text
    except FileNotFoundError:
        errors["wchan"] = "gone"
    except PermissionError:
        errors["wchan"] = denied("wchan")
    except OSError as exc:
        errors["wchan"] = _reason(exc)
    return None


def observations_from_discovery(discovered: Sequence[Discovered]) -> list[ProcessObservation]:
    """Observations without CPU or wait channel, for when :func:`describe` did not finish."""
    return [
        ProcessObservation(
            pid=d.pid, title=title_of(d.name, d.cmdline), role=d.role, status=d.status
        )
        for d in discovered
    ]


def _try(errors: dict[str, str], name: str, read: Callable[[], _T]) -> _T | None:
    try:
        return read()
    except psutil.NoSuchProcess:
        errors[name] = "gone"
    except psutil.AccessDenied:
        errors[name] = denied(name)  # names the permission and what grants it
    except (psutil.Error, OSError, ValueError) as exc:
        errors[name] = _reason(exc)
    return None


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip().rstrip(":")


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).isoformat()
