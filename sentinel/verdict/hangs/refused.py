"""The refusal rule: a server refusing on purpose in words nobody taught sentinel.

A fast 503 with a body (or a streamed error event with code 503) is the server
there and declining deliberately (:mod:`sentinel.canary.refusal`): never an
unanswered canary, never an engine hang. Each refusal vLLM is known to send
maps to a state its own rule judges (paused: the lifecycle; faulted, scaling,
retired: theirs). One whose body sentinel does not know is "cannot tell":
readiness red at once with the body quoted (:func:`cannot_tell`, asked after
the hangs), and liveness only past ``refusal_bound``,
since a refusal is a deliberate answer of a release newer than sentinel far
more often than a hang, and every state vLLM bounds itself ends well within
it. The reasoning is in ``docs/design.md`` ("A deliberate refusal is a state").
"""

from __future__ import annotations

from sentinel.canary.refusal import Refusal, RefusalSeen
from sentinel.knob import DAY, seconds, setting
from sentinel.verdict.answers import epoch_results
from sentinel.verdict.clock import observed
from sentinel.verdict.knobs import Knobs
from sentinel.verdict.model import Action, Evidence, Hang, HangKind, ProbeAnswer
from sentinel.verdict.rule import Gate, HangRule, Point, Readiness, Standing, past_bound

# The body quoted in a reason: /status shows reasons whole, and a body is hostile.
QUOTED = 200
# The lifecycle's reason when the server's own /is_paused says so (sentinel.record.lifecycle).
IS_PAUSED_WHY = "/is_paused is true"


class RefusedKnobs(Knobs):
    """The refusal rule's knobs."""

    refusal_bound: float = seconds(
        600.0,
        "A server refusing every canary with a 503 body sentinel does not know (readiness is "
        "red from the first) is a hang past this: longer than every state vLLM bounds itself "
        "(a fault-tolerance recovery, 120 s; an elastic EP scale, about 175 s; a weight "
        "update, weight_update_bound), twice the 5 minutes a new release's unnamed state is "
        "held, and short enough that a server stuck refusing is not left out of service for long.",
        1.0,
        DAY,
    )
    refusal_policy: Action = setting(
        Action.RESTART, "What refusing with an unknown body past refusal_bound does."
    )


def current_refusal(evidence: Evidence, refusal: Refusal) -> RefusalSeen | None:
    """The run of ``refusal`` if the newest canary answer of this epoch belongs to it."""
    seen = evidence.refusals.get(refusal)
    if seen is None:
        return None
    newest = max((r.finished for r in epoch_results(evidence, evidence.enabled)), default=None)
    return seen if newest is None or seen.at >= newest else None


def server_paused(evidence: Evidence) -> bool:
    """Whether the server itself says it is paused, so its engine loaded and answers.

    Its newest canary answer is a paused refusal, or its ``/is_paused`` is
    true; never sentinel's maintenance window or the weight-update gauge,
    which say nothing of a model that finished loading.
    """
    paused = current_refusal(evidence, Refusal.PAUSED) is not None
    return paused or evidence.lifecycle.why == IS_PAUSED_WHY


def quoted(seen: RefusalSeen) -> str:
    """The refusal's status and body as a reason quotes them."""
    status = f"HTTP {seen.status}" if seen.status is not None else "a refusal"
    body = seen.message[:QUOTED] or "(no message)"
    return f"{status} from {seen.source or 'the server'}: {body!r}"


def unknown_refusal(evidence: Evidence, bound: float, now: float) -> str | None:
    """Readiness's reason while the server refuses in unknown words (None: it does not)."""
    seen = current_refusal(evidence, Refusal.UNKNOWN)
    if seen is None:
        return None
    took = observed(seen.since, now, evidence.unobserved)
    return (
        f"cannot tell: refusing with a body sentinel does not know for {took:.0f}s "
        f"(a hang past {bound:.0f}s): {quoted(seen)}"
    )


def cannot_tell(standing: Standing, policy: RefusedKnobs, now: float) -> ProbeAnswer | None:
    """Readiness red at once while the server refuses in unknown words (None: it does not)."""
    said = unknown_refusal(standing.evidence, policy.refusal_bound, now)
    return None if said is None else ProbeAnswer(False, said)


def refused_too_long(evidence: Evidence, policy: RefusedKnobs, now: float) -> Hang | None:
    """An unknown refusal that outlasted its bound."""
    seen = current_refusal(evidence, Refusal.UNKNOWN)
    if seen is None:
        return None
    return past_bound(
        HangKind.REFUSED,
        policy.refusal_policy,
        seen.since,
        policy.refusal_bound,
        evidence,
        now,
        lambda elapsed: (
            f"refusing with a body sentinel does not know for {elapsed:.0f}s, "
            f"past {policy.refusal_bound:.0f}s: {quoted(seen)}"
        ),
    )


RULE = HangRule(
    "refused",
    refused_too_long,
    RefusedKnobs,
    kinds=(HangKind.REFUSED,),
    action="refusal_policy",
    windows=("refusal_bound",),
    # Asleep or paused, a refusal is the state's own answer (a sleep answering 503).
    off_when=frozenset({Gate.STALLED}),
    evidence="every canary refused with a 503 body (or streamed error code 503) sentinel "
    "does not know, past its bound (readiness is red from the first)",
    readiness=Readiness(
        Point.CANNOT_TELL,
        cannot_tell,
        "cannot tell while refused in words sentinel does not know, the body quoted",
    ),
)
