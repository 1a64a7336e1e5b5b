"""How a one-shot probe counts a canary result: ok, skipped, inconclusive or fail.

``sentinel probe`` and the exporter judge results alike, so what a dashboard
scraping the exporter calls a failure is what the command prints as one: a
kind the server says it cannot do (an image refused by a text-only model,
structured outputs or log-probabilities it does not offer, an endpoint it
does not have) is a skip, the model lacks the input and the server is not
broken, and a reasoning model that only thought is no failure either. Under
``strict`` (``probe --strict``, an exporter module's ``strict: true``) a
skip fails. The text canary is never skipped: it is the liveness proof.
"""

from __future__ import annotations

from sentinel.canary.kinds import skips_unsupported
from sentinel.canary.result import CanaryResult, Reason


def outcome(result: CanaryResult, *, strict: bool = False) -> str:
    """``ok``, ``skipped`` (the server lacks the kind), ``inconclusive`` or ``fail``."""
    if result.ok:
        return "ok"
    if result.reason is Reason.INCONCLUSIVE:
        return "inconclusive"
    if result.reason is Reason.UNSUPPORTED and skips_unsupported(result.kind) and not strict:
        return "skipped"
    return "fail"
