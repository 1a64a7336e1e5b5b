"""The listener-down rule: connections refused while the API-server process lives.

A refused connection says nothing listens; with the API-server process alive
(seen in the process table) its listener is gone for good. Only after
startup: a server loading its model refuses connections by design.
"""

from __future__ import annotations

from sentinel.knob import DAY, seconds, setting
from sentinel.verdict.knobs import Knobs
from sentinel.verdict.model import Action, Evidence, Hang, HangKind
from sentinel.verdict.rule import Gate, HangRule, past_bound


class ListenerKnobs(Knobs):
    """The listener-down rule's knobs."""

    listener_grace: float = seconds(
        30.0, "Listener down: connections refused this long, the API server alive.", 1.0, DAY
    )
    listener_policy: Action = setting(Action.RESTART, "What a listener down does.")


def listener_down(evidence: Evidence, policy: ListenerKnobs, now: float) -> Hang | None:
    """Connections refused past the grace while the API-server process lives."""
    if evidence.api_alive is not True:
        return None
    return past_bound(
        HangKind.LISTENER_DOWN,
        policy.listener_policy,
        evidence.refused_since,
        policy.listener_grace,
        evidence,
        now,
        lambda elapsed: (
            f"listener down: connections refused for {elapsed:.0f}s while the API server lives"
        ),
    )


RULE = HangRule(
    "listener_down",
    listener_down,
    ListenerKnobs,
    kinds=(HangKind.LISTENER_DOWN,),
    action="listener_policy",
    windows=("listener_grace",),
    off_when=frozenset({Gate.BEFORE_STARTUP}),
    evidence="connections to the server refused while its API-server process lives",
)
