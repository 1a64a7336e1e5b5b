"""A rule owns its readiness word: declared beside its judge, asked by the verdict at its point.

A toy rule registered from outside sentinel declares a word on readiness
(:class:`~sentinel.verdict.rule.Readiness`); the verdict answers it with no
edit to :mod:`sentinel.verdict.decide`, at the point declared: a state of
its own outranks the stall and the hangs, a "cannot tell" comes after the
hangs and before the resume gate and the hysteresis. Unregistered, the same
evidence is judged as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import TEXT
from sentinel.verdict import (
    Action,
    Evidence,
    Hang,
    HangKind,
    KindEvidence,
    Lifecycle,
    Phase,
    Policy,
    ProbeAnswer,
    VerdictState,
    evaluate,
)
from sentinel.verdict.knobs import Knobs
from sentinel.verdict.registry import RULES, register, unregister
from sentinel.verdict.rule import HangRule, Point, Readiness, Standing
from sentinel.verdict.sections import SectionKey

KIND = HangKind("toy_drain_stuck")


@dataclass(frozen=True, slots=True)
class DrainSection:
    """The toy source: draining since when (None: not draining), and whether it is stuck."""

    draining_since: float | None = None
    stuck: bool = False
    served: bool = False


SECTION = SectionKey("toy_drain", DrainSection)


class DrainKnobs(Knobs):
    """No knob: the toy's word reads its section only."""


def stuck(evidence: Evidence, knobs: DrainKnobs, now: float) -> Hang | None:
    section = evidence.section(SECTION)
    if section is None or not section.stuck:
        return None
    return Hang(KIND, Action.UNREADY, "toy drain stuck", 0.0)


def draining(standing: Standing, knobs: DrainKnobs, now: float) -> ProbeAnswer | None:
    section = standing.evidence.section(SECTION)
    if section is None or section.draining_since is None:
        return None
    return ProbeAnswer(False, f"draining for {now - section.draining_since:.0f}s")


def yields(standing: Standing, knobs: DrainKnobs, now: float) -> ProbeAnswer | None:
    """Draining, unless a hang readiness heeds is confirmed: then the hangs speak."""
    return standing.hangs_say if standing.heeded else draining(standing, knobs, now)


def served(evidence: Evidence) -> bool:
    section = evidence.section(SECTION)
    return section is not None and section.served


@contextmanager
def toy(
    at: Point,
    word: Callable[[Standing, DrainKnobs, float], ProbeAnswer | None] = draining,
    *,
    serves: bool = False,
) -> Iterator[None]:
    """The toy rule registered for the duration, its word asked at ``at``."""
    readiness = Readiness(at, word, "unready while draining", served if serves else None)
    register(HangRule("toy_drain", stuck, DrainKnobs, kinds=(KIND,), readiness=readiness))
    try:
        yield
    finally:
        unregister("toy_drain")


def readiness(section: DrainSection, now: float = 20.0, **fields: object) -> ProbeAnswer:
    text = KindEvidence(TEXT, results=(CanaryResult("text-canary", TEXT, Reason.OK, 1.0, 0.1),))
    evidence = Evidence(
        kinds={TEXT: text},
        sections={SECTION.name: section},
        **fields,  # type: ignore[arg-type]
    )
    state = replace(VerdictState(), epoch=0, startup_passed=True, served=True)
    _, verdict = evaluate(state, evidence, Policy(), now)
    return verdict.readiness


def test_a_rule_from_outside_owns_its_readiness_word() -> None:
    section = DrainSection(draining_since=15.0)
    assert readiness(section).reason == "serving"  # unregistered: nobody names the state
    with toy(Point.STATE):
        answer = readiness(section)
        assert (answer.ok, answer.reason) == (False, "draining for 5s")
        assert readiness(DrainSection()).reason == "serving"  # nothing to say: None
    assert "toy_drain" not in RULES


def test_a_state_word_outranks_the_stall_and_the_hangs() -> None:
    asleep = Lifecycle(Phase.ASLEEP, since=10.0, why="/is_sleeping is true")
    with toy(Point.STATE):
        assert readiness(DrainSection(15.0), lifecycle=asleep).reason == "draining for 5s"
        assert readiness(DrainSection(15.0, stuck=True)).reason == "draining for 5s"
        assert readiness(DrainSection(stuck=True)).reason == "toy drain stuck"
    with toy(Point.STATE, yields):  # a state that yields to a hang hands the hangs the word
        assert readiness(DrainSection(15.0, stuck=True)).reason == "toy drain stuck"
        said = readiness(DrainSection(15.0, stuck=True), lifecycle=asleep).reason
        assert said == "toy drain stuck"  # not the stall's "asleep: ..."


def test_a_cannot_tell_word_follows_the_hangs_and_precedes_the_resume_gate() -> None:
    resumed = Lifecycle(resumed_at=18.0)  # awake again; text has not passed since
    with toy(Point.CANNOT_TELL):
        assert readiness(DrainSection(15.0, stuck=True)).reason == "toy drain stuck"
        assert readiness(DrainSection(15.0), lifecycle=resumed).reason == "draining for 5s"
        asleep = Lifecycle(Phase.ASLEEP, since=10.0, why="/is_sleeping is true")
        assert readiness(DrainSection(15.0), lifecycle=asleep).reason == (
            "asleep: /is_sleeping is true"
        )


def test_a_rule_that_says_the_server_served_lifts_the_resume_gate() -> None:
    resumed = Lifecycle(resumed_at=18.0)
    waiting = "resumed; waiting for canary kinds: text"
    assert readiness(DrainSection(served=True), lifecycle=resumed).reason == waiting
    with toy(Point.STATE, serves=True):
        assert readiness(DrainSection(served=False), lifecycle=resumed).reason == waiting
        assert readiness(DrainSection(served=True), lifecycle=resumed).reason == "serving"


def test_the_built_in_states_are_their_rules_words() -> None:
    said = {name: rule.readiness.at for name, rule in RULES.items() if rule.readiness}
    assert said == {
        "weight_update": Point.STATE,
        "scaling": Point.STATE,
        "wake": Point.STATE,
        "refused": Point.CANNOT_TELL,
    }
