"""Own work: what one of sentinel's canaries can cause, and what its reply says it caused.

Pure bookkeeping for :mod:`sentinel.progress.tracker`, which charges every
counter delta to these credits (:mod:`sentinel.canary.credit`) before anything
is progress. While a canary is in flight its credit is the most it can cause:
its prompt, its whole reply, the tokens its steps process, its completions,
and any side request it may make (the multimodal baseline). Once it ended,
:func:`settle` sets the credit to what it did cause: its reply's usage, a
cut-off stream's tokens received, the side request it made, and a request
that answered counted completed however it was judged. What a credit had
charged beyond that is given back by the tracker (real work, a sample late).
"""

from __future__ import annotations

from collections.abc import Mapping

from sentinel.canary.credit import Credit
from sentinel.canary.result import CanaryResult, Reason
from sentinel.progress.work import DECODE_COMPLETIONS, DECODE_TOKENS, WORK_COUNTERS

_JUDGED_REPLIES = frozenset(
    {Reason.OK, Reason.EMPTY, Reason.SCHEMA, Reason.IMAGE_NOT_CONSUMED, Reason.INCONCLUSIVE}
)
"""Outcomes judged on a whole reply: the request completed in the engine, whatever the verdict."""

SIDE_REQUESTS = "side_requests"
"""Budget key: side requests a canary may make beside its own (the multimodal baseline)."""


def canary_budget(
    *,
    reply_tokens: float,
    prompt_tokens: float,
    completes: bool = True,
    requests: int = 1,
    side_requests: int = 0,
) -> dict[str, float]:
    """The most work one canary can cause, per work counter.

    ``requests``: the engine requests it makes (a completions prompt list is
    one per prompt); the token figures are their sums. ``side_requests``: the
    side requests it may make (the multimodal baseline, the canary's prompt
    without its image and one token), listed under :data:`SIDE_REQUESTS`; the
    figures here do not include them.
    """
    done = float(requests) if completes else 0.0
    return {
        "generation_tokens": reply_tokens,
        DECODE_TOKENS: max(reply_tokens - requests, 0.0),
        "prompt_tokens": prompt_tokens,
        # An engine step processes a canary's prompt (prefill) and each token it decodes.
        "engine_tokens": reply_tokens + prompt_tokens,
        "completions": done,
        DECODE_COMPLETIONS: done if reply_tokens > requests else 0.0,
        SIDE_REQUESTS: float(side_requests),
    }


def in_flight(budget: Mapping[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """A credit's allowance while its canary runs, and the side request's share of it."""
    allowed = {k: float(budget.get(k, 0.0)) for k in WORK_COUNTERS}
    sides = float(budget.get(SIDE_REQUESTS, 0.0))
    requests = max(allowed["completions"], 1.0)
    prompt = allowed["prompt_tokens"] / requests  # a side request: one prompt, one token
    side = {
        "prompt_tokens": sides * prompt,
        "generation_tokens": sides,
        "engine_tokens": sides * (prompt + 1.0),
        "completions": sides,
    }
    for key, most in side.items():
        allowed[key] += most
    return allowed, side


def settle(credit: Credit, result: CanaryResult) -> None:
    """The credit of a canary that ended becomes what it caused (see the module docstring)."""
    requests = credit.requests
    for key, most in credit.side.items():  # the side request's, if made, is added last
        credit.set(key, max(credit.allowed.get(key, 0.0) - most, 0.0))
    if result.completion_tokens is None and result.reason not in _JUDGED_REPLIES:
        # No reply: the request was cut off (a client abort is no success).
        credit.set("completions", 0.0)
        credit.set(DECODE_COMPLETIONS, 0.0)
    else:  # one that answered completed in the engine, however it was judged
        credit.set("completions", requests)
    if result.completion_tokens is None and result.tokens_received is not None:
        # A stream cut off: it caused what it received and, per request, at
        # most one token still on its way; the rest of its reply never was.
        received = float(result.tokens_received)
        credit.cap("generation_tokens", received + requests)
        credit.cap(DECODE_TOKENS, received)
        prompt = credit.allowed.get("prompt_tokens", 0.0)
        credit.cap("engine_tokens", prompt + received + requests)
    if result.completion_tokens is not None:
        decoded = result.completion_tokens > requests
        credit.set(DECODE_COMPLETIONS, requests if decoded else 0.0)
        credit.set("generation_tokens", float(result.completion_tokens))
        credit.set(DECODE_TOKENS, max(float(result.completion_tokens) - requests, 0.0))
    if result.prompt_tokens is not None:
        credit.set("prompt_tokens", float(result.prompt_tokens))
    if result.completion_tokens is not None and result.prompt_tokens is not None:
        credit.set("engine_tokens", float(result.completion_tokens + result.prompt_tokens))
    if result.side_usage is not None:
        _add_side_request(credit, result)


def _add_side_request(credit: Credit, result: CanaryResult) -> None:
    """A side request the canary made (the multimodal baseline) is its work too.

    Without it, the baseline (one request per server: the canary's prompt
    without the image, one token) counted as a real completion on a server
    with no client. Its usage where told; where its reply never said, at
    most the canary's own prompt and one token.
    """
    assert result.side_usage is not None
    prompt, reply = result.side_usage
    if prompt is None:  # at most the canary's prompt, from its usage or its estimate
        prompt = result.prompt_tokens or int(credit.side.get("prompt_tokens", 0.0))
    if reply is None:
        reply = 1
    credit.set("prompt_tokens", credit.allowed.get("prompt_tokens", 0.0) + prompt)
    credit.set("generation_tokens", credit.allowed.get("generation_tokens", 0.0) + reply)
    credit.set("engine_tokens", credit.allowed.get("engine_tokens", 0.0) + prompt + reply)
    credit.set("completions", credit.allowed.get("completions", 0.0) + 1.0)
    decoded = max(float(reply) - 1.0, 0.0)
    credit.set(DECODE_TOKENS, credit.allowed.get(DECODE_TOKENS, 0.0) + decoded)
    if decoded:
        credit.set(DECODE_COMPLETIONS, credit.allowed.get(DECODE_COMPLETIONS, 0.0) + 1.0)
