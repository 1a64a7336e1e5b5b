"""Which canary kinds a server is not judged on: announced once per kind per server epoch.

A kind leaves the judging for one server epoch in three ways, each decided by
the planner (:mod:`sentinel.record.planner`): it is set aside before startup
(:mod:`sentinel.record.set_aside`: replies that only reason until
``max_tokens``, a capability refused with a 4xx), the model does not take its
input (``unsupported``), or the server's command line says it cannot be
validated. Each already shows in ``/status``
(``canaries.<kind>.disabled_reason``) and ``/startupz``; an operator reading
``kubectl describe pod`` or an event pipeline should see it too, since a
kind set aside is a path sentinel no longer watches.

:class:`KindNotices` finds them in the judged evidence, a kind going from
enabled to disabled with its reason, not in the scheduler: whoever disabled
it, the evidence is where it shows. Each is announced once per kind per
server epoch (a new epoch re-enables every kind, and a kind set aside again
for the next server is news again), never every evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass

from sentinel.canary.spec import CanaryKind
from sentinel.telemetry.events import EventReason
from sentinel.verdict import Evidence

SET_ASIDE_PREFIX = "set aside for this server: "


@dataclass(frozen=True, slots=True)
class KindNotice:
    """One kind newly out of the judging in this epoch, and why."""

    kind: CanaryKind
    why: str
    epoch: int
    reason: EventReason = EventReason.CANARY_KIND_SET_ASIDE

    @property
    def message(self) -> str:
        """The Event's message: the kind, why, and what it means for the verdict."""
        why = self.why.removeprefix(SET_ASIDE_PREFIX) or "no reason given"
        return (
            f"canary kind {self.kind.value} set aside for this server (epoch {self.epoch}): "
            f"{why}; sentinel judges startup and readiness on the other kinds and no longer "
            f"watches this path until the server restarts"
        )


class KindNotices:
    """Remembers which kinds were announced in the current server epoch."""

    def __init__(self) -> None:
        self._epoch: int | None = None
        self._said: set[CanaryKind] = set()

    def new(self, evidence: Evidence) -> list[KindNotice]:
        """The kinds disabled in ``evidence`` and not yet announced for its epoch."""
        if evidence.epoch != self._epoch:
            self._epoch, self._said = evidence.epoch, set()
        found = [
            KindNotice(kind, record.disabled_reason, evidence.epoch)
            for kind, record in evidence.kinds.items()
            if not record.enabled and kind not in self._said
        ]
        self._said.update(notice.kind for notice in found)
        return found
