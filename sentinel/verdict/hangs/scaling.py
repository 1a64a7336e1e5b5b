"""The scale rules: an elastic expert-parallel scale that failed, or did not end.

While ``POST /scale_elastic_ep`` runs, vLLM's scaling middleware answers 503
"The model is currently scaling" on every path it gates (every path in 0.32;
all but ``/health`` and ``POST /is_scaling_elastic_ep`` in 0.33+), so the
canaries are refused (``docs/design.md``, "Elastic expert-parallel scaling"):
a legitimate stall (phase ``scaling``: the generation rules are off and
readiness is red), up to the drain timeout (120 s by default) plus the commit
(about 55 s). Two ways it is a hang, both policy ``restart``, since the server
refuses every request meanwhile:

* the status route says ``phase: failed`` while the gate is still up: vLLM
  lifts the gate only after a commit that succeeded, so the refusals never
  end; confirmed after ``scale_failed_grace``, with vLLM's error quoted;
* the scale lasts past ``scale_bound``: a server stuck mid-scale (a commit
  that never returns, or 0.32, whose route names no phase).

A rank a scale-down removes is marked retired *before* its commit returns
(``AsyncLLM._scale_elastic_ep``): while the status route says the scale
still runs it is a scale too (:data:`RETIRING_WHY`), timed from the gate's
first sighting, so a commit that never returns is red at ``scale_bound``;
its engine shuts down inside that commit, so the dead rule stays off
(:func:`retiring`). While a scale runs, readiness names it with its age
(:func:`scaling_word`), ahead of the stall and of any hang.
"""

from __future__ import annotations

from sentinel.knob import DAY, seconds, setting
from sentinel.verdict.clock import held_for, observed
from sentinel.verdict.knobs import Knobs
from sentinel.verdict.model import Action, Evidence, Hang, HangKind, Lifecycle, Phase, ProbeAnswer
from sentinel.verdict.rule import HangRule, Point, Readiness, Standing, past_bound

#: What a failed scale's lifecycle ``why`` begins with (sentinel.record.lifecycle).
SCALE_FAILED_WHY = "elastic EP scale failed"
#: What a scale's ``why`` begins with on a rank marked retired before its commit returned.
RETIRING_WHY = "this data-parallel rank is being retired"


class ScalingKnobs(Knobs):
    """The scale rules' knobs."""

    scale_bound: float = seconds(
        240.0,
        "An elastic EP scale (vLLM's middleware answering 503 'currently scaling') longer "
        "than this did not end: a hang kind of its own. Covers the scale route's default "
        "drain_timeout (120 s) plus a commit (about 55 s) with a minute to spare; raise it "
        "where scales are asked with a longer drain_timeout.",
        1.0,
        DAY,
    )
    scale_failed_grace: float = seconds(
        10.0,
        "A scale whose status says phase 'failed' while the scaling gate is still up (vLLM "
        "lifts it only after a commit that succeeded) is a hang after this long.",
        0.0,
        3600.0,
    )
    scaling_policy: Action = setting(
        Action.RESTART, "What a failed scale, or one past its bound, does."
    )


def failed_since(life: Lifecycle) -> float | None:
    """Since when a failed scale has held the gate up (None: none does)."""
    if life.phase is not Phase.SCALING or not life.why.startswith(SCALE_FAILED_WHY):
        return None
    return life.since if life.why_since is None else life.why_since


def retiring(life: Lifecycle) -> bool:
    """Whether a scale is retiring this rank (its engine shuts down inside the commit)."""
    return life.phase is Phase.SCALING and life.why.startswith(RETIRING_WHY)


def scale_bound(evidence: Evidence, policy: ScalingKnobs, now: float) -> Hang | None:
    """A scale that failed with its gate up, or outlasted its bound."""
    life = evidence.lifecycle
    if life.phase is not Phase.SCALING:
        return None
    failed = failed_since(life)
    if failed is not None:
        took = held_for(failed, policy.scale_failed_grace, now, evidence.unobserved)
        if took is not None:
            reason = f"{life.why} ({took:.0f}s): every request is refused until a restart"
            return Hang(HangKind.SCALING, policy.scaling_policy, reason, failed)
    return past_bound(
        HangKind.SCALING,
        policy.scaling_policy,
        life.since,
        policy.scale_bound,
        evidence,
        now,
        lambda elapsed: (
            f"scaling (elastic EP) for {elapsed:.0f}s: the scale did not end "
            f"within {policy.scale_bound:.0f}s ({life.why})"
        ),
    )


def scaling_word(standing: Standing, policy: ScalingKnobs, now: float) -> ProbeAnswer | None:
    """Readiness red while a scale runs, named with its age (None: no scale runs)."""
    evidence = standing.evidence
    life = evidence.lifecycle
    if life.phase is not Phase.SCALING:
        return None
    took = observed(life.since, now, evidence.unobserved)
    return ProbeAnswer(False, f"scaling (elastic EP) for {took:.0f}s: {life.why}")


RULE = HangRule(
    "scaling",
    scale_bound,
    ScalingKnobs,
    kinds=(HangKind.SCALING,),
    action="scaling_policy",
    windows=("scale_bound", "scale_failed_grace"),
    evidence="an elastic EP scale (vLLM's middleware answering 503 'currently scaling') "
    "whose status says failed with the gate still up, or past its bound",
    readiness=Readiness(
        Point.STATE, scaling_word, "unready while a scale runs, named with its age"
    ),
)
