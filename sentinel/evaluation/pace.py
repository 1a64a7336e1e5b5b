"""How often the verdict is judged: at every tick while anything is in play.

A verdict changes without new evidence only when a window ends, and every
window runs on something in play: a canary in flight or failed, work the
server shows, a failing poll, a stopped or refused process, a lifecycle
phase, an answer already red. While none is, the verdict is judged every
``eval_quiet_interval`` (2 s) instead of every ``eval_interval`` (0.5 s); a
canary leaving brings the next tick's judgement at once, and anything the
quiet judgement finds in play brings back the full pace. Nothing is lost by the
wait: every window counts from when its evidence was seen, not from when it
was judged, and the shortest (``stopped_grace``, 3 s) outlasts a quiet interval
and a tick. Where the server's queue cannot be read (no ``/metrics``), nothing
is ever quiet.
"""

from __future__ import annotations

from sentinel.verdict import Evidence, Verdict
from sentinel.verdict.hangs.api_server import api_stuck_since
from sentinel.verdict.stall import COMPILE, CompileSection


def in_play(evidence: Evidence, verdict: Verdict) -> str | None:
    """What keeps the verdict at the full pace (None: nothing is in play)."""
    if verdict.hangs or not (verdict.liveness.ok and verdict.readiness.ok and verdict.startup.ok):
        return "an answer is red"
    if evidence.lifecycle.stalled:
        return f"the server is {evidence.lifecycle.phase.value}"
    failing = {
        "an engine process down": evidence.engine_down_since,
        "vLLM /health failing": evidence.health_failing_since,
        "connections refused": evidence.refused_since,
        "real requests waiting": evidence.waiting_since,
        "a compiler busy": (evidence.section(COMPILE) or CompileSection()).since,
        "an API-server process stuck": api_stuck_since(evidence),
    }
    for what, since in failing.items():
        if since is not None:
            return what
    if not evidence.queue_empty:
        return "work shown, or the queue unknown"
    for kind in evidence.kinds.values():
        if kind.outstanding:
            return f"a {kind.kind} canary in flight"
        if kind.enabled and kind.results and not kind.results[-1].ok:
            return f"the last {kind.kind} canary failed"
    return None
