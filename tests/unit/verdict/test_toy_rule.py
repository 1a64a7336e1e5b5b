"""A hang kind from outside sentinel: one module (tests/toyrule.py) and one registration.

The toy rule reads the toy provider's section of the evidence and nothing
else; registered, it is judged in order with the built-in rules, joins the
closed kind set, the generated verdict table and the liveness answer, and its
gate turns it off while the server sleeps. Unregistered, the same evidence
confirms nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import TEXT
from sentinel.record.provider import fragments, gather
from sentinel.telemetry.metrics import hang_kinds
from sentinel.verdict import (
    Evidence,
    KindEvidence,
    Lifecycle,
    Phase,
    Policy,
    VerdictState,
    evaluate,
)
from sentinel.verdict.registry import RULES, register
from sentinel.verdict.table import verdict_reference
from tests import toyrule


@pytest.fixture
def toy_registered() -> Iterator[None]:
    with toyrule.registered():
        yield


def ok(at: float) -> CanaryResult:
    return CanaryResult("text-canary", TEXT, Reason.OK, started=at, duration=0.1)


def evidence(wedged_since: float | None, **kw: object) -> Evidence:
    text = KindEvidence(TEXT, results=(ok(1.0),))
    sections = {toyrule.SECTION.name: toyrule.ToySection(wedged_since)}
    return Evidence(kinds={TEXT: text}, sections=sections, **kw)  # type: ignore[arg-type]


def judge(ev: Evidence, now: float) -> tuple[list[str], bool]:
    state = replace(VerdictState(), epoch=0, startup_passed=True)
    _, verdict = evaluate(state, ev, Policy(), now)
    return [h.kind.value for h in verdict.hangs], verdict.liveness.ok


def test_a_registered_toy_rule_confirms_its_kind_from_its_section(toy_registered: None) -> None:
    assert judge(evidence(10.0), 10.5) == ([], True)  # within its 1 s window
    kinds, live = judge(evidence(10.0), 11.0)
    assert (kinds, live) == (["toy_wedge"], False)
    assert judge(evidence(None), 11.0) == ([], True)


def test_without_its_registration_the_same_evidence_confirms_nothing() -> None:
    assert "toy_wedge" not in RULES
    assert judge(evidence(10.0), 100.0) == ([], True)
    assert toyrule.KIND not in hang_kinds()


def test_the_toy_kind_joins_the_kind_set_and_the_table_while_registered(
    toy_registered: None,
) -> None:
    assert hang_kinds()[-1] == toyrule.KIND
    table = verdict_reference(["structured"])
    row = next(line for line in table.splitlines() if line.startswith("| `toy_wedge`"))
    assert "`toy_window` (1 s)" in row
    assert "asleep or paused" in row


def test_its_gate_turns_it_off_while_asleep(toy_registered: None) -> None:
    asleep = evidence(10.0, lifecycle=Lifecycle(Phase.ASLEEP, 10.0, "/is_sleeping"))
    assert "toy_wedge" not in judge(asleep, 100.0)[0]


def test_the_registry_refuses_a_second_rule_of_the_same_name_or_kind(
    toy_registered: None,
) -> None:
    with pytest.raises(ValueError, match="already registered"):
        register(toyrule.RULE)
    with pytest.raises(ValueError, match="already confirmed by 'toy_wedge'"):
        register(replace(toyrule.RULE, name="toy_again"))


def test_a_provider_section_and_its_status_fragment_come_from_the_same_instant() -> None:
    source = toyrule.ToySource(clock=lambda: 5.0)
    source.wedge()
    sections = gather([source], 7.0)
    source.clear()  # live state moves on; the fragment renders what was judged
    assert fragments([source], sections, 7.0) == {"toy": {"wedged": True, "for": 2.0}}
    with pytest.raises(ValueError, match="two evidence providers named 'toy'"):
        gather([source, source], 7.0)
