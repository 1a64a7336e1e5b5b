"""The fault-tolerance rule: a rank whose recovery is over, one way or the other.

With vLLM's ``--enable-fault-tolerance`` a rank whose peer link breaks aborts
what it holds and waits *unhealthy* (0.34: ``diagnosing`` first) for the
orchestrator's ``retry``, up to ``engine_recovery_timeout_sec`` (120 s by
default), ``/health`` answering 200 all along; new requests queue (0.32/0.33)
or get 503 "The engine has faulted" at once (0.34). That is a recovery in
progress, held like a pause: phase ``recovering`` (the lifecycle), readiness
red with the status named, the engine, partial, path and broken rules off
(:class:`~sentinel.verdict.rule.Gate` ``STALLED``), every window starting
again when the status says ``healthy``. Killing the rank meanwhile would
destroy the recovery, and on an expert-parallel pool cost the whole group a
scale.

This rule ends the hold: an engine ``dead`` (a worker died; vLLM rejects
``retry`` and exits itself after the timeout) is a restart at once; a
recovery still pending past the timeout plus ``fault_tolerance_grace``,
timed from when sentinel first saw it, is a rank vLLM should have given up on
and did not. Where no status can be read (a 401 on 0.34's ``/v1`` route, the
route gone) and the canaries get 0.34's faulted 503, the refusals alone are
held for the same window, timed from the first. sentinel never sends
``/fault_tolerance/apply``: the orchestrator owns the recovery.
(``docs/design.md``, "A fault-tolerance recovery is not a hang".)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from sentinel.evidence.ft_status import DEAD, RECOVERING, FtEngine
from sentinel.knob import DAY, seconds, setting
from sentinel.verdict.clock import held_for
from sentinel.verdict.knobs import Knobs
from sentinel.verdict.model import Action, Evidence, Hang, HangKind
from sentinel.verdict.rule import HangRule
from sentinel.verdict.sections import SectionKey


@dataclass(frozen=True, slots=True)
class FaultToleranceSection:
    """What the fault-tolerance status said, as the ``fault_tolerance`` section holds it."""

    # How sentinel knows fault tolerance is on: "command line", "status endpoint" ("": not known).
    known: str = ""
    path: str = ""  # the status route that answered
    engines: tuple[FtEngine, ...] = ()  # the latest status read (kept a while when silent)
    # An engine unhealthy or diagnosing now, since: the recovery's start (a re-fault before
    # anything was served after a healthy read continues it).
    recovering_since: float | None = None
    dead_since: float | None = None  # an engine dead since
    # Canaries refused with 0.34's faulted 503 since, while no status says why (the refusals
    # current and fresh, nothing served after them, the status not all healthy).
    faulted_since: float | None = None
    faulted_message: str = ""
    cannot_tell: str = ""  # why no status could be read ("" when it could)
    # engine_recovery_timeout_sec from the server's command line (None: not shown there).
    timeout: float | None = None
    unknown: tuple[str, ...] = ()  # statuses no release sentinel knows says

    @property
    def held_since(self) -> float | None:
        """When the recovery sentinel holds began (None: none held)."""
        return self.recovering_since if self.recovering_since is not None else self.faulted_since


# The evidence section (sentinel.record.fault_tolerance).
SECTION: Final = SectionKey("fault_tolerance", FaultToleranceSection)


class FaultToleranceKnobs(Knobs):
    """The fault-tolerance rule's knobs."""

    fault_tolerance_timeout: float = seconds(
        120.0,
        "vLLM's engine_recovery_timeout_sec where the server's command line does not show it "
        "(--fault-tolerance-config): how long a fault-tolerance rank may wait unhealthy for "
        "its orchestrator's retry.",
        1.0,
        DAY,
    )
    fault_tolerance_grace: float = seconds(
        10.0,
        "How long past the recovery timeout a rank still unhealthy is held: vLLM gives up "
        "itself at the timeout (the rank then exits); one still waiting after this did not.",
        0.0,
        3600.0,
    )
    fault_tolerance_policy: Action = setting(
        Action.RESTART,
        "What a fault-tolerance rank dead, or unhealthy past its recovery timeout, does.",
    )


def fault_tolerance_hang(
    evidence: Evidence, policy: FaultToleranceKnobs, now: float
) -> Hang | None:
    """A rank dead, or a recovery held past its timeout and grace."""
    section = evidence.section(SECTION)
    if section is None:
        return None
    if section.dead_since is not None:
        dead = [e for e in section.engines if e.status == DEAD]
        named = ", ".join(e.describe() for e in dead) or "an engine dead"
        return Hang(
            HangKind.FAULT_TOLERANCE,
            policy.fault_tolerance_policy,
            f"fault tolerance: {named}: a worker died, vLLM rejects retry and exits after "
            "its recovery timeout",
            section.dead_since,
            tuple(e.id for e in dead),
        )
    since = section.held_since
    timeout = section.timeout if section.timeout is not None else policy.fault_tolerance_timeout
    elapsed = held_for(since, timeout + policy.fault_tolerance_grace, now, evidence.unobserved)
    if since is None or elapsed is None:
        return None
    where = "command line" if section.timeout is not None else "setting fault_tolerance_timeout"
    if section.recovering_since is not None:
        waiting = [e for e in section.engines if e.status in RECOVERING]
        what = ", ".join(e.describe() for e in waiting)
        engines = tuple(e.id for e in waiting)
    else:
        what = f"canaries refused 'engine faulted' ({section.cannot_tell or 'no status read'})"
        engines = ()
    return Hang(
        HangKind.FAULT_TOLERANCE,
        policy.fault_tolerance_policy,
        f"fault-tolerance recovery not over after {elapsed:.0f}s (engine_recovery_timeout_sec "
        f"{timeout:g}s from the {where}, grace {policy.fault_tolerance_grace:g}s): {what}",
        since,
        engines,
    )


RULE = HangRule(
    "fault_tolerance",
    fault_tolerance_hang,
    FaultToleranceKnobs,
    kinds=(HangKind.FAULT_TOLERANCE,),
    action="fault_tolerance_policy",
    windows=("fault_tolerance_timeout", "fault_tolerance_grace"),
    evidence="an engine 'dead' in vLLM's fault-tolerance status, or one unhealthy (or 0.34's "
    "faulted 503 alone) past engine_recovery_timeout_sec and the grace",
)
