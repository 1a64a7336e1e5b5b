"""The partial rule: one data-parallel engine flat while another works.

Data parallelism spreads requests over engines, so one stuck engine leaves
its share hanging forever while the others answer: canaries that land
elsewhere succeed, total progress moves, and the engine rule (rightly) sees a
working server. Judged per engine (vLLM's ``engine`` label) against the
canaries that could have reached it (:mod:`sentinel.verdict.aim`). The
reasoning is in docs/design.md ("Verdict semantics").
"""

from __future__ import annotations

from collections.abc import Sequence

from sentinel.knob import setting
from sentinel.verdict.aim import answered, worked_since
from sentinel.verdict.aim import sends as aimed_sends
from sentinel.verdict.answers import epoch_results, unanswered
from sentinel.verdict.clock import observed
from sentinel.verdict.knobs import HangWindow
from sentinel.verdict.model import Action, EngineProgress, Evidence, Hang, HangKind
from sentinel.verdict.rule import Gate, HangRule
from sentinel.verdict.stall import floor as window_floor


class PartialKnobs(HangWindow):
    """The partial rule's knobs."""

    partial_policy: Action = setting(
        Action.RESTART,
        "One data-parallel engine stuck while the others serve: its share of requests hangs "
        "forever, so restart; unready or alert keep the rest serving.",
    )


def partial_hang(evidence: Evidence, policy: PartialKnobs, now: float) -> Hang | None:
    """One engine's own work flat for the hang window, a canary unanswered, another engine working.

    Data parallelism spreads requests over engines, so one stuck engine
    leaves its share hanging forever while the others answer: canaries that
    land elsewhere succeed, total progress moves, and the engine-hang rule
    (rightly) sees a working server. Per engine (vLLM's ``engine`` label):
    an engine is stuck when a canary that could have gone to it (aimed at
    it, or unaimed) and was sent after it last worked is still unanswered
    after the hang window while another engine worked since that canary was
    sent. An engine works when its own progress vouches for it (beyond
    sentinel's canaries; only its decode progress where it counts first
    tokens, since an engine whose decode is stuck still prefills arrivals)
    or it answers a canary aimed at it. vLLM's balancer steers new requests
    away from an engine whose requests never finish, so only canaries aimed
    at it (the scheduler aims at every engine) reliably reach a stuck one.
    An idle engine is not stuck: it answers the canaries aimed at it. A
    canary aimed at a busy engine and lost behind its queue is no evidence
    against it while its decode keeps moving, and none at all against the
    others. When no engine worked either, it is the whole
    server's hang, which is the engine rule's.
    """
    if len(evidence.engines) < 2 or not evidence.progress_available:
        return None
    enabled = evidence.enabled
    results = epoch_results(evidence, enabled)
    sends = aimed_sends(filter(unanswered, results), enabled)
    answers = answered(results)
    stuck: list[tuple[EngineProgress, float]] = []
    for engine in evidence.engines:
        flat_since = max(
            engine.first_seen_at if engine.vouched_at is None else engine.vouched_at,
            answers.get(engine.engine, float("-inf")),
            window_floor(evidence),
        )
        # Unaimed canaries may have gone to any engine; an aimed one only to its own.
        candidates = [
            sent
            for sent, aim in sends
            if sent >= flat_since and (aim is None or str(aim) == engine.engine)
        ]
        if not candidates:
            continue
        since = min(candidates)
        working = any(
            worked_since(other, since, answers) for other in evidence.engines if other is not engine
        )
        if working and observed(since, now, evidence.unobserved) >= policy.hang_window:
            stuck.append((engine, since))
    if not stuck:
        return None
    since = min(s for _, s in stuck)
    elapsed = observed(since, now, evidence.unobserved)
    named = [e.engine for e, _ in stuck]
    others = [e.engine for e in evidence.engines if e.engine not in named]
    return Hang(
        HangKind.PARTIAL,
        policy.partial_policy,
        f"partial hang: {_engines(named)} made no progress for {elapsed:.0f}s with a canary "
        f"unanswered; other engines progressed ({', '.join(others)})",
        since,
        engines=tuple(int(e) for e in named if e.isdigit()),
    )


def _engines(labels: Sequence[str]) -> str:
    """``engine 1`` or ``engine 1, engine 2``: each stuck engine named the one way bundles read.

    Only stuck engines are named so (the working ones are listed bare), since
    a bundle learns which engine is stuck from the reason alone.
    """
    return ", ".join(f"engine {label}" for label in labels)


RULE = HangRule(
    "partial",
    partial_hang,
    PartialKnobs,
    kinds=(HangKind.PARTIAL,),
    action="partial_policy",
    windows=("hang_window",),
    off_when=frozenset({Gate.STALLED, Gate.COMPILING}),
    evidence="one data-parallel engine's own work flat after a canary that could reach it went "
    "unanswered, while another engine worked",
)
