"""Aimed canaries: which data-parallel engine an answer or a silence speaks for.

A canary aimed at one engine (``X-data-parallel-rank``) and left unanswered
is evidence against that engine alone; one answered proves that engine
worked. An engine also *worked* when its own progress vouched for it: its
decode progress where it counts first tokens, beyond sentinel's own
canaries (:attr:`~sentinel.verdict.model.EngineProgress.vouched_at`). Since
its canaries' work no longer shows in that progress, their answers speak for
an idle engine instead. Pure functions for :mod:`sentinel.verdict.rules`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from sentinel.canary.result import CanaryResult
from sentinel.verdict.model import EngineProgress, Evidence, KindEvidence


def sends(
    results: Iterable[CanaryResult], kinds: Iterable[KindEvidence]
) -> list[tuple[float, int | None]]:
    """(send time, engine aimed at or None) of ``results`` and of ``kinds``' canaries in flight."""
    found: list[tuple[float, int | None]] = [(r.started, r.engine) for r in results]
    for k in kinds:
        aims = k.outstanding_engines
        found += [
            (sent, aims[i] if i < len(aims) else None) for i, sent in enumerate(k.outstanding)
        ]
    return found


def server_wide(
    evidence: Evidence,
    sends: Sequence[tuple[float, int | None]],
    floor: float,
    answers: Mapping[str, float],
) -> list[float]:
    """The unanswered sends since ``floor`` that speak for the whole server.

    Unaimed canaries always do. One aimed at an engine speaks for that engine
    only, so aimed ones count once every engine has left one unanswered (while
    no other engine worked after it): then no engine answers at all. Without
    per-engine evidence (one engine, or no fresh sample) every send counts.
    """
    fresh = [(sent, aim) for sent, aim in sends if sent >= floor]
    labels = {e.engine for e in evidence.engines}
    if len(labels) < 2:
        return [sent for sent, _ in fresh]
    unaimed = [sent for sent, aim in fresh if aim is None]
    aimed = [
        (sent, aim)
        for sent, aim in fresh
        if aim is not None and not _answered_elsewhere(evidence, aim, sent, answers)
    ]
    if labels <= {str(aim) for _, aim in aimed}:
        return unaimed + [sent for sent, _ in aimed]
    return unaimed


def _answered_elsewhere(
    evidence: Evidence, aim: int | None, sent: float, answers: Mapping[str, float]
) -> bool:
    """Whether a canary aimed at engine ``aim`` says nothing of the whole server.

    It was left unanswered by its own engine while another engine's work
    moved after it was sent: that is one engine's trouble (the partial
    rule's), not the server's. Unaimed canaries always speak for the server.
    """
    if aim is None or len(evidence.engines) < 2:
        return False
    return any(
        worked_since(other, sent, answers) for other in evidence.engines if other.engine != str(aim)
    )


def answered(results: Iterable[CanaryResult]) -> dict[str, float]:
    """Per engine label, when a canary aimed at it was last answered."""
    last: dict[str, float] = {}
    for r in results:
        if r.ok and r.engine is not None:
            label = str(r.engine)
            last[label] = max(last.get(label, r.finished), r.finished)
    return last


def worked_since(engine: EngineProgress, at: float, answers: Mapping[str, float]) -> bool:
    """Whether ``engine`` vouched for itself or answered a canary aimed at it since ``at``."""
    vouched = engine.vouched_at
    return (vouched is not None and vouched >= at) or answers.get(engine.engine, -1e300) >= at
