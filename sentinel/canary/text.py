"""The text canary: the cheapest request that proves the engine still produces tokens."""

from __future__ import annotations

from sentinel.canary.degenerate import DEGENERATE_PREFIX, degenerate_shape
from sentinel.canary.protocol import (
    OK,
    CanaryRequest,
    Judgement,
    KindBase,
    KindDefaults,
    Reply,
    nothing_generated,
)
from sentinel.canary.result import Reason
from sentinel.canary.spec import CHAT_ENDPOINT, COMPLETIONS_ENDPOINT, TEXT


class TextCanary(KindBase):
    """A fixed short prompt; any generated token passes.

    Generated *tokens* are the proof of life, not visible text: a model whose
    greedy reply is a special token (stripped from the text by the server)
    still decoded it. The reply fails when usage counts zero completion
    tokens, or when neither text nor a token count shows anything generated.

    The prompt need not vary: the text path has no per-request cache that a
    repeated prompt could hide a hang behind (prefix caching still runs the
    decode step, which is what a hung engine cannot do). The body still does
    (the nonce in ``user``), so no cache in front of the server answers for it.

    A reasoning model's thinking counts as generated text, stopped or cut at
    ``max_tokens``: the text canary asks only whether the engine generates,
    and a model that thinks whatever the template is told would otherwise
    never pass startup. Path kinds, which validate what they asked for,
    take a reply cut short while thinking as INCONCLUSIVE.

    A reply of degenerate shape (:mod:`sentinel.canary.degenerate`: one
    "!" (token 0) repeated to the limit, undecodable text) passes
    with the shape in its detail; the ``degenerate`` rule judges repeats.

    Neither a path kind nor paired: the text canary is the control every path
    kind is judged against. The template is sent as written, and any
    generated token proves the engine, thinking or not, so no server makes
    it unvalidatable (:class:`~sentinel.canary.protocol.KindBase`'s answers).
    """

    kind = TEXT
    idle_gated = True  # real work proves the engine as well as a text canary would
    defaults = KindDefaults(deadline=8.0, interval=5.0, jitter=0.1)
    endpoints = frozenset({CHAT_ENDPOINT, COMPLETIONS_ENDPOINT})

    def judge(
        self, sent: CanaryRequest, reply: Reply, *, baseline_prompt_tokens: int | None
    ) -> Judgement:
        empty = nothing_generated(reply)
        if empty is not None:
            return empty
        # A success still (the engine generated), noted for the degenerate rule.
        shape = degenerate_shape(reply.text or reply.reasoning, reply.finish_reason)
        return OK if shape is None else Judgement(Reason.OK, DEGENERATE_PREFIX + shape)


CANARY = TextCanary()
