"""The scale-bound rule: an elastic expert-parallel scale that did not end.

While ``POST /scale_elastic_ep`` runs, vLLM's scaling middleware answers
every path, ``/health`` and the canaries' included, with 503 "The model is
currently scaling" (``docs/design.md``, "Elastic expert-parallel scaling"):
a legitimate stall (phase ``scaling``: the generation rules are off and
readiness is red), which takes 40-55 s on a real fleet. One that lasts past
``scale_bound`` is a server stuck mid-scale, and every request it gets is
refused meanwhile: policy ``restart``.
"""

from __future__ import annotations

from sentinel.knob import DAY, seconds, setting
from sentinel.verdict.clock import held_for
from sentinel.verdict.knobs import Knobs
from sentinel.verdict.model import Action, Evidence, Hang, HangKind, Phase
from sentinel.verdict.rule import HangRule


class ScalingKnobs(Knobs):
    """The scale-bound rule's knobs."""

    scale_bound: float = seconds(
        180.0,
        "An elastic EP scale (vLLM answering every path 503, 'currently scaling') longer "
        "than this did not end: a hang kind of its own.",
        1.0,
        DAY,
    )
    scaling_policy: Action = setting(Action.RESTART, "What a scale past its bound does.")


def scale_bound(evidence: Evidence, policy: ScalingKnobs, now: float) -> Hang | None:
    """A scale that outlasted its bound."""
    life = evidence.lifecycle
    if life.phase is not Phase.SCALING:
        return None
    elapsed = held_for(life.since, policy.scale_bound, now, evidence.unobserved)
    if elapsed is None:
        return None
    reason = (
        f"scaling (elastic EP) for {elapsed:.0f}s: the scale did not end within "
        f"{policy.scale_bound:.0f}s ({life.why})"
    )
    return Hang(HangKind.SCALING, policy.scaling_policy, reason, life.since)


RULE = HangRule(
    "scaling",
    scale_bound,
    ScalingKnobs,
    kinds=(HangKind.SCALING,),
    action="scaling_policy",
    windows=("scale_bound",),
    evidence="an elastic EP scale (every path answering vLLM's 'currently scaling' 503) "
    "past its bound",
)
