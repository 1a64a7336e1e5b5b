"""Startup that ends: when a canary kind is set aside, or the text canary falls back.

Readiness waits for every enabled kind to pass once (startup, for the text
canary: :func:`sentinel.verdict.decide.evaluate`). A reasoning model whose
template ignores ``enable_thinking=false`` answers the structured and
multimodal canaries with reasoning only, cut at ``max_tokens``; a server
refuses a capability with a 4xx (a chat request to a model without a chat
template, a field it does not take). Such a kind would hold readiness
forever (before, startup: the kubelet restarted the container for it again
and again, a crash loop made by the health checker). So until every kind
passed (the plan's ``startup_passed``), a kind whose last
:data:`SET_ASIDE_AFTER` canaries were all inconclusive or refused that way,
and that never passed, is set aside for this server epoch with its reason;
readiness counts the kinds the server can do. The text control is never set
aside: it is the proof that the engine produces tokens at all. Refused on
chat the same way (:data:`FALLBACK_AFTER` times), it asks the engine for a
plain completion instead (:func:`fallback_reason`; the route itself is
:mod:`sentinel.scheduling.text_fallback`'s).

Pure predicates over a kind's results; :class:`sentinel.record.plan.Planner`
is the one place that applies them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from sentinel.canary import kinds
from sentinel.canary.capability import NOT_A_CAPABILITY
from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CHAT_ENDPOINT, COMPLETIONS_ENDPOINT, CanarySpec

SET_ASIDE_AFTER = 5
# Three refusals in a row, not SET_ASIDE_AFTER: a missing template refuses every chat
# request alike, three rule out a one-off refusal (a reload, a proxy hiccup), and a
# fallback costs little when wrong (sentinel.scheduling.text_fallback says more).
FALLBACK_AFTER = 3


def never_conclusive(result: CanaryResult) -> bool:
    """A reply that can never pass on this server: reasoning cut short, or a capability refused."""
    return result.reason is Reason.INCONCLUSIVE or refused_capability(result)


def refused_capability(result: CanaryResult) -> bool:
    """A 4xx that refuses what was asked (no chat template, a field), not who asked or when."""
    status = result.http_status
    return (
        result.reason is Reason.HTTP_STATUS
        and status is not None
        and 400 <= status < 500
        and status not in NOT_A_CAPABILITY
    )


def waiting_to_set_aside(results: Iterable[CanaryResult]) -> str | None:
    """How far a kind is on its way to being set aside (None: it is not on its way).

    Said in ``/status`` and the log while it waits, so that the startup that
    takes :data:`SET_ASIDE_AFTER` refusals (about 41 s at the path kinds'
    cadence) is no silence: "refused 2 of 5 before it is set aside".
    """
    seen = list(results)
    if any(r.ok for r in seen):
        return None
    count = 0
    for result in reversed(seen):
        if not never_conclusive(result):
            break
        count += 1
    if not 0 < count < SET_ASIDE_AFTER:
        return None
    newest = seen[-1]
    what = "inconclusive" if newest.reason is Reason.INCONCLUSIVE else "refused"
    said = f" (HTTP {newest.http_status})" if what == "refused" else ""
    return f"{what} {count} of {SET_ASIDE_AFTER} before it is set aside{said}"


def set_aside_reason(results: Iterable[CanaryResult]) -> str | None:
    """Why to set a kind aside for this epoch (its results, oldest first), or None."""
    seen = list(results)
    if any(r.ok for r in seen):
        return None
    last = seen[-SET_ASIDE_AFTER:]
    if len(last) < SET_ASIDE_AFTER or not all(never_conclusive(r) for r in last):
        return None
    newest = last[-1]
    if newest.reason is Reason.INCONCLUSIVE:
        what = "inconclusive (only reasoning, cut at max_tokens)"
    else:
        what = f"refused with HTTP {newest.http_status}"
    said = newest.detail.removeprefix(f"HTTP {newest.http_status}: ")
    detail = f": {said[:160]}" if said else ""
    return f"set aside for this server: {len(last)} canaries in a row {what}{detail}"


class _Record(Protocol):
    """What :func:`review` reads and writes of a kind's ledger record."""

    @property
    def results(self) -> Iterable[CanaryResult]: ...

    set_aside_waiting: str


class ControlRecord(Protocol):
    """What the fallback reads of the text kind's history (a ledger ``KindRecord``)."""

    @property
    def results(self) -> Iterable[CanaryResult]: ...
    @property
    def fallback(self) -> str: ...


def review(record: _Record, *, started: bool) -> tuple[str | None, str | None]:
    """One kind after its canary: (the wait to say, newly; why to set it aside now).

    Keeps ``record.set_aside_waiting`` (what ``/status`` and ``/startupz``
    show) up to date, and returns it only when it changed, so the log says
    each step once. After startup nothing is set aside, nor waited for.
    """
    waiting = None if started else waiting_to_set_aside(record.results)
    changed = (waiting or "") != record.set_aside_waiting
    record.set_aside_waiting = waiting or ""
    return (waiting if changed else None), (None if started else set_aside_reason(record.results))


def fallback_reason(results: Iterable[CanaryResult]) -> str | None:
    """Why the text canary leaves chat for this epoch (its chat results, oldest first), or None."""
    seen = list(results)
    if any(r.ok for r in seen):
        return None
    last = seen[-FALLBACK_AFTER:]
    if len(last) < FALLBACK_AFTER or not all(refused_capability(r) for r in last):
        return None
    newest = last[-1]
    said = newest.detail.removeprefix(f"HTTP {newest.http_status}: ")
    detail = f": {said[:160]}" if said else ""
    return (
        f"on {COMPLETIONS_ENDPOINT} for this server: {len(last)} canaries in a row on "
        f"{CHAT_ENDPOINT} refused with HTTP {newest.http_status}{detail}"
    )


class ChatFallback:
    """Whether the text canary leaves chat for this epoch (:func:`fallback_reason`).

    What is kept here is only whether the text canary passed on chat in some
    epoch, since a pass can leave the bounded history long before the
    refusals that follow it; the rest is the text kind's record.
    """

    def __init__(self, specs: Iterable[CanarySpec]) -> None:
        self._chat = frozenset(
            s.name for s in specs if s.kind == kinds.CONTROL and s.endpoint == CHAT_ENDPOINT
        )
        self._passed_on_chat: int | None = None  # the last epoch it did

    def review(self, record: ControlRecord | None, epoch: int) -> str | None:
        """Why to fall back now (None: stay), from the text kind's results in ``epoch``."""
        if record is None or record.fallback or not self._chat:
            return None
        chat = [r for r in record.results if r.name in self._chat]
        if any(r.ok for r in chat):
            self._passed_on_chat = epoch
        if self._passed_on_chat == epoch:
            return None
        return fallback_reason(chat)
