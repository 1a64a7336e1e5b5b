"""The dead rule: vLLM's ``/health`` failing or an engine process down past a short grace.

A 404 or 401 on ``/health`` is a server without it, not a dead one; an
engine process stopped, a zombie or gone is named with the data-parallel
engines and tensor-parallel ranks it belongs to. Needs no generation, so it
stays on while the server is asleep or paused.
"""

from __future__ import annotations

from sentinel.knob import seconds, setting
from sentinel.verdict.clock import held_for
from sentinel.verdict.knobs import Knobs
from sentinel.verdict.model import Action, Evidence, Hang, HangKind
from sentinel.verdict.rule import Gate, HangRule


class DeadKnobs(Knobs):
    """The dead rule's knobs."""

    dead_grace: float = seconds(
        5.0, "Engine dead: /health 5xx or an engine process down this long.", 0.0, 3600.0
    )
    stopped_grace: float = seconds(
        3.0,
        "Engine dead sooner: every engine process down is stopped (SIGSTOP, a tracer) this "
        "long; sentinel's own stack dumps never stop it (py-spy --nonblocking).",
        0.0,
        3600.0,
    )
    dead_policy: Action = setting(Action.RESTART, "What a dead engine does.")


def dead(evidence: Evidence, policy: DeadKnobs, now: float) -> Hang | None:
    """vLLM's ``/health`` failing or an engine process down for longer than the grace."""
    stopped = evidence.engine_down_stopped
    causes = (
        (evidence.health_failing_since, policy.dead_grace, "vLLM /health failing", (), ()),
        (
            evidence.engine_down_since,
            min(policy.stopped_grace, policy.dead_grace) if stopped else policy.dead_grace,
            evidence.engine_down_detail or "engine process down",
            evidence.down_engines,
            evidence.down_ranks,
        ),
    )
    for since, grace, what, engines, ranks in causes:
        elapsed = held_for(since, grace, now, evidence.unobserved)
        if elapsed is not None and since is not None:
            reason = f"engine dead: {what} for {elapsed:.0f}s"
            return Hang(HangKind.DEAD, policy.dead_policy, reason, since, engines, ranks)
    return None


RULE = HangRule(
    "dead",
    dead,
    DeadKnobs,
    kinds=(HangKind.DEAD,),
    action="dead_policy",
    windows=("dead_grace", "stopped_grace"),
    evidence="vLLM /health 5xx, or an engine process stopped, a zombie or gone",
    # vLLM 0.33+ keeps a retired rank's API server alive past its engine's end
    # (launcher.should_keep_api_server_alive) until its orchestrator ends it, and its
    # engine shuts down inside the commit that retires it (hangs.scaling.retiring).
    off_when=frozenset({Gate.RETIRED}),
)
