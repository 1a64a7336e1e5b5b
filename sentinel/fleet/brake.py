"""The restart-loop brake's memory as a Lease annotation: its name, bytes and seeding, purely.

The brake (:func:`sentinel.verdict.decide.evaluate`) remembers the restarts
it counted and their causes in :class:`~sentinel.verdict.VerdictState`, in
the sidecar's memory. Where the kubelet restarts only the server's container
that is enough; where the whole pod is recreated (a LeaderWorkerSet with
``RecreateGroupOnPodRestart`` deletes every pod of the group, sentinel
included) the memory would go with it, the brake would never hold and a fault
that survives restarts would become an endless group-restart loop. So the
memory is also kept in a ``coordination.k8s.io/v1`` Lease named after the pod
(a LeaderWorkerSet's leader keeps its name across recreations), in one
annotation that this module encodes and decodes; :mod:`sentinel.fleet.brake_memory`
reads and writes it.

A restart is remembered from the moment liveness fails for it (the pod may
be gone before the restarted server is seen), and its time is wall-clock
(the verdict's monotonic clock starts again with each process): converted on
the way out and on the way back in. The annotation is bytes anyone with
``update`` on the Lease can write, so decoding is strict and bounded: a
value that is not exactly this shape is refused whole (:class:`Malformed`),
never half believed; entries older than the brake window are dropped, and
so are entries from the future beyond a small clock skew (another node's
clock wrote them, or nobody honest did).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sentinel.fleet.budget import stamp
from sentinel.verdict import VerdictState
from sentinel.verdict.cause import recent

ANNOTATION = "sentinel.io/brake-memory"
VERSION = 1
PREFIX = "sentinel-brake-"
NAME_LIMIT = 253  # a Lease's name is a DNS subdomain
MAX_BYTES = 128 * 1024  # the annotation's value; Kubernetes allows 256 KiB for all of them
MAX_ENTRIES = 1000  # brake_max_restarts' upper bound: more could never change a verdict
CAUSE_LIMIT = 200  # a cause is a hang kind and where it sat: short
SKEW = 60.0  # seconds a restart may lie in the future and still be believed (clocks differ)

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


class Malformed(ValueError):
    """The annotation is not what sentinel writes; the message says where it differs."""


@dataclass(frozen=True, slots=True)
class Remembered:
    """The brake's memory in wall-clock time: each restart's time and cause, oldest first.

    ``ineffective``: the cause the brake held as "a restart does not fix
    this" when it was written ('' none). ``future``: entries a decode dropped
    as lying in the future.
    """

    restarts: tuple[tuple[float, str], ...] = ()
    ineffective: str = ""
    future: int = 0


def lease_name(pod: str) -> str:
    """``sentinel-brake-<pod>``; shortened with a hash where that is no valid object name."""
    if _NAME.match(pod) and len(PREFIX) + len(pod) <= NAME_LIMIT:
        return PREFIX + pod
    digest = hashlib.sha256(pod.encode("utf-8", "replace")).hexdigest()[:10]
    room = NAME_LIMIT - len(PREFIX) - len(digest) - 1
    head = re.sub(r"[^a-z0-9.-]", "-", pod.lower())[:room].strip("-.")
    return f"{PREFIX}{head}-{digest}" if head else PREFIX + digest


def encode(memory: Remembered) -> str:
    """The annotation's value: compact JSON, times as RFC 3339 (UTC, whole seconds)."""
    restarts = memory.restarts[-MAX_ENTRIES:]
    body: dict[str, Any] = {
        "v": VERSION,
        "restarts": [{"at": stamp(at), "cause": cause[:CAUSE_LIMIT]} for at, cause in restarts],
    }
    if memory.ineffective:
        body["ineffective"] = memory.ineffective[:CAUSE_LIMIT]
    return json.dumps(body, separators=(",", ":"), sort_keys=True)


def decode(text: str | None, now: float, window: float) -> Remembered:
    """What the annotation says, within ``window`` of ``now`` (wall clock); None: nothing yet."""
    if text is None:
        return Remembered()
    if len(text) > MAX_BYTES:
        raise Malformed(f"{len(text)} characters, more than {MAX_BYTES}")
    try:
        body = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise Malformed(f"not JSON ({type(exc).__name__})") from None
    if not isinstance(body, dict) or body.get("v") != VERSION:
        raise Malformed(f"not an object of version {VERSION}")
    extra = set(body) - {"v", "restarts", "ineffective"}
    if extra:
        raise Malformed("unknown keys: " + ", ".join(sorted(extra))[:200])
    entries = body.get("restarts")
    if not isinstance(entries, list) or len(entries) > MAX_ENTRIES:
        raise Malformed(f"restarts is not a list of at most {MAX_ENTRIES}")
    ineffective = _cause(body.get("ineffective", ""), "ineffective")
    kept: list[tuple[float, str]] = []
    future = 0
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or set(entry) != {"at", "cause"}:
            raise Malformed(f"restarts[{i}] is not an object of at and cause")
        at = _time(entry["at"], f"restarts[{i}].at")
        cause = _cause(entry["cause"], f"restarts[{i}].cause")
        if at > now + SKEW:
            future += 1
        elif now - min(at, now) < window:
            kept.append((min(at, now), cause))
    kept.sort(key=lambda item: item[0])
    return Remembered(tuple(kept), ineffective if kept else "", future)


def _time(value: object, where: str) -> float:
    if not isinstance(value, str) or len(value) > 40:
        raise Malformed(f"{where} is not an RFC 3339 time")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise Malformed(f"{where} is not an RFC 3339 time") from None
    if parsed.tzinfo is None:
        raise Malformed(f"{where} has no time zone")
    return parsed.timestamp()


def _cause(value: object, where: str) -> str:
    if not isinstance(value, str) or len(value) > CAUSE_LIMIT or not value.isprintable():
        raise Malformed(f"{where} is not a printable string of at most {CAUSE_LIMIT}")
    return value


def seed(state: VerdictState, memory: Remembered, wall: float, now: float) -> VerdictState:
    """``state`` with the remembered restarts before its own, on the verdict's clock.

    A restart ``wall - at`` seconds ago happened ``now - (wall - at)`` on the
    monotonic clock ``now`` reads. Only the restarts and their causes are
    seeded: the brake holds, and names the cause, from them at the next
    confirmed hang; the rest of the state is this process's own.
    """
    if not memory.restarts:
        return state
    own, causes = recent(state.restarts, state.causes, float("inf"), now)
    times = tuple(now - (wall - at) for at, _ in memory.restarts)
    return replace(
        state,
        restarts=times + own,
        causes=tuple(cause for _, cause in memory.restarts) + causes,
    )


def remember(
    state: VerdictState, asked_at: float | None, now: float, wall: float, window: float
) -> Remembered:
    """What to write: the brake's restarts within ``window``, and the restart asked for now.

    ``asked_at`` (the verdict's clock): when liveness failed for a hang in
    this epoch, if it did. That restart counts from then on: the next
    sidecar may be a new process in a recreated pod that never sees the old
    server go, while a sidecar that does see it counts it in
    ``state.restarts`` and the asked entry goes (never both at once).
    """
    times, causes = recent(state.restarts, state.causes, window, now)
    restarts = [(wall - (now - at), cause) for at, cause in zip(times, causes, strict=True)]
    if state.red_in_epoch and asked_at is not None:
        restarts.append((wall - (now - asked_at), state.red_cause))
    ineffective = state.ineffective.cause if state.ineffective is not None else ""
    return Remembered(tuple(restarts), ineffective)


__all__ = [
    "ANNOTATION",
    "Malformed",
    "Remembered",
    "decode",
    "encode",
    "lease_name",
    "remember",
    "seed",
]
