"""What sentinel can read of the target's processes, and what each missing read costs.

The shipped pod runs sentinel as uid 10001 with no capabilities beside a root
vLLM. The kernel then gives it every process's ``stat``, ``status``,
``cmdline``, ``task/<tid>/children`` and the socket tables, and refuses it the
rest: ``fd`` and ``environ`` (mode 0500/0400 of the server's uid: ptrace
access *and* ``CAP_DAC_READ_SEARCH``), ``exe``, ``root``, ``cwd``, ``maps``
and a meaningful ``wchan`` (ptrace access, ``CAP_SYS_PTRACE``), and ptrace
itself (py-spy). Each piece of process evidence is probed on the attributed
server, once per server, and reported on or off with why: in ``/status``
(``evidence.process_attribution.evidence``), as
``sentinel_process_evidence{evidence}``, in a log line and by ``sentinel doctor``,
which names the permission and the manifest component that grants it.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

PROC = Path("/proc")
CAP_SYS_PTRACE = 19
STACK_DUMPS = "manifests/components/stack-dumps"
NO_COMPONENT = "none of the manifests' components (the server's uid would)"


class ProcessEvidence(StrEnum):
    """Each piece of process evidence a rule or a bundle needs (the metric's label)."""

    ENGINE_STATE = "engine_state"
    API_ALIVE = "api_alive"
    COMMAND_LINE = "command_line"
    COMPILERS = "compilers"
    STACKS = "stacks"
    WAIT_CHANNEL = "wait_channel"
    ENVIRONMENT = "environment"
    DESCRIPTORS = "descriptors"


# What each piece serves, for reasons and the docs.
SERVES = {
    ProcessEvidence.ENGINE_STATE: "the dead rule (an engine or worker stopped, zombie or gone)",
    ProcessEvidence.API_ALIVE: "the listener-down rule and server restarts (a new API server)",
    ProcessEvidence.COMMAND_LINE: "the scheduling policy and the reasoning parser",
    ProcessEvidence.COMPILERS: "the compile hold (a compiler busy under the engine)",
    ProcessEvidence.STACKS: "stack dumps in bundles (py-spy)",
    ProcessEvidence.WAIT_CHANNEL: "kernel wait channels in bundles and their cause line",
    ProcessEvidence.ENVIRONMENT: "environments in bundles, OMP_NUM_THREADS for sentinel doctor",
    ProcessEvidence.DESCRIPTORS: "attribution by the socket's owner, open files and sockets "
    "in bundles",
}
_DAC = "CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH in sentinel's own process"
# For a piece that is off: (the permission it needs, what grants it).
NEEDS = {
    ProcessEvidence.STACKS: ("CAP_SYS_PTRACE for py-spy", STACK_DUMPS),
    ProcessEvidence.WAIT_CHANNEL: (
        "CAP_SYS_PTRACE in sentinel's own process",
        f"{NO_COMPONENT}; {STACK_DUMPS} gives the capability to py-spy only",
    ),
    ProcessEvidence.ENVIRONMENT: (_DAC, NO_COMPONENT),
    ProcessEvidence.DESCRIPTORS: (_DAC, NO_COMPONENT),
}


@dataclass(frozen=True, slots=True)
class EvidenceItem:
    """One piece of process evidence: on or off, why, and (off) what would turn it on."""

    evidence: ProcessEvidence
    on: bool
    why: str = ""
    needs: str = ""
    grant: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"on": self.on, "for": SERVES[self.evidence]}
        if self.why:
            out["why"] = self.why
        if not self.on and self.needs:
            out["needs"], out["granted_by"] = self.needs, self.grant
        return out


@dataclass(frozen=True, slots=True)
class ProcessAccess:
    """Every piece of process evidence for one attributed server (or for none)."""

    items: tuple[EvidenceItem, ...]

    @property
    def off(self) -> tuple[EvidenceItem, ...]:
        return tuple(item for item in self.items if not item.on)

    def available(self) -> dict[str, bool]:
        return {item.evidence.value: item.on for item in self.items}

    def to_json(self) -> dict[str, Any]:
        return {item.evidence.value: item.to_json() for item in self.items}


@dataclass(frozen=True, slots=True)
class OwnCapabilities:
    """sentinel's own effective and bounding capabilities and no_new_privs."""

    effective: int = 0
    bounding: int = 0
    no_new_privs: bool = False

    @classmethod
    def read(cls, status: Path = PROC / "self" / "status") -> OwnCapabilities:
        fields: dict[str, str] = {}
        try:
            for line in status.read_text().splitlines():
                key, _, value = line.partition(":")
                fields[key] = value.strip()
            return cls(
                int(fields.get("CapEff", "0"), 16),
                int(fields.get("CapBnd", "0"), 16),
                fields.get("NoNewPrivs", "0") == "1",
            )
        except (OSError, ValueError):
            return cls()

    def has(self, cap: int, which: str = "effective") -> bool:
        return bool(getattr(self, which) >> cap & 1)


def file_capability(path: str, cap: int = CAP_SYS_PTRACE) -> bool:
    """Whether the file carries ``cap`` as a permitted, effective file capability (``+ep``)."""
    try:
        raw = os.getxattr(path, "security.capability")
        magic, permitted = struct.unpack_from("<II", raw)
    except (OSError, struct.error):
        return False
    return bool(magic & 1) and bool(permitted >> cap & 1)


def _refused(read: Any) -> str:
    """ "" when ``read()`` works, else why not (the errno's words)."""
    try:
        read()
    except PermissionError:
        return "refused"
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return ""


def stack_dumps_possible(ptrace: bool, tool: str | None, own: OwnCapabilities) -> tuple[bool, str]:
    """Whether py-spy can attach to another user's process, and why (or why not).

    Either sentinel itself may ptrace the server, or ``tool`` carries the file
    capability and the kernel would honour it (in the bounding set, no
    no_new_privs); the latter is not verified until a dump runs.
    """
    if ptrace:
        return True, "sentinel may ptrace the server itself"
    if tool is None:
        return False, "no stack-dump tool is installed"
    if not file_capability(tool):
        return False, f"{tool} carries no cap_sys_ptrace file capability"
    if not own.has(CAP_SYS_PTRACE, "bounding"):
        return False, f"SYS_PTRACE is not in sentinel's bounding set: exec of {tool} fails (EPERM)"
    if own.no_new_privs:
        return False, (
            "no_new_privs (allowPrivilegeEscalation: false) makes the kernel ignore "
            f"the file capability of {tool}"
        )
    return True, f"{tool} carries cap_sys_ptrace+ep (not verified until a dump)"


def probe_access(
    api: int | None,
    engines: Sequence[int],
    *,
    command_line: bool,
    stack_tool: str | None = None,
    proc_root: Path = PROC,
    own: OwnCapabilities | None = None,
) -> ProcessAccess:
    """Probe each read on the attributed server ``api`` (None: nothing attributed: all off)."""
    if api is None:
        why = "no API server attributed (process_attribution says why)"
        return ProcessAccess(tuple(EvidenceItem(e, False, why) for e in ProcessEvidence))
    own = own or OwnCapabilities.read(proc_root / "self" / "status")
    base = proc_root / str(api)
    fds = _refused(lambda: os.listdir(base / "fd"))
    env = _refused(lambda: (base / "environ").open("rb").close())
    ptrace = _refused(lambda: os.readlink(base / "exe"))
    probe = engines[0] if engines else api
    children = _refused(
        lambda: (proc_root / str(probe) / "task" / str(probe) / "children").read_bytes()
    )
    stacks_on, stacks_why = stack_dumps_possible(not ptrace, stack_tool, own)
    me = os.geteuid()

    def item(evidence: ProcessEvidence, failed: str, path: str) -> EvidenceItem:
        if not failed:
            return EvidenceItem(evidence, True)
        needs, grant = NEEDS.get(evidence, ("", ""))
        return EvidenceItem(evidence, False, f"{path}: {failed} (uid {me})", needs, grant)

    stat = "read from /proc/<pid>/stat"
    return ProcessAccess(
        (
            EvidenceItem(ProcessEvidence.ENGINE_STATE, True, stat),
            EvidenceItem(ProcessEvidence.API_ALIVE, True, stat),
            EvidenceItem(
                ProcessEvidence.COMMAND_LINE,
                command_line,
                "" if command_line else f"/proc/{api}/cmdline is empty",
            ),
            item(ProcessEvidence.COMPILERS, children, f"/proc/{probe}/task/{probe}/children"),
            EvidenceItem(
                ProcessEvidence.STACKS, stacks_on, stacks_why, *NEEDS[ProcessEvidence.STACKS]
            ),
            item(ProcessEvidence.WAIT_CHANNEL, ptrace, f"/proc/{api}/exe (ptrace access)"),
            item(ProcessEvidence.ENVIRONMENT, env, f"/proc/{api}/environ"),
            item(ProcessEvidence.DESCRIPTORS, fds, f"/proc/{api}/fd"),
        )
    )


@dataclass(slots=True)
class AccessMemo:
    """Probes once per server: the answers change only with the server (``key``)."""

    _key: object = None
    _last: ProcessAccess | None = None

    def probe(
        self,
        key: object,
        api: int | None,
        engines: Sequence[int],
        *,
        command_line: bool,
        stack_tool: str | None,
    ) -> ProcessAccess:
        if self._last is None or key != self._key:
            self._key, self._last = (
                key,
                probe_access(
                    api,
                    engines,
                    command_line=command_line,
                    stack_tool=stack_tool,
                ),
            )
        return self._last
