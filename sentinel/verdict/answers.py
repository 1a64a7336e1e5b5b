"""What a canary's failure means, decided once for every rule.

* *unanswered* (engine hang): it timed out, answered 5xx, was reset or came
  back with zero generated tokens; it proves the engine did not serve it.
  A refusal is not (nothing listened: the *listener down* rule), nor is a
  reply that generated tokens but failed validation (the engine worked).
* *fast failure* (broken): an answer that came quickly without a generated
  token (5xx, reset, empty reply, garbage).
"""

from __future__ import annotations

from collections.abc import Sequence

from sentinel.canary.result import CanaryResult, Reason
from sentinel.verdict.model import Evidence, KindEvidence

# A refusal at vLLM's admission cap is one too: a hung engine fills its queue to the
# cap, then every arrival is refused in milliseconds (a working one completes work).
FAST_FAILURES = frozenset(
    {Reason.HTTP_STATUS, Reason.PROTOCOL, Reason.EMPTY, Reason.BAD_BODY, Reason.ADMISSION}
)
UNANSWERED = FAST_FAILURES | {Reason.TIMEOUT}


def unanswered(result: CanaryResult) -> bool:
    """Whether a result proves the engine did not serve the canary."""
    if result.reason is Reason.HTTP_STATUS:
        return result.http_status is None or result.http_status >= 500
    return result.reason in UNANSWERED


def fast_failure(result: CanaryResult) -> bool:
    """A quick answer without any generated token (5xx, reset, empty, garbage)."""
    if result.reason is Reason.HTTP_STATUS:
        return result.http_status is None or result.http_status >= 500
    return result.reason in FAST_FAILURES


def epoch_results(evidence: Evidence, enabled: Sequence[KindEvidence]) -> list[CanaryResult]:
    """Every result of the enabled kinds sent in the current server epoch."""
    return [r for k in enabled for r in k.results if r.started >= evidence.epoch_started]


def or_never(at: float | None) -> float:
    """A moment, with None as "never" (minus infinity) for max() over floors."""
    return float("-inf") if at is None else at
