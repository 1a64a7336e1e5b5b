"""The one registry of hang rules, in the order they are judged.

:func:`confirmed_hangs` runs every registered rule that is not off (its
declared :class:`~sentinel.verdict.rule.Gate` in force), and
:func:`hang_kinds` is the closed set of kinds they confirm; so a hang kind
added from outside sentinel is one module and one :func:`register` call,
with no edit to the evaluation, the metrics or ``docs/verdict.md``; so is a
state readiness names: :func:`readiness_word` asks the rules' declared words
(:class:`~sentinel.verdict.rule.Readiness`) in the same order.

What a canary's failure means is decided once (:mod:`sentinel.verdict.answers`).
A canary aimed at one data-parallel engine and left unanswered is evidence
against that engine only (:mod:`sentinel.verdict.aim`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

from sentinel.verdict.hangs import (
    api_server,
    broken,
    corrupt,
    dead,
    degenerate,
    engine,
    fault_tolerance,
    kv_transfer,
    listener_down,
    partial,
    path,
    refused,
    scaling,
    stalled,
    starved,
    wake,
    weight_update,
)
from sentinel.verdict.hangs.api_server import api_stuck_since
from sentinel.verdict.knobs import Knobs
from sentinel.verdict.model import Evidence, Hang, HangKind, Phase, ProbeAnswer
from sentinel.verdict.policy import Policy
from sentinel.verdict.rule import Gate, HangRule, Point, Standing
from sentinel.verdict.stall import compiling

_REGISTRY: dict[str, HangRule[Any]] = {}

RULES: Mapping[str, HangRule[Any]] = MappingProxyType(_REGISTRY)
"""Every registered rule by name, in the order judged (a read-only view of the registry)."""


def register(rule: HangRule[Any]) -> HangRule[Any]:
    """Add a rule after those registered; refused when its name or one of its kinds is taken."""
    if rule.name in _REGISTRY:
        raise ValueError(f"hang rule {rule.name!r} is already registered")
    taken = {kind: other.name for other in _REGISTRY.values() for kind in other.kinds}
    for kind in rule.kinds:
        if kind in taken:
            raise ValueError(f"hang kind {kind.value!r} is already confirmed by {taken[kind]!r}")
    _REGISTRY[rule.name] = rule
    return rule


def unregister(name: str) -> None:
    """Remove a rule (tests that registered one restore the registry with this)."""
    del _REGISTRY[name]


def gates(evidence: Evidence, policy: Policy, now: float, *, startup_passed: bool) -> set[Gate]:
    """The states in force at ``now`` that turn rules off."""
    found: set[Gate] = set()
    if evidence.lifecycle.stalled:
        found.add(Gate.STALLED)
    if evidence.lifecycle.phase is Phase.RETIRED or scaling.retiring(evidence.lifecycle):
        found.add(Gate.RETIRED)
    if compiling(evidence, policy.compile_grace, now, policy.compile_linger):
        found.add(Gate.COMPILING)
    if api_stuck_since(evidence) is not None:
        found.add(Gate.API_STUCK)
    if not startup_passed:
        found.add(Gate.BEFORE_STARTUP)
    return found


def knobs_for(rule: HangRule[Any], policy: Policy) -> Knobs:
    """The rule's knobs from the policy; a rule registered from outside gets its own defaults."""
    knobs: type[Knobs] = rule.knobs
    if isinstance(policy, knobs):
        return policy
    given = {n: getattr(policy, n) for n in knobs.model_fields if hasattr(policy, n)}
    return knobs(**given)


def confirmed_hangs(
    evidence: Evidence, policy: Policy, now: float, *, startup_passed: bool
) -> Iterator[Hang]:
    """Every hang confirmed at ``now``, in the rules' order.

    A path kind that has not worked in this epoch is never hung (its rule
    says so); the engine-side rules need no startup: the kubelet ignores
    liveness until its own startup probe passed, and a sidecar restarted
    beside a server that hung meanwhile must still see the hang.
    """
    off = gates(evidence, policy, now, startup_passed=startup_passed)
    for rule in _REGISTRY.values():
        if not rule.off_when & off:
            yield from rule.findings(evidence, knobs_for(rule, policy), now)


def readiness_word(at: Point, standing: Standing, policy: Policy, now: float) -> ProbeAnswer | None:
    """The first registered rule's word on readiness at ``at`` (None: no rule has one).

    Among the built-in words at :attr:`Point.STATE`, a weight update's hold
    (phase ``paused``) and a scale (phase ``scaling``) never speak together,
    and the idle sleep's word, registered after both, yields to either.
    """
    for rule in _REGISTRY.values():
        said = rule.readiness
        if said is not None and said.at is at:
            answer = said.word(standing, knobs_for(rule, policy), now)
            if answer is not None:
                return answer
    return None


def served_since_resume(evidence: Evidence) -> bool:
    """Whether a rule says the server just served a request after a resume (a request woke it)."""
    words = (rule.readiness for rule in _REGISTRY.values())
    return any(w is not None and w.served is not None and w.served(evidence) for w in words)


def hang_kinds(paths: Iterable[str] = ()) -> tuple[HangKind, ...]:
    """Every hang kind the registered rules confirm, a path rule's once per path kind given."""
    found: list[HangKind] = []
    for rule in _REGISTRY.values():
        found += [HangKind(p) for p in paths] if rule.per_path else list(rule.kinds)
    return tuple(dict.fromkeys(found))


for _module in (
    engine,
    partial,
    starved,
    path,
    corrupt,
    degenerate,
    dead,
    broken,
    listener_down,
    api_server,
    stalled,
    weight_update,
    scaling,
    kv_transfer,
    wake,
    fault_tolerance,
    refused,
):
    register(_module.RULE)
