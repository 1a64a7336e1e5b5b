"""The weight-update bound: a weight transfer that never finished.

While ``vllm:rl_weight_update_operations_in_flight`` is above 0 the server is
held (phase ``paused``, why :data:`WEIGHT_UPDATE_WHY`): vLLM 0.32 counts each
weight-transfer RPC (``/update_weights``, ``/start_weight_update``,
``/finish_weight_update``, ...) in flight for as long as it is awaited, so a
trainer that died mid-transfer leaves the gauge at 1 and the server holding
requests for good. A real update takes seconds to a few minutes; past
``weight_update_bound`` it is a hang kind of its own, named with what it
likely is (docs/design.md, "A lifecycle phase that never ends"). Policy
``unready`` by default: readiness is already red during the hold, and the
hang adds the name, the Event and the bundle; ``restart`` reloads the
weights from disk.

The bound is timed from the update's own start (``Lifecycle.why_since``), not
from a pause that began before it. Readiness names the hold with its age and
bound, and past the bound this rule's hang (:func:`update_word`).
"""

from __future__ import annotations

from typing import Final

from sentinel.knob import DAY, seconds, setting
from sentinel.verdict.clock import observed
from sentinel.verdict.knobs import Knobs
from sentinel.verdict.model import (
    Action,
    Evidence,
    Hang,
    HangKind,
    Lifecycle,
    Phase,
    ProbeAnswer,
)
from sentinel.verdict.rule import HangRule, Point, Readiness, Standing, past_bound

WEIGHT_UPDATE_WHY: Final = "a weight update is in flight"


class WeightUpdateKnobs(Knobs):
    """The weight-update bound's knobs."""

    weight_update_bound: float = seconds(
        300.0,
        "A weight update in flight (vllm:rl_weight_update_operations_in_flight above 0) longer "
        "than this did not end: its trainer may have died mid-transfer.",
        1.0,
        DAY,
    )
    weight_update_policy: Action = setting(
        Action.UNREADY, "What a weight update past its bound does."
    )


def updating_since(life: Lifecycle) -> float | None:
    """When the weight update in flight began (None: none is)."""
    if life.phase is not Phase.PAUSED or life.why != WEIGHT_UPDATE_WHY:
        return None
    return life.since if life.why_since is None else life.why_since


def weight_update_hang(evidence: Evidence, policy: WeightUpdateKnobs, now: float) -> Hang | None:
    """A weight update that outlasted its bound."""
    return past_bound(
        HangKind.WEIGHT_UPDATE,
        policy.weight_update_policy,
        updating_since(evidence.lifecycle),
        policy.weight_update_bound,
        evidence,
        now,
        lambda elapsed: (
            f"weight update in flight for {elapsed:.0f}s: the trainer may have "
            f"died (bound {policy.weight_update_bound:.0f}s)"
        ),
    )


def update_word(standing: Standing, policy: WeightUpdateKnobs, now: float) -> ProbeAnswer | None:
    """Readiness red during the hold, named with its age; past its bound, the hang's reason."""
    evidence = standing.evidence
    life = evidence.lifecycle
    updating = updating_since(life)
    if updating is None:
        return None
    bound = [h for h in standing.hangs if h.kind is HangKind.WEIGHT_UPDATE]
    if bound:
        return ProbeAnswer(False, bound[0].reason)
    took = observed(updating, now, evidence.unobserved)
    bounded = f"(bound {policy.weight_update_bound:.0f}s)"
    return ProbeAnswer(False, f"paused: {life.why} for {took:.0f}s {bounded}")


RULE = HangRule(
    "weight_update",
    weight_update_hang,
    WeightUpdateKnobs,
    kinds=(HangKind.WEIGHT_UPDATE,),
    action="weight_update_policy",
    windows=("weight_update_bound",),
    evidence="a weight update in flight (vLLM's in-flight gauge above 0) past its bound",
    readiness=Readiness(
        Point.STATE,
        update_word,
        "unready while a weight update is in flight, named with its age; past its bound, the hang",
    ),
)
