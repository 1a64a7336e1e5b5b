"""A bundle's headline from the hang kind, and the canaries still unanswered, with their ages.

The process classifier (:mod:`sentinel.diagnostics.cause`) reads the kernel:
for a hang confined to one path (grammar compilation, image preprocessing) it
sees a healthy engine waiting for work and would headline "engine blocked"
while the text canaries pass. The hang kind knows better, so a path hang's
headline names its path and how long its canary has gone unanswered; the
process state follows it in brackets.

Works on plain data (each result as the bundle stores it, see
:func:`sentinel.diagnostics.sections.canary_json`; the send times of the
canaries not yet answered), so the summary can list the same canaries again
from a stored ``bundle.json``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sentinel.canary.kinds import CONTROL, is_path
from sentinel.canary.spec import CanaryKind
from sentinel.diagnostics.cause import Cause, CauseClass

# What the kernel says of an engine that merely waits while one path is hung.
PATH_MASKED = frozenset(
    {CauseClass.ENGINE_BLOCKED, CauseClass.ENGINE_IDLE, CauseClass.ENGINE_SPINNING}
)
HANG_SUFFIX = "-hang"  # a confirmed hang's trigger: "<hang kind>-hang"
# What an operator calls each path (a kind not named here is called by its own name).
PATH_NAMES = {"structured": "structured-output", "multimodal": "multimodal (image preprocessing)"}


@dataclass(frozen=True, slots=True)
class Unanswered:
    """One kind's canaries that have not been answered well since its last success."""

    kind: str
    age_s: float  # since the oldest of them was sent
    in_flight: int  # sent, before their deadline, no answer yet
    late: int  # past their deadline, a late answer still awaited
    failed: int  # answered with a failure since the last success
    last_reason: str  # the newest failure's reason ("" when none has an answer yet)

    @property
    def waiting(self) -> int:
        """Canaries still awaited, in time or late."""
        return self.in_flight + self.late

    def line(self) -> str:
        parts = []
        if self.in_flight:
            parts.append(f"{self.in_flight} in flight")
        if self.late:
            parts.append(f"{self.late} awaited past the deadline")
        if self.failed:
            parts.append(f"{self.failed} failed (last: {self.last_reason})")
        return f"{self.kind:<11} unanswered for {self.age_s:5.1f} s: {', '.join(parts)}"


def unanswered(
    history: Mapping[str, Any], outstanding: Mapping[str, Any], now: float
) -> list[Unanswered]:
    """Each kind with canaries unanswered since its last success, oldest first.

    ``history``: kind -> results, oldest first, as a bundle keeps them;
    ``outstanding``: kind -> send times of canaries still in flight; ``now``
    on the same (monotonic) clock. Malformed entries are skipped.
    """
    out: list[Unanswered] = []
    for kind in sorted(set(_mapping(history)) | set(_mapping(outstanding))):
        sent = [float(t) for t in _listed(_mapping(outstanding).get(kind)) if _number(t)]
        failed: list[Mapping[str, Any]] = []
        for result in reversed(_listed(_mapping(history).get(kind))):
            if not isinstance(result, Mapping) or not _number(result.get("started")):
                continue
            if result.get("ok") or result.get("reason") == "ok":
                break
            failed.append(result)
        late = sum(1 for r in failed if r.get("awaiting_late"))
        starts = sent + [float(r["started"]) for r in failed]
        if not starts:
            continue
        out.append(
            Unanswered(
                kind=str(kind),
                age_s=max(now - min(starts), 0.0),
                in_flight=len(sent),
                late=late,
                failed=len(failed) - late,
                last_reason=str(failed[0].get("reason", "")) if failed else "",
            )
        )
    return sorted(out, key=lambda u: -u.age_s)


def path_headline(
    trigger_kind: str, history: Mapping[str, Any], outstanding: Mapping[str, Any], now: float
) -> str | None:
    """The headline of a path hang's bundle; None when the trigger is no path hang."""
    if not trigger_kind.endswith(HANG_SUFFIX):
        return None
    kind = trigger_kind.removesuffix(HANG_SUFFIX)
    if not kind or not is_path(CanaryKind(kind)):
        return None
    path = PATH_NAMES.get(kind, kind)
    found = next((u for u in unanswered(history, outstanding, now) if u.kind == kind), None)
    if found is None:
        what = f"the {kind} canaries made no progress of their own"
    elif found.waiting:
        what = f"the {kind} canary has not answered for {found.age_s:.0f} s"
    else:
        what = f"the {kind} canaries have failed for {found.age_s:.0f} s ({found.last_reason})"
    controls = _listed(_mapping(history).get(str(CONTROL)))
    last = controls[-1] if controls and isinstance(controls[-1], Mapping) else {}
    passing = bool(last.get("ok") or last.get("reason") == "ok")
    return f"{path} path hung: {what}" + (f" while {CONTROL} canaries pass" if passing else "")


def of_path(
    cause: Cause,
    trigger_kind: str,
    history: Mapping[str, Any],
    outstanding: Mapping[str, Any],
    now: float,
) -> Cause:
    """``cause``, headlined by the path where a path hang's engine merely waits.

    A process stopped, gone or in a driver call explains more than the path
    and keeps its own headline; the kernel's word on a waiting engine follows
    the path's, its guess at what it waits on dropped.
    """
    path = path_headline(trigger_kind, history, outstanding, now)
    if path is None or cause.cause not in PATH_MASKED:
        return cause
    state = cause.summary.partition(": ")[2].partition(", waiting")[0]
    return Cause(CauseClass.PATH_HUNG, f"{path}; {state}" if state else path, cause.pid)


def _mapping(value: Any) -> Mapping[str, Any]:
    """A mapping section; nothing when it is absent, dropped for size or not a mapping."""
    if not isinstance(value, Mapping) or value.get("truncated") is True:
        return {}
    return value


def _listed(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else ()


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
