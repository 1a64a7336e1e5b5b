"""Credits: the work one of sentinel's canaries can explain, charged before anything is progress.

Pure bookkeeping for :mod:`sentinel.progress.tracker`. A credit holds, per work
counter, how much a canary may explain in all (``allowed``: while in flight
the most it can cause, once done the usage its reply reported) and how
much has been charged to it, once in the server's total and once on each
data-parallel engine's own counters. What a credit charged beyond its
canary's usage is given back (:func:`refund`), so what sentinel's canaries
explain is exactly what they caused wherever their replies report usage.

Per engine a canary aimed at one (``X-data-parallel-rank``) is charged on
that engine alone: its work can show nowhere else. An unaimed one may have
been served by any engine, so each engine may charge it in full: a stuck
engine that served it must not count its prefill as its own work, and the
cost (an idle engine's real work hidden up to one canary's worth while the
canary is recent) is bounded and short.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


@dataclass(slots=True)
class Credit:
    """The work one canary of sentinel's can explain, per counter."""

    sent: float
    allowed: dict[str, float]  # what it may explain in all, per counter
    engine: str | None = None  # the ``engine`` label it was aimed at; None: unaimed
    used: dict[str, float] = field(default_factory=dict)  # charged in the total
    used_on: dict[str, dict[str, float]] = field(default_factory=dict)  # charged per engine
    finished: float | None = None
    requests: float = 1.0  # the engine requests it makes (a prompt list: one per prompt)
    # A side request it may make (the multimodal baseline), part of ``allowed``
    # while in flight: the most that request can cause, per counter.
    side: dict[str, float] = field(default_factory=dict)

    def cap(self, key: str, most: float) -> None:
        """Explain at most ``most`` of ``key`` in all (what was charged already counts)."""
        self.allowed[key] = min(self.allowed.get(key, 0.0), most)

    def set(self, key: str, total: float) -> None:
        """Explain exactly ``total`` of ``key`` in all: the usage the reply reported."""
        self.allowed[key] = total

    def left(self, key: str, engine: str | None = None) -> float:
        """What it can still explain of ``key``: in the total (None) or on ``engine``."""
        if engine is None:
            used = self.used
        elif self.engine is not None and self.engine != engine:
            return 0.0  # aimed elsewhere: none of this engine's work is its
        else:
            used = self.used_on.get(engine, {})
        return max(self.allowed.get(key, 0.0) - used.get(key, 0.0), 0.0)

    def charge(self, key: str, amount: float, engine: str | None = None) -> None:
        used = self.used if engine is None else self.used_on.setdefault(engine, {})
        used[key] = used.get(key, 0.0) + amount


def refund(credits: Sequence[Credit], key: str, engine: str | None = None) -> float:
    """Return what credits charged beyond their canary's reported usage; the real part of it.

    A canary in flight may explain the most it can cause (its whole reply):
    only its usage, once it answered, says what it did cause. What a credit
    had charged beyond that usage is uncharged and offered to the other
    credits first (sentinel's other canaries' work, charged to the older
    credit as deltas are charged oldest first); what none of them can
    explain was real work, counted late rather than never.
    """
    excess = 0.0
    for credit in credits:
        used = credit.used if engine is None else credit.used_on.get(engine, {})
        over = used.get(key, 0.0) - credit.allowed.get(key, 0.0)
        if over > 0:
            used[key] -= over
            excess += over
    return excess - discount(credits, key, excess, engine) if excess > 0 else 0.0


def discount(credits: Iterable[Credit], key: str, delta: float, engine: str | None = None) -> float:
    """Charge ``delta`` of ``key`` to ``credits`` in turn (oldest first); how much they explain."""
    discounted = 0.0
    for credit in credits:
        take = min(credit.left(key, engine), delta - discounted)
        if take <= 0:
            continue
        credit.charge(key, take, engine)
        discounted += take
    return discounted
