"""A toy canary kind, defined outside sentinel to prove a kind is one module plus one registration.

It tags each request with a ``user`` field (``toy-<nonce>``) so a fake server
can tell its canaries apart from the text control, and passes any reply with
generated text. It is a path kind: judged against the text control, so a toy
canary that keeps missing its deadline while the control answers is a path
hang of kind ``toy``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib.resources.abc import Traversable
from typing import Any

from sentinel.canary import kinds
from sentinel.canary.protocol import (
    OK,
    CanaryRequest,
    Judgement,
    KindDefaults,
    Reply,
    ServerFacts,
    base_body,
)
from sentinel.canary.result import Reason
from sentinel.canary.spec import CHAT_ENDPOINT, CanaryKind, CanarySpec

KIND = CanaryKind("toy")
USER_PREFIX = "toy-"


class ToyCanary:
    """The smallest complete kind: no spec fields of its own, chat only."""

    kind = KIND
    path = True
    paired = True
    idle_gated = False
    unsupported_skipped = False
    traffic_counter: str | None = None
    defaults = KindDefaults(deadline=3.0, interval=7.0, jitter=0.0)
    spec_fields: frozenset[str] = frozenset()
    endpoints = frozenset({CHAT_ENDPOINT})

    def load_fields(self, given: Mapping[str, Any], assets: Traversable) -> Mapping[str, Any]:
        return {}

    def build(self, spec: CanarySpec, *, model: str, nonce: str) -> CanaryRequest:
        body = base_body(spec, model=model, nonce=nonce)
        body["user"] = USER_PREFIX + nonce
        return CanaryRequest(body=body, nonce=nonce)

    def judge(
        self, sent: CanaryRequest, reply: Reply, *, baseline_prompt_tokens: int | None
    ) -> Judgement:
        if not reply.text:
            return Judgement(Reason.EMPTY, "no generated text")
        return OK

    def rejection(self, status: int, message: str) -> Reason | None:
        return None

    def unvalidatable(self, spec: CanarySpec, facts: ServerFacts) -> str | None:
        return None


CANARY = ToyCanary()


@contextmanager
def registered() -> Iterator[None]:
    """The toy kind in the registry for the duration, and gone again after."""
    kinds.register(CANARY)
    try:
        yield
    finally:
        kinds.unregister(KIND)
