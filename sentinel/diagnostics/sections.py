"""The JSON a bundle holds of what its sections read, the long texts cut to their limit.

:func:`~sentinel.diagnostics.bundle.capture` reads the sections and assembles
the bundle; this module owns the JSON of the readings that are not already
JSON-shaped: what discovery saw of a process that could not be described (its
argv redacted), the cgroup checks, the canary history, and the ``/metrics``
scrapes and stack dumps, cut to ``section_max_bytes`` before the bundle is
copied for redaction, each cut one saying how much it lost
(``truncated_bytes``); and the changes of the kubelet-facing answers the
evaluator kept (:class:`ProbeTransition`), which the daemon hands over and
the timeline draws.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from sentinel.canary.result import CanaryResult
from sentinel.diagnostics import cgroup, procs, stacks
from sentinel.diagnostics.sizes import cut_text, kept_metrics
from sentinel.diagnostics.summary import iso
from sentinel.telemetry.redact import redact_argv

# How much of an answer's reason a bundle keeps: it quotes what sentinel saw (a
# hang's reason names canaries and processes), never a whole reply.
REASON_MAX_CHARS = 500


@dataclass(frozen=True, slots=True)
class ProbeTransition:
    """One change of a kubelet-facing answer (liveness, readiness, startup), as evaluated.

    A change is a flip, or a red answer coming to stand for other confirmed
    hangs (readiness red for slow canaries, then for an engine hang). ``at``
    is on the daemon's monotonic clock, like the canaries' times, so a bundle
    places both with its ``clock`` anchor. ``hangs`` names the confirmed hang
    kinds behind a red answer (empty: none, or a green one); ``restart`` marks
    liveness turning red to ask the kubelet for a restart.
    """

    at: float
    probe: str
    ok: bool
    reason: str
    hangs: tuple[str, ...] = ()
    restart: bool = False

    def to_json(self) -> dict[str, Any]:
        """The bundle's entry, its reason cut; the whole bundle is redacted after."""
        reason = self.reason
        if len(reason) > REASON_MAX_CHARS:
            reason = reason[: REASON_MAX_CHARS - 3] + "..."
        return {
            "at": self.at,
            "probe": self.probe,
            "ok": self.ok,
            "reason": reason,
            "hangs": list(self.hangs),
            "restart": self.restart,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProbeTransition:
        return cls(
            at=float(data["at"]),
            probe=str(data["probe"]),
            ok=bool(data["ok"]),
            reason=str(data["reason"]),
            hangs=tuple(str(kind) for kind in data.get("hangs") or ()),
            restart=bool(data.get("restart", False)),
        )


def discovered_json(d: procs.Discovered) -> dict[str, Any]:
    return {
        "pid": d.pid,
        "ppid": d.ppid,
        "title": d.name,
        "role": d.role.value,
        "status": d.status.value,
        "cmdline": redact_argv(d.cmdline),
        "errors": d.errors,
    }


def cgroup_json(section: cgroup.CgroupSection | None) -> dict[str, Any] | None:
    if section is None:
        return None
    return {
        "root": asdict(section.root),
        "per_process": {str(pid): asdict(q) for pid, q in section.per_process.items()},
        "checks": [asdict(c) | {"oversubscribed": c.oversubscribed} for c in section.checks],
        "omp_oversubscribed_pids": [c.pid for c in section.omp_oversubscribed],
    }


def canary_json(result: CanaryResult) -> dict[str, Any]:
    # Its fields are scalars: a plain copy, not asdict's recursive deep copy.
    data = {f.name: getattr(result, f.name) for f in fields(result)}
    data["ok"] = result.ok
    # A correctness check's token ids are in the bundle's correctness section, with
    # how each left the fingerprint (and no NaN that strict JSON readers refuse).
    data.pop("generations", None)
    return data


def metrics_json(
    scrapes: Sequence[tuple[float, str]], limit: int, cut_before: Sequence[int]
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for kept in kept_metrics(scrapes, limit, cut_before):
        entry: dict[str, Any] = {"at": iso(kept.at), "text": kept.text}
        if kept.cut:
            entry["truncated_bytes"] = kept.cut
        out.append(entry)
    return out


def stack_json(dump: stacks.StackDump, limit: int) -> dict[str, Any]:
    data = asdict(dump)
    text = data.get("text")
    if isinstance(text, str):
        data["text"], cut = cut_text(text, limit)
        if cut:
            data["truncated_bytes"] = cut
    return data
