"""The correctness canary: a few fixed prompts, greedy, with token ids and log-probabilities.

A server that answers garbage answers with HTTP 200: weights lost on wake-up
(every reply ``!!!!!!!!``), a bad weight update, NaNs from a faulty GPU. No
other kind can see it: the text canary passes on any token, and constrained
decoding forces a schema-valid answer out of garbage weights. This kind asks
for the model's greedy behaviour on fixed prompts (temperature 0) and the
log-probability of every token, as token ids (vLLM's
``return_tokens_as_token_ids``), so a healthy reply that is a special token
the server strips from the text still counts by its id.

The kind itself judges only whether the reply can be judged: tokens
generated, one generation per prompt sent, token ids and log-probabilities
present and in agreement with ``usage``. Whether the generations still match
the model's fingerprint is the verdict's business
(:mod:`sentinel.verdict.corrupt`), against the fingerprint the sidecar keeps
(:mod:`sentinel.fingerprint.book`). A server that gives no token ids or
log-probabilities cannot be checked: the kind answers UNSUPPORTED and the
scheduler disables it with a warning.

Not a path kind and not idle-gated: busy servers need the check most, and
real traffic proves only that answers come, never that they are right. It is
paired with a text control, so a check that fails while the control passes
tells a corrupt server from a dead one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sentinel.canary.protocol import (
    OK,
    CanaryRequest,
    Judgement,
    KindBase,
    KindDefaults,
    Reply,
    base_body,
    nothing_generated,
)
from sentinel.canary.result import Generation, Reason
from sentinel.canary.spec import CHAT_ENDPOINT, COMPLETIONS_ENDPOINT, CanaryKind, CanarySpec

CORRECTNESS: Final = CanaryKind("correctness")
# Candidates asked for beside each chosen token: their log-probabilities give
# each token's margin over every close rival, which tells a near-tie flip
# (batching noise, to any of them) from a changed model (see
# sentinel.verdict.hangs.corrupt). Within vLLM's default --max-logprobs (20).
TOP_LOGPROBS = 5


def prompts_of(request: Mapping[str, Any]) -> tuple[str, ...]:
    """The prompts a request template sends, in the order the server answers them."""
    prompt = request.get("prompt")
    if isinstance(prompt, str):
        return (prompt,)
    if isinstance(prompt, list):
        return tuple(p for p in prompt if isinstance(p, str))
    return ("messages",)  # a chat request is one conversation


class CorrectnessCanary(KindBase):
    """Fixed prompts at temperature 0, with token ids and log-probabilities per token.

    Not a path kind (judged against its fingerprint, not against a text
    control) and not idle-gated (real traffic proves answers come, never that
    they are right); token ids are token ids, thinking or not, so no server
    makes it unvalidatable.
    """

    kind = CORRECTNESS
    paired = True  # a 5xx on the check while its control passed is a departure at once
    # No log-probabilities (a server or proxy that returns none): nothing to compare
    # with a fingerprint, no broken server; ``sentinel probe`` and the exporter skip it alike.
    unsupported_skipped = True
    defaults = KindDefaults(deadline=8.0, interval=10.0, jitter=0.1)
    endpoints = frozenset({COMPLETIONS_ENDPOINT, CHAT_ENDPOINT})

    def build(self, spec: CanarySpec, *, model: str, nonce: str) -> CanaryRequest:
        body = base_body(spec, model=model, nonce=nonce)
        # Greedy whatever the template says: the fingerprint is the argmax path.
        body["temperature"] = 0
        body["return_tokens_as_token_ids"] = True
        if spec.endpoint == CHAT_ENDPOINT:
            body["logprobs"] = True
            body["top_logprobs"] = TOP_LOGPROBS
        else:
            body["logprobs"] = TOP_LOGPROBS
        return CanaryRequest(body=body, nonce=nonce)

    def judge(
        self, sent: CanaryRequest, reply: Reply, *, baseline_prompt_tokens: int | None
    ) -> Judgement:
        empty = nothing_generated(reply)
        if empty is not None:
            return empty
        generations = reply.generations
        if not generations:
            return Judgement(
                Reason.UNSUPPORTED,
                "the reply carries no token ids with log-probabilities "
                "(logprobs, return_tokens_as_token_ids): correctness cannot be checked",
            )
        expected = len(prompts_of(sent.body))
        if len(generations) != expected:
            return Judgement(
                Reason.BAD_BODY, f"{len(generations)} generations for {expected} prompts"
            )
        return _usage_agrees(generations_lengths(generations), reply.completion_tokens) or OK

    def rejection(self, status: int, message: str) -> Reason | None:
        """A server without the endpoint, or refusing log-probabilities, cannot be checked.

        UNSUPPORTED disables the kind with a warning (a chat-only proxy, a
        server capping ``--max-logprobs`` below
        :data:`TOP_LOGPROBS`) instead of blocking startup.
        """
        if status in (404, 405, 501) or (status == 400 and "logprob" in message.lower()):
            return Reason.UNSUPPORTED
        return None


def generations_lengths(generations: Sequence[Any]) -> tuple[int, ...]:
    return tuple(len(g.token_ids) for g in generations)


def _usage_agrees(lengths: Sequence[int], completion_tokens: int | None) -> Judgement | None:
    """BAD_BODY when the token ids and ``usage`` disagree on how many tokens were generated."""
    if completion_tokens is None or sum(lengths) == completion_tokens:
        return None
    return Judgement(
        Reason.BAD_BODY,
        f"{sum(lengths)} token ids in the reply but usage.completion_tokens is {completion_tokens}",
    )


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """The model's greedy behaviour on the check's prompts, for one model and one set of weights.

    Keyed by ``model`` (the id and root ``/v1/models`` lists) and ``weights``
    (the declared weight version; "" where none is declared) and valid only for
    the request it answered (``request``, a digest of the prompts and limits),
    never by the server's identity: a wake-up, a resume or a restart of either
    side compares against it. ``recorded_at`` is wall-clock seconds; ``why``
    says what recorded it (the first check of these weights, a declared weight
    change, an operator).
    """

    model: str
    weights: str
    request: str
    generations: tuple[Generation, ...]
    recorded_at: float
    why: str = ""


@dataclass(frozen=True, slots=True)
class CorrectnessEvidence:
    """What the verdict needs to judge correctness checks (``Evidence.correctness``).

    ``fingerprint`` is the baseline for the model and weights served now (None:
    not taken yet); checks sent before ``since`` (monotonic) are not judged
    against it (they answered other weights, or were the baseline itself).
    ``corrupted_at``: when vLLM's ``vllm:corrupted_requests`` counter last moved
    (requests with NaN logits, counted with ``VLLM_COMPUTE_NANS_IN_LOGITS``).
    """

    fingerprint: Fingerprint | None = None
    since: float = float("-inf")
    corrupted_at: float | None = None
    canary: str = ""  # the check (spec name) the fingerprint answers; "": any of the kind


CANARY = CorrectnessCanary()
