"""The still-engine rule: an engine hang confirmed sooner than the hang window allows.

Where vLLM exposes the tokens its engine steps process, every step that
yields a token moves a work counter, and every step refreshes the running and
waiting gauges; so a canary that waited with no counter moving and both
gauges at 0 has a stopped engine loop behind it. docs/design.md's engine-hang rule keeps its window
for every other shape (a busy-looking server, one whose decode alone is
stuck, one whose evidence lapsed); this one only confirms sooner.
"""

from __future__ import annotations

from collections.abc import Sequence

from sentinel.canary.kinds import is_path
from sentinel.canary.result import CanaryResult, Reason
from sentinel.verdict.aim import answered, sends, server_wide
from sentinel.verdict.clock import observed
from sentinel.verdict.model import Evidence, Hang, HangKind, KindEvidence, Policy


def still_engine(
    evidence: Evidence,
    enabled: Sequence[KindEvidence],
    results: Sequence[CanaryResult],
    last_success: float,
    policy: Policy,
    now: float,
) -> Hang | None:
    """A text canary that waited the step window while the engine took not one step.

    Where tokens processed by engine steps are exposed and were seen moving in
    this epoch, every engine step that yields a token moves a work counter, a
    canary's own first token included: a healthy engine serving a short
    request yields one within a fraction of a second, a slow one too (2 s per
    token is a token every 2 s), and a busy one's running requests keep its
    counters moving whatever the canary's place in the queue. So a canary
    that waited this long with no counter moving at all, sentinel's own work
    included, has a stopped engine loop behind it, and the whole hang window
    need not pass.

    Only while the engine's running and waiting gauges are both 0, so it does
    not even show the canary it was sent: vLLM records no counter for a step
    that produced no token, so a healthy engine prefilling one long prompt in
    chunks moves nothing for as long as that takes and a canary waits behind
    it, but such an engine refreshes its gauges every step and shows both.
    An engine that hung with requests in it (its gauges frozen above 0) is
    left to the hang window.

    Only what samples covered counts (from the send to the newest sample),
    only canaries that waited (in flight or timed out: a fast failure may
    never have reached the engine), and only text canaries: a path canary may
    wait in grammar compilation or image preprocessing, before the engine,
    while the engine idles; its path has its own rule.
    """
    if not evidence.steps_available or not evidence.queue_empty:
        return None
    if evidence.last_step_at is None or evidence.sampled_at is None:
        return None  # never seen beating: a heartbeat that may not be one
    resumed = evidence.lifecycle.resumed_at
    floor = max(
        last_success,
        evidence.last_step_at,
        evidence.epoch_started,
        float("-inf") if resumed is None else resumed,
    )
    waited = sends(
        (r for r in results if r.reason is Reason.TIMEOUT and not is_path(r.kind)),
        (k for k in enabled if not is_path(k.kind)),
    )
    candidates = server_wide(evidence, waited, floor, answered(results))
    if not candidates:
        return None
    since = min(candidates)
    elapsed = observed(since, min(now, evidence.sampled_at), evidence.unobserved)
    if elapsed < min(policy.step_window, policy.hang_window):
        return None
    return Hang(
        HangKind.ENGINE,
        policy.engine_policy,
        f"engine hang: canary unanswered for {elapsed:.0f}s with no engine step at all",
        since,
    )
