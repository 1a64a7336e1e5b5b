"""The verdict: a pure function from evidence, policy and "now" to kubelet answers.

Nothing here does I/O, reads a clock or touches asyncio: the daemon gathers
:class:`Evidence`, calls :func:`evaluate` with the previous
:class:`VerdictState` and publishes what comes back. That keeps every rule of
docs/design.md's "Verdict semantics" testable with tables and exact times.

The package is split by concern: :mod:`~sentinel.verdict.model` (the
vocabulary), :mod:`~sentinel.verdict.clock` (observed time: sentinel's own
pauses are left out of every window, which pauses and resumes instead of
starting over), :mod:`~sentinel.verdict.hangs` (one module per hang kind,
each declaring its knobs, gates and judge), :mod:`~sentinel.verdict.registry`
(the rules in the order judged; :mod:`~sentinel.verdict.policy` composes
their knobs) and :mod:`~sentinel.verdict.decide` (startup, the restart-loop
brake, liveness and the readiness hysteresis).

* A new server epoch (the server's identity changed) resets everything except
  the brake's memory of real restarts (new epochs that followed a red episode).
* Liveness fails only for confirmed hangs whose action is ``restart``, when
  enforcing, and unless the restart-loop brake is engaged.
* A confirmed ``restart`` hang whose pool's restart budget is exhausted
  (``Evidence.restart_gate`` closed) keeps liveness green and fails readiness,
  naming the budget, until a slot frees.
* Startup passes on the first text canary of the epoch (the server serves);
  readiness fails until every enabled kind passed, on any confirmed ``restart``/``unready``
  hang (unless observe-only), while the brake is engaged, and when recent
  canaries fail or run over their latency SLO (out after ``ready_out_after``
  bad results, back after ``ready_back_after`` good ones).

The face adds what other packages read beside the verdict itself: a cause
compared across restarts (:func:`describe`, :func:`recent`, ``NODE_LIMIT``),
:class:`Ineffective` and the generated rule table (:func:`verdict_reference`).
:class:`SectionKey` types a section of the evidence; each rule's own key
(``SECTION``, ``ENGINE_CPU``, ...) stays at its module, beside the section's
type, where its name is unambiguous.
"""

from sentinel.verdict.cause import NODE_LIMIT, describe, recent
from sentinel.verdict.decide import evaluate
from sentinel.verdict.model import (
    Action,
    EngineProgress,
    Evidence,
    Hang,
    HangKind,
    Ineffective,
    KindEvidence,
    Lifecycle,
    Phase,
    ProbeAnswer,
    RestartGate,
    Verdict,
    VerdictState,
)
from sentinel.verdict.policy import Policy
from sentinel.verdict.registry import hang_kinds
from sentinel.verdict.sections import SectionKey
from sentinel.verdict.table import verdict_reference

__all__ = [
    "NODE_LIMIT",
    "Action",
    "EngineProgress",
    "Evidence",
    "Hang",
    "HangKind",
    "Ineffective",
    "KindEvidence",
    "Lifecycle",
    "Phase",
    "Policy",
    "ProbeAnswer",
    "RestartGate",
    "SectionKey",
    "Verdict",
    "VerdictState",
    "describe",
    "evaluate",
    "hang_kinds",
    "recent",
    "verdict_reference",
]
