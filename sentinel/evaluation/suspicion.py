"""What is worth a diagnostics capture before a hang is confirmed (a suspicion).

A confirmed hang always is; before one, an engine process down, vLLM's
``/health`` failing, or a canary that missed its deadline while the engine it
waited on did no real work since it was sent. A canary queued behind work the
engine was seen doing is load, and a busy server is not captured again and
again for it.
"""

from __future__ import annotations

from sentinel.canary.result import Reason
from sentinel.verdict import Evidence, Verdict


def suspicion(evidence: Evidence, verdict: Verdict) -> tuple[str, str] | None:
    """Why a hang is suspected now (a trigger for diagnostics), or None."""
    if verdict.hangs:
        hang = verdict.hangs[0]
        return f"{hang.kind}-hang", hang.reason
    if evidence.engine_down_since is not None:
        return "engine-down", evidence.engine_down_detail or "engine process down"
    if evidence.health_failing_since is not None:
        return "vllm-health-failing", "vLLM /health is failing"
    for kind in evidence.kinds.values():
        if kind.enabled and kind.results and kind.results[-1].reason is Reason.TIMEOUT:
            # A canary aimed at one data-parallel engine names it: the bundle judges its processes.
            missed = kind.results[-1]
            if vouched_after(evidence, missed.engine, missed.started):
                continue  # queued behind work its engine was seen doing: load, not a hang
            aimed = "" if missed.engine is None else f" aimed at engine {missed.engine}"
            return "missed-deadline", f"a {kind.kind} canary{aimed} missed its deadline"
    return None


def vouched_after(evidence: Evidence, engine: int | None, since: float) -> bool:
    """Whether real work of ``engine`` (None: the server's) moved after ``since``.

    A canary that missed its deadline while the engine it waited on did real
    work was queued behind load: no diagnostics are worth a capture for it.
    One engine of several is vouched for by its own counters only.
    """
    if evidence.engines:
        own = next((e for e in evidence.engines if e.engine == str(engine)), None)
        at = None if own is None else own.vouched_at
    elif evidence.decode_available:
        at = evidence.last_decode_at
    else:
        at = evidence.last_progress_at
    return at is not None and at > since
