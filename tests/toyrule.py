"""A toy hang rule and a toy evidence provider, defined outside sentinel.

They prove that a hang kind is one module plus one registration and that an
evidence source is one provider: the provider owns a frozen section of the
evidence (``evidence.section(SECTION)``, its typed key) and its own ``/status`` fragment; the
rule reads that section and nothing else, with a knob of its own. Nothing in
sentinel names either.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sentinel.knob import seconds
from sentinel.verdict import Action, Evidence, Hang, HangKind
from sentinel.verdict.clock import held_for
from sentinel.verdict.knobs import Knobs
from sentinel.verdict.registry import register, unregister
from sentinel.verdict.rule import Gate, HangRule
from sentinel.verdict.sections import SectionKey

KIND = HangKind("toy_wedge")


@dataclass(frozen=True, slots=True)
class ToySection:
    """What the toy source saw at one instant: wedged since when (None: not wedged)."""

    wedged_since: float | None = None


SECTION = SectionKey("toy", ToySection)


class ToySource:
    """The toy evidence provider: a switch a test flips, read at each evaluation."""

    key = SECTION

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.wedged_since: float | None = None
        self.sections_read = 0

    def wedge(self) -> None:
        self.wedged_since = self.clock()

    def clear(self) -> None:
        self.wedged_since = None

    def section(self, now: float) -> ToySection:
        self.sections_read += 1
        return ToySection(self.wedged_since)

    def status(self, section: ToySection, now: float) -> Mapping[str, Any] | None:
        since = section.wedged_since
        return {"wedged": since is not None, "for": None if since is None else now - since}


class ToyKnobs(Knobs):
    """The toy rule's one knob."""

    toy_window: float = seconds(1.0, "Toy wedge: the toy source wedged this long.", 0.1, 60.0)


def toy_hang(evidence: Evidence, knobs: ToyKnobs, now: float) -> Hang | None:
    """The toy source wedged for the toy window."""
    section = evidence.section(SECTION)
    if section is None:
        return None
    since = section.wedged_since
    elapsed = held_for(since, knobs.toy_window, now, evidence.unobserved)
    if since is None or elapsed is None:
        return None
    return Hang(KIND, Action.RESTART, f"toy wedge: wedged for {elapsed:.1f}s", since)


RULE = HangRule(
    "toy_wedge",
    toy_hang,
    ToyKnobs,
    kinds=(KIND,),
    windows=("toy_window",),
    off_when=frozenset({Gate.STALLED}),
    evidence="the toy source says wedged",
)


@contextmanager
def registered() -> Iterator[None]:
    """The toy rule registered for the duration (the registry restored after)."""
    register(RULE)
    try:
        yield
    finally:
        unregister(RULE.name)
