"""The server's departures sentinel saw, and what ``/status`` says while the server is away.

A departure is a server epoch that ended (:meth:`Ledger.new_epoch`): the server
went away (connections refused past the dead grace with no live API server),
its API server exited or was replaced, or vLLM's counters all went down. Each
is kept with its time and reason, so ``/status`` can say what a server that
keeps crashing at load looks like from here: how long connections have been
refused and how often the server went away in the last :data:`WINDOW_S`.

Such a server is the kubelet's to restart, on its own crash back-off: it exits,
and the container restarts. Sentinel adds no restart of its own (liveness
fails only for a confirmed hang, and a refusal is no hang unless the API-server
process is seen alive: the *listener down* rule), so the text says so while
liveness is green.

The count is honest, not inferred: only departures sentinel saw. A server
that never answers again, watched without process evidence, is one long
refusal, counted once when it first went away.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

WINDOW_S = 600.0  # the kubelet forgets its crash back-off after 10 min running
KEPT = 64  # departures kept; a crash loop on the kubelet's back-off makes a few per window
CRASH_LOOP_AT = 3  # departures within the window that look like a crash loop
RECENT_SHOWN = 5


@dataclass(frozen=True, slots=True)
class Departure:
    """One server epoch that ended: when (monotonic seconds) and the ledger's reason."""

    at: float
    reason: str


class Departures:
    """The last :data:`KEPT` departures, oldest first."""

    def __init__(self) -> None:
        self._seen: deque[Departure] = deque(maxlen=KEPT)

    def saw(self, at: float, reason: str) -> None:
        self._seen.append(Departure(at, reason))

    def within(self, now: float, window: float = WINDOW_S) -> tuple[Departure, ...]:
        """The departures of the last ``window`` seconds at ``now``, oldest first."""
        return tuple(d for d in self._seen if now - d.at < window)


def _minutes(window: float) -> str:
    return f"{window / 60:g} min" if window >= 60 else f"{window:g}s"


def went_away(departures: Sequence[Departure], window: float = WINDOW_S) -> str | None:
    """``it went away or restarted 4 times in the last 10 min (a crash loop ...)``, or None."""
    count = len(departures)
    if count == 0:
        return None
    times = "once" if count == 1 else f"{count} times"
    said = f"it went away or restarted {times} in the last {_minutes(window)}"
    if count >= CRASH_LOOP_AT:
        said += " (a crash loop at load? the kubelet restarts it on its own back-off)"
    return said


def not_answering(
    now: float,
    *,
    refused_since: float | None,
    answered: bool,
    epoch: int,
    api_alive: bool | None,
    departures: Sequence[Departure],
    liveness_ok: bool,
    window: float = WINDOW_S,
) -> str | None:
    """What sentinel sees of a server that refuses connections (None while it answers).

    ``answered``: the server answered in this epoch; ``epoch`` 0 is the one
    sentinel started in; ``departures`` those of the last ``window``.
    """
    if refused_since is None:
        return None
    parts = [f"the server is not answering: connections refused for {now - refused_since:.0f}s"]
    if api_alive is True:
        parts[0] += " while its API-server process lives" + ("" if answered else " (loading?)")
    elif not answered and epoch == 0:
        parts.append("it has not answered since sentinel started")
    away = went_away(departures, window)
    if away is not None:
        parts.append(away)
    parts.append("sentinel asks no restart" if liveness_ok else "liveness is failing")
    return "; ".join(parts)


def departures_json(
    departures: Sequence[Departure], now: float, window: float = WINDOW_S
) -> dict[str, Any]:
    """``/status``'s ``server.departures``: the count in the window, the latest few and the gist."""
    return {
        "window": window,
        "count": len(departures),
        "summary": went_away(departures, window),
        "recent": [
            {"ago": round(now - d.at, 3), "reason": d.reason}
            for d in reversed(departures[-RECENT_SHOWN:])
        ],
    }
