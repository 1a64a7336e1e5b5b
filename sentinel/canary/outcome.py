"""How a one-shot probe counts a canary result: ok, skipped, inconclusive or fail.

``sentinel probe`` and the exporter judge results alike, so what a dashboard
scraping the exporter calls a failure is what the command prints as one: an
image canary a text-only model rejects as unsupported is a skip (the model
lacks the input, the server is not broken), and a reasoning model that only
thought is no failure either.
"""

from __future__ import annotations

from sentinel.canary.kinds import skips_unsupported
from sentinel.canary.result import CanaryResult, Reason


def outcome(result: CanaryResult) -> str:
    """``ok``, ``skipped`` (the model lacks the kind's input), ``inconclusive`` or ``fail``."""
    if result.ok:
        return "ok"
    if result.reason is Reason.INCONCLUSIVE:
        return "inconclusive"
    if result.reason is Reason.UNSUPPORTED and skips_unsupported(result.kind):
        return "skipped"
    return "fail"
