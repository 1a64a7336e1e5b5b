"""Two releases' surfaces compared, and each difference held against what sentinel knows.

Pure: two :class:`~chaos.vllm_radar.extract.Surfaces` and the known table in,
:class:`Change` and :class:`Presence` rows out. A route that reappears under a
longer path (0.34's ``/v1/fault_tolerance/status``) is one ``moved`` change,
not a gone and a new one; a body is matched on its first sentence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from chaos.vllm_radar.extract import KINDS, Item, Surfaces
from chaos.vllm_radar.known import KNOWN, Known

_SAMPLE_SUFFIXES = ("_total", "_count", "_sum", "_bucket", "_created", "_info")
# Flags and config fields worth a line of their own; the rest are listed in one line.
HEALTH_WORDS = re.compile(
    r"health|timeout|fault|elastic|sleep|pause|watchdog|checkpoint|api.key|data.parallel|"
    r"scal|queued|admission|recovery|keep.alive|middleware|log.stats|api.server|scheduling|"
    r"headless|retire|dump|ready|inflight|supervisor",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Change:
    """One difference: ``status`` is new, gone, changed or moved."""

    kind: str
    key: str
    status: str
    detail: str
    where: str
    touches: Known | None


@dataclass(frozen=True, slots=True)
class Presence:
    """Whether a surface sentinel knows is declared by a release (``where``: first place)."""

    known: Known
    present: bool
    where: str


def family(sample: str) -> str:
    """The family an exposed sample belongs to (``vllm:x_total`` -> ``vllm:x``)."""
    for suffix in _SAMPLE_SUFFIXES:
        if sample.endswith(suffix):
            return sample[: -len(suffix)]
    return sample


def _path(route_key: str) -> str:
    return route_key.split(" ", 1)[1]


def find(known: Known, surfaces: Surfaces) -> Item | None:
    """The release's item a known surface is, or None when the release lacks it."""
    items = surfaces.items[known.kind]
    if known.kind == "route":
        path = known.key.split(" ", 1)[1]
        return items.get(known.key) or items.get(f"ANY {path}")
    if known.kind == "body":
        return next((i for k, i in items.items() if k.startswith(known.key)), None)
    if known.kind == "metric":
        return items.get(known.key) or items.get(family(known.key))
    if known.kind == "title":
        base = known.key.split("::", 1)[-1]
        return next((i for k, i in items.items() if k.startswith(base)), None)
    if known.kind == "flag":
        return items.get(known.key) or items.get(known.key.split(".", 1)[0])
    return items.get(known.key)


def touching(kind: str, key: str, detail: str = "") -> Known | None:
    """The known surface a release's item is, or touches (a middleware exempting a known path)."""
    for known in KNOWN:
        if kind == "middleware" and known.kind == "route":
            if f" {_path(known.key)}," in f" {detail.removeprefix('paths ')},":
                return known
            continue
        if known.kind != kind:
            continue
        if kind == "route" and _path(key) == _path(known.key):
            return known
        if kind == "body" and key.startswith(known.key):
            return known
        if kind == "metric" and family(known.key) == key:
            return known
        if kind == "title" and key.startswith(known.key.split("::", 1)[-1]):
            return known
        if kind == "flag" and known.key.split(".", 1)[0] == key:
            return known
        if kind == "field" and known.key == key:
            return known
    return None


def _moves(gone: list[Item], new: list[Item]) -> list[tuple[Item, Item]]:
    """Routes that reappear under a longer or shorter path with the same method and tail."""
    pairs = []
    for old in gone:
        method, path = old.key.split(" ", 1)
        for item in new:
            other_method, other = item.key.split(" ", 1)
            if method == other_method and (other.endswith(path) or path.endswith(other)):
                pairs.append((old, item))
                break
    return pairs


def diff(base: Surfaces, target: Surfaces) -> list[Change]:
    """What ``target`` declares differently from ``base``, kind by kind."""
    changes: list[Change] = []
    for kind in KINDS:
        before, after = base.items[kind], target.items[kind]
        gone = [before[k] for k in sorted(before.keys() - after.keys())]
        new = [after[k] for k in sorted(after.keys() - before.keys())]
        if kind == "route":
            for old, item in _moves(gone, new):
                gone.remove(old)
                new.remove(item)
                touches = touching(kind, old.key) or touching(kind, item.key)
                detail = f"was {old.key}"
                changes.append(Change(kind, item.key, "moved", detail, item.where, touches))
        for item in new:
            changes.append(
                Change(kind, item.key, "new", item.detail, item.where, touching(kind, item.key))
            )
        for item in gone:
            changes.append(
                Change(kind, item.key, "gone", item.detail, item.where, touching(kind, item.key))
            )
        for key in sorted(before.keys() & after.keys()):
            old, item = before[key], after[key]
            if old.detail != item.detail:
                detail = f"{old.detail or '(none)'} -> {item.detail or '(none)'}"
                touches = touching(kind, key, item.detail) or touching(kind, key, old.detail)
                changes.append(Change(kind, key, "changed", detail, item.where, touches))
    return changes


def _line(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:2])


def presence(target: Surfaces, version: str) -> list[Presence]:
    """Each known surface, found in ``target`` or not (entries past their ``until`` skipped)."""
    rows = []
    for known in KNOWN:
        if known.until and _line(version) > _line(known.until):
            continue
        if known.since and _line(version) < _line(known.since):
            continue
        item = find(known, target)
        rows.append(Presence(known, item is not None, item.where if item else ""))
    return rows
