"""``/status`` as an operator reads it, and ``/``, the index of the endpoints.

The evaluator publishes the status mapping (:mod:`sentinel.evaluation.status`)
with monotonic times, the only clock the verdict knows. This view dates it at
request time: a ``summary`` first (the three kubelet answers, the hang or the
legitimate stall, whether the target is reachable), each ``since`` given as an
age in seconds and as a wall-clock ISO-8601 UTC time, and the configuration
last, so the verdict is on the first screen and not behind some sixty settings.
Every function here is pure: the handler passes both clocks in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from sentinel import __version__
from sentinel.evaluation.health import HealthSnapshot, ProbeAnswer

# One line per endpoint for ``/``; a route registered without one shows its handler's docstring.
DESCRIPTIONS: Mapping[str, str] = {
    "/": "this index of the endpoints",
    "/livez": "liveness of the inference server: 503 only while a hang is confirmed",
    "/readyz": "readiness: 503 until startup passed, while degraded, hung or stopping",
    "/startupz": "startup: 200 once every enabled canary kind succeeded in this server epoch",
    "/healthz": "sentinel's own liveness: 503 when one of its loops stopped ticking",
    "/status": "the judged evidence: a summary first, then details, the configuration last",
    "/metrics": "Prometheus metrics of sentinel and the server it guards",
    "/incidents": "the recent incidents and their diagnostics bundles",
    "/maintenance": "show (GET), set (POST) or clear (DELETE) a maintenance window",
    "/fingerprint": "show (GET) or re-take (POST) the correctness fingerprint",
}


def iso_utc(wall: float) -> str:
    """A wall-clock time (seconds since the epoch) as ISO-8601 UTC, to the millisecond."""
    moment = datetime.fromtimestamp(wall, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def dated(
    since: float | None, *, now: float, wall_now: float, started: float | None = None
) -> dict[str, Any]:
    """``since`` (monotonic) as an age in seconds and the wall-clock time it stands for.

    An answer that never flipped carries the verdict's initial 0.0: it holds
    since sentinel ``started`` (monotonic too), not since the host booted.
    """
    if since is None:
        return {"since": None, "age": None}
    if started is not None:
        since = max(since, started)
    age = max(0.0, now - since)
    return {"since": iso_utc(wall_now - age), "age": round(age, 3)}


def answer_json(answer: ProbeAnswer) -> dict[str, Any]:
    """A probe's body: ``since`` is monotonic seconds (the verdict's clock)."""
    return {"status": "ok" if answer.ok else "fail", "reason": answer.reason, "since": answer.since}


def summary(
    snapshot: HealthSnapshot, *, now: float, wall_now: float, started: float | None = None
) -> dict[str, Any]:
    """What an operator asks first: is it live, ready, started, and if not, why."""
    status = snapshot.status
    verdict = _mapping(status.get("verdict"))
    hangs = [h for h in verdict.get("hangs", ()) if isinstance(h, Mapping)]
    lifecycle = _mapping(status.get("lifecycle"))
    reachability = _mapping(_mapping(status.get("sections")).get("reachability"))
    server = _mapping(status.get("server"))

    def answer(a: ProbeAnswer) -> dict[str, Any]:
        when = dated(a.since, now=now, wall_now=wall_now, started=started)
        return {"ok": a.ok, "reason": a.reason, **when}

    hang = None
    if hangs:
        first = hangs[0]
        hang = {
            "kind": first.get("kind"),
            "action": first.get("action"),
            "reason": first.get("reason"),
            **dated(_float(first.get("since")), now=now, wall_now=wall_now),
            "more": len(hangs) - 1,  # further confirmed hangs, in verdict.hangs
        }
    stall = None
    if lifecycle.get("since") is not None:
        stall = {
            "phase": lifecycle.get("phase"),
            "reason": lifecycle.get("why"),
            **dated(_float(lifecycle.get("since")), now=now, wall_now=wall_now),
        }
    return {
        "at": iso_utc(wall_now),
        "target": status.get("target"),
        "model": status.get("model"),
        "enforce": snapshot.enforce,
        "liveness": answer(snapshot.liveness),
        "readiness": answer(snapshot.readiness),
        "startup": answer(snapshot.startup),
        "hang": hang,
        "stall": stall,
        # Why nothing answers (sentinel.record.reachability), None while the target answers.
        "unreachable": reachability.get("unreachable"),
        "unreachable_for": reachability.get("for"),  # seconds
        "reachable": server.get("reachable"),
    }


def status_json(
    snapshot: HealthSnapshot,
    *,
    now: float,
    wall_now: float,
    started: float | None = None,
    maintenance: Callable[[], Mapping[str, Any] | None] | None = None,
) -> dict[str, Any]:
    """The ``/status`` document: summary, the daemon's mapping, the answers, config last.

    ``version`` is sentinel's release; ``revision`` counts published snapshots.
    Each answer keeps its monotonic ``since`` and gains ``since_utc`` and ``age``;
    ``started`` is when sentinel started, on the same clock (see :func:`dated`).
    """
    body = {k: v for k, v in snapshot.status.items() if k != "config"}

    def answer(a: ProbeAnswer) -> dict[str, Any]:
        when = dated(a.since, now=now, wall_now=wall_now, started=started)
        return {**answer_json(a), "since_utc": when["since"], "age": when["age"]}

    progress = dated(snapshot.progress_at, now=now, wall_now=wall_now)
    document: dict[str, Any] = {
        "summary": summary(snapshot, now=now, wall_now=wall_now, started=started),
        "version": body.pop("version", __version__),
        "revision": snapshot.version,
        **body,
        "liveness": answer(snapshot.liveness),
        "readiness": answer(snapshot.readiness),
        "startup": answer(snapshot.startup),
        "enforce": snapshot.enforce,
        "priority_effective": snapshot.priority_effective,
        "progress_at": snapshot.progress_at,
        "progress_at_utc": progress["since"],
    }
    if maintenance is not None:  # the hook is on: its window, or None when none is held
        window = maintenance()
        document["maintenance"] = None if window is None else dict(window)
    document["config"] = snapshot.status.get("config", {})
    return document


def index_json(routes: Iterable[web.AbstractRoute]) -> dict[str, Any]:
    """Every registered path once, with its methods and one line on what it serves."""
    methods: dict[str, list[str]] = {}
    handlers: dict[str, Any] = {}
    for route in routes:
        info = route.get_info()
        path = info.get("path") or info.get("formatter")
        if not isinstance(path, str) or route.method == "HEAD":
            continue
        methods.setdefault(path, [])
        if route.method not in methods[path]:
            methods[path].append(route.method)
        handlers.setdefault(path, route.handler)
    endpoints = [
        {"path": path, "methods": verbs, "description": _describe(path, handlers[path])}
        for path, verbs in methods.items()
    ]
    return {"service": "sentinel", "version": __version__, "endpoints": endpoints}


def _describe(path: str, handler: Any) -> str:
    known = DESCRIPTIONS.get(path)
    if known is not None:
        return known
    doc = (getattr(handler, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else ""


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None
