"""Observed time: how long a condition lasted while sentinel was watching.

When sentinel's own process is paused or starved, what the server did
meanwhile is unknown, so those spans are left out of every window: the window
clock pauses over them and resumes, it never starts over (periodic hiccups
would otherwise hide a hang forever).
"""

from __future__ import annotations

from collections.abc import Iterable


def observed(since: float, now: float, unobserved: Iterable[tuple[float, float]]) -> float:
    """Seconds from ``since`` to ``now`` minus the parts sentinel did not observe."""
    if now <= since:
        return 0.0
    blind = sum(max(0.0, min(end, now) - max(start, since)) for start, end in unobserved)
    return max(0.0, now - since - blind)


def held_for(
    since: float | None, window: float, now: float, unobserved: Iterable[tuple[float, float]]
) -> float | None:
    """The observed seconds a condition held since ``since``, once they reach ``window``.

    None while it does not hold (``since`` None) or has not held the whole window.
    """
    if since is None:
        return None
    elapsed = observed(since, now, unobserved)
    return elapsed if elapsed >= window else None
