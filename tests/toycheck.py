"""A toy canary kind that is not a path kind, defined outside sentinel like :mod:`tests.toykind`.

It is judged by its own answer only: the reply must say ``ok``, anything else
is BAD_BODY. It is not paired with a text control, not idle-gated and takes
UNSUPPORTED as a failure, so the scheduler must send it alone on its own
cadence and the verdict must never read its misses as a path hang. It tags
each request with a ``user`` field (``toycheck-<nonce>``) so a fake server can
count its canaries apart from text ones.
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
    nothing_generated,
)
from sentinel.canary.result import Reason
from sentinel.canary.spec import CHAT_ENDPOINT, CanaryKind, CanarySpec

KIND = CanaryKind("toycheck")
USER_PREFIX = "toycheck-"
EXPECTED = "ok"


class ToyCheckCanary:
    """A check judged on its own: no control beside it, no real traffic standing in for it."""

    kind = KIND
    path = False
    paired = False
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
        empty = nothing_generated(reply)
        if empty is not None:
            return empty
        if reply.text.strip() != EXPECTED:
            return Judgement(Reason.BAD_BODY, f"answered {reply.text[:40]!r}, not {EXPECTED!r}")
        return OK

    def rejection(self, status: int, message: str) -> Reason | None:
        return None

    def unvalidatable(self, spec: CanarySpec, facts: ServerFacts) -> str | None:
        return None


CANARY = ToyCheckCanary()


@contextmanager
def registered() -> Iterator[None]:
    """The toy check kind in the registry for the duration, and gone again after."""
    kinds.register(CANARY)
    try:
        yield
    finally:
        kinds.unregister(KIND)
