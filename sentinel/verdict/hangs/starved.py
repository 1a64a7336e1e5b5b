"""The starvation rule: a served canary is not a served user.

A KV cache that leaks (blocks never freed) or a scheduler bug can leave every
normal request waiting while a tiny request at the highest priority is still
admitted: the priority canary passes, the server looks healthy, and its users
wait forever. So: real requests (the waiting gauge, by reason ``capacity``
where the server says, less sentinel's own canaries) shown waiting in every
sample for the hang window, with no real progress (prefill included) since
they were first seen, while a canary succeeded in that time, is a hang of
its own kind. Real completions of any length count as progress here: a
prefill worker fed ``max_tokens: 1`` by a disaggregation proxy finishes only
one-token requests, and finishing them is its queue being served (whether
decode works is the engine rule's question, which one-token work never
answers). A canary that fails too is the engine rule's. The reasoning is
in ``docs/design.md`` ("Verdict semantics").
"""

from __future__ import annotations

from sentinel.knob import setting
from sentinel.verdict.clock import observed
from sentinel.verdict.knobs import HangWindow
from sentinel.verdict.model import Action, Evidence, Hang, HangKind
from sentinel.verdict.rule import Gate, HangRule
from sentinel.verdict.stall import floor


class StarvedKnobs(HangWindow):
    """The starvation rule's knobs."""

    starved_policy: Action = setting(
        Action.RESTART,
        "Starved real traffic (canaries passing): a leaked KV cache or a scheduler admitting "
        "nothing but the canary does not heal itself.",
    )


def starved(evidence: Evidence, policy: StarvedKnobs, now: float) -> Hang | None:
    """Real requests waiting for the hang window, no real progress, canaries passing."""
    since = evidence.waiting_since
    if since is None or not evidence.progress_available:
        return None
    work = evidence.last_decode_at if evidence.decode_available else evidence.last_progress_at
    # A completion of any length, one token included, is the queue being served.
    served_by = (work, evidence.last_prefill_at, evidence.last_real_completion_at)
    progress = (t for t in served_by if t is not None)
    start = max(since, floor(evidence), *progress)
    elapsed = observed(start, now, evidence.unobserved)
    if elapsed < policy.hang_window:
        return None
    served = any(r.ok and r.finished >= start for k in evidence.enabled for r in k.results)
    if not served:
        return None
    return Hang(
        HangKind.STARVED,
        policy.starved_policy,
        f"starved: {evidence.waiting_real:.0f} real requests waiting for {elapsed:.0f}s "
        "with no real progress while canaries pass",
        start,
    )


RULE = HangRule(
    "starved",
    starved,
    StarvedKnobs,
    kinds=(HangKind.STARVED,),
    action="starved_policy",
    windows=("hang_window",),
    off_when=frozenset({Gate.STALLED, Gate.COMPILING}),
    evidence="real requests waiting with no real progress while a priority canary succeeded",
)
