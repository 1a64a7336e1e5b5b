"""What a hang rule declares: its kinds, its knobs, its action, when it is off, and its judge.

Rules are data registered in :mod:`sentinel.verdict.registry`, the way canary
kinds are registered in :mod:`sentinel.canary.kinds`: the order they are
judged in, the closed set of hang kinds (metrics labels), the settings they
add and ``docs/verdict.md``'s table all come from the registrations, so a new
hang kind is one module and one :func:`~sentinel.verdict.registry.register`.

A rule that owns a state readiness names (a scale, a weight update's hold, an
idle sleep, a refusal nobody taught sentinel) declares its readiness word
(:class:`Readiness`) beside its judge, so such a state is one module too:
:mod:`sentinel.verdict.decide` asks the registered words at fixed points and
names no rule.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

from sentinel.verdict.clock import held_for
from sentinel.verdict.knobs import Knobs
from sentinel.verdict.model import Action, Evidence, Hang, HangKind, ProbeAnswer

K = TypeVar("K", bound=Knobs)

#: What a judge finds: nothing, one hang, or several (a path rule, one per path kind).
Finding = Hang | Iterable[Hang] | None


class Gate(StrEnum):
    """A state in which a rule is off: its evidence means something else there."""

    STALLED = "asleep or paused"
    COMPILING = "compiling"
    API_STUCK = "an API-server process stuck"
    BEFORE_STARTUP = "before startup"
    RETIRED = "a retired elastic EP rank"  # its scale-down ends it; nothing restarts it


class Point(StrEnum):
    """Where readiness asks the rules for their words, in the order it asks."""

    # A state the rule owns: after startup, before the stall's answer and the hangs'.
    STATE = "after startup, before the stall and the hangs"
    # A "cannot tell": after the hangs, before the resume gate and the hysteresis.
    CANNOT_TELL = "after the hangs, before the resume gate"


@dataclass(frozen=True, slots=True)
class Standing:
    """What readiness has settled when it asks a rule for its word.

    ``heeded`` are the confirmed hangs readiness answers for (``restart`` or
    ``unready``, enforcing); ``hangs_say`` is the answer they give (the
    brake's, a held restart's or theirs; None: nothing to say), so a rule
    whose state yields to a hang can hand the hangs the word.
    """

    evidence: Evidence
    hangs: tuple[Hang, ...]
    heeded: tuple[Hang, ...]
    hangs_say: ProbeAnswer | None


@dataclass(frozen=True, slots=True)
class Readiness(Generic[K]):
    """A rule's word on readiness: what it answers at ``at`` (None: it has nothing to say).

    Asked in the rules' registered order whatever their gates, the first
    answer wins. ``says`` is the word in a line, for ``docs/verdict.md``.
    ``served`` tells whether the server has just served a request after a
    resume (a request woke it), so readiness need not wait for every canary
    kind to pass again.
    """

    at: Point
    word: Callable[[Standing, K, float], ProbeAnswer | None]
    says: str
    served: Callable[[Evidence], bool] | None = None


@dataclass(frozen=True, slots=True)
class HangRule(Generic[K]):
    """One hang rule, declared.

    ``judge`` reads frozen evidence, its own knobs and "now" and finds hangs;
    ``kinds`` are the hang kinds it may confirm (``per_path``: one per
    registered path canary kind instead); ``action`` names the knob holding
    its action (empty: each canary kind's own policy); ``windows`` name the
    knobs that time it; ``evidence`` says in a line what it reads, for
    ``docs/verdict.md``; ``readiness``, its word on readiness, if it owns a
    state readiness names.
    """

    name: str
    judge: Callable[[Evidence, K, float], Finding]
    knobs: type[K]
    kinds: tuple[HangKind, ...] = ()
    action: str = ""
    windows: tuple[str, ...] = ()
    off_when: frozenset[Gate] = frozenset()
    evidence: str = ""
    per_path: bool = False
    readiness: Readiness[K] | None = None

    def findings(self, evidence: Evidence, knobs: K, now: float) -> tuple[Hang, ...]:
        """The judge's finding as a tuple of hangs."""
        found = self.judge(evidence, knobs, now)
        if found is None:
            return ()
        if isinstance(found, Hang):
            return (found,)
        return tuple(found)


def past_bound(
    kind: HangKind,
    action: Action,
    since: float | None,
    bound: float,
    evidence: Evidence,
    now: float,
    says: Callable[[float], str],
) -> Hang | None:
    """The hang of a condition held since ``since`` for ``bound`` observed seconds.

    The body every bound rule shares, so that each states only when its
    condition began, its bound and its words: ``says`` words the reason from
    the observed seconds. None while the condition does not hold (``since``
    None) or has not held the whole bound; the hang starts at ``since``.
    """
    elapsed = held_for(since, bound, now, evidence.unobserved)
    if since is None or elapsed is None:
        return None
    return Hang(kind, action, says(elapsed), since)
