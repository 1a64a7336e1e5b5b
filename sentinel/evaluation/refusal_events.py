"""A server refusing in words sentinel does not know: announced once per run, as an Event.

Readiness turns red at the first such refusal and ``/status`` quotes its body
(:mod:`sentinel.verdict.hangs.refused`), but an operator reading ``kubectl
describe pod`` or an event pipeline should learn that sentinel "cannot tell"
too: an unknown refusal is most often a state of a vLLM release newer than
sentinel, to be taught to it. :class:`RefusalNotices` finds it in the judged
evidence and says it once per run (a success ends a run; the next one is news
again), never every evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sentinel.canary.refusal import Refusal
from sentinel.telemetry.events import EventReason
from sentinel.verdict import Evidence
from sentinel.verdict.hangs.refused import current_refusal, quoted


class Notice(Protocol):
    """What the evaluator announces: an Event's reason and message (a kind's notice too)."""

    @property
    def reason(self) -> EventReason: ...
    @property
    def message(self) -> str: ...


@dataclass(frozen=True, slots=True)
class RefusalNotice:
    """One run of unknown refusals, newly seen."""

    what: str  # the status, source and body, quoted and capped
    epoch: int
    reason: EventReason = EventReason.UNKNOWN_REFUSAL

    @property
    def message(self) -> str:
        return (
            f"the server refuses canaries in words sentinel does not know (epoch {self.epoch}): "
            f"{self.what}; cannot tell: unready until it ends, a hang past refusal_bound"
        )


class RefusalNotices:
    """Remembers which runs of unknown refusals were announced."""

    def __init__(self) -> None:
        self._said: tuple[int, float] | None = None

    def new(self, evidence: Evidence) -> list[Notice]:
        """The current run of unknown refusals, if it was not announced yet."""
        seen = current_refusal(evidence, Refusal.UNKNOWN)
        if seen is None or evidence.lifecycle.stalled or self._said == (evidence.epoch, seen.since):
            return []
        self._said = (evidence.epoch, seen.since)
        return [RefusalNotice(quoted(seen), evidence.epoch)]
