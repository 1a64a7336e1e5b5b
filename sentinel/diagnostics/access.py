"""What a bundle (or ``sentinel doctor``) could not read of the server's processes, and why.

A refused read is never just "access denied": it names the permission it
needs and the manifest component that grants it, from the evidence layer's
one table (:mod:`sentinel.evidence.process_access`). The kernel answers one
read with a plausible value instead of a refusal: ``/proc/<pid>/wchan`` reads
``0`` ("running") for a process sentinel may not ptrace, so a ``0`` is
believed only where ptrace access holds (:func:`wchan_hidden`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import httpx

from sentinel.diagnostics.stacks import find_py_spy
from sentinel.evidence.process_access import NEEDS, SERVES, ProcessEvidence
from sentinel.evidence.process_model import Attribution, ProcessSnapshot
from sentinel.evidence.processes import ProcessWatcher

# A bundle's per-process fields, by the piece of evidence each needs.
FIELDS = {
    "environ": ProcessEvidence.ENVIRONMENT,
    "open_files": ProcessEvidence.DESCRIPTORS,
    "connections": ProcessEvidence.DESCRIPTORS,
    "wchan": ProcessEvidence.WAIT_CHANNEL,
    "stacks": ProcessEvidence.STACKS,
}
ACCESS_DENIED = "access denied"


def denied(field: str) -> str:
    """Why ``field`` of another user's process was refused: the permission, what grants it."""
    evidence = FIELDS.get(field)
    if evidence is None or evidence not in NEEDS:
        return ACCESS_DENIED
    needs, grant = NEEDS[evidence]
    return f"{ACCESS_DENIED}: needs {needs}; granted by {grant}"


def wchan_hidden(pid: int, proc_root: Path = Path("/proc")) -> bool:
    """Whether ``wchan`` of ``pid`` is hidden: the kernel prints ``0`` without ptrace access."""
    try:
        os.readlink(proc_root / str(pid) / "exe")
    except PermissionError:
        return True
    except OSError:
        return False
    return False


def lacks(processes: Iterable[Mapping[str, Any]], stacks: Mapping[str, Any]) -> dict[str, str]:
    """What the bundle's process and stack sections lack, field by field, and why.

    ``processes`` and ``stacks`` are the bundle's own JSON sections; each
    field's reasons are grouped by the PIDs that share them.
    """
    found: dict[str, dict[str, list[int]]] = {}
    for proc in processes:
        for field, why in (proc.get("errors") or {}).items():
            found.setdefault(field, {}).setdefault(str(why), []).append(int(proc.get("pid", 0)))
    for pid, dump in stacks.items():
        if isinstance(dump, Mapping) and not dump.get("ok") and dump.get("error"):
            why = str(dump["error"])
            if "ermission" in why and "CAP_SYS_PTRACE" not in why:
                why = f"{why} ({denied('stacks')})"
            found.setdefault("stacks", {}).setdefault(why, []).append(int(pid))
    return {
        field: "; ".join(
            f"pid {', '.join(str(p) for p in sorted(pids))}: {why}" for why, pids in reasons.items()
        )
        for field, reasons in sorted(found.items())
    }


def findings(snapshot: ProcessSnapshot) -> list[tuple[str, str, str]]:
    """``sentinel doctor``'s process findings: (``ok`` or ``warn``, summary, detail).

    How the API server was attributed, what could not be read, and each piece
    of process evidence; one that is off names the permission it needs and
    the manifest component that grants it.
    """
    if snapshot.api is None:
        why = snapshot.attribution_detail or "no vLLM API server visible"
        return [
            (
                "warn",
                "no API server attributed: all process evidence is off",
                f"{why}; sentinel must see vLLM's processes "
                "(manifests/base/deployment.yaml: shareProcessNamespace: true)",
            )
        ]
    by = snapshot.attribution
    how = "its listening socket's owner" if by is Attribution.LISTENING_SOCKET else by.value
    out = [("ok", f"API server pid {snapshot.api.pid} found by {how}", snapshot.attribution_detail)]
    out += [("warn", f"could not read {what}", "") for what in snapshot.unreadable]
    for item in () if snapshot.access is None else snapshot.access.items:
        name, serves = item.evidence.value, SERVES[item.evidence]
        if item.on:
            out.append(("ok", f"{name}: on", f"{serves}; {item.why}" if item.why else serves))
        else:
            needs = f"; needs {item.needs}; granted by {item.grant}" if item.needs else ""
            out.append(("warn", f"{name}: off ({serves})", f"{item.why}{needs}"))
    return out


def sample_target(target: str) -> ProcessSnapshot:
    """Attribute the target's processes as ``sentinel run`` would (blocking ``/proc`` reads)."""
    url = httpx.URL(target)
    port = url.port or {"http": 80, "https": 443}.get(url.scheme)
    watcher = ProcessWatcher(clock=time.monotonic, listen_port=port, stack_tool=find_py_spy())
    return watcher.sample()
