"""Where bundles live on disk: one directory per incident, with retention.

Owns the layout under the diagnostics directory::

    DIR/
      20261129T101502Z-engine-hang/
        bundle.json     the redacted bundle (JSON)
        summary.txt     the human summary; its first line is the cause
        timeline.png    the incident as a picture (drawn by a capture's child and
                        by sentinel diagnose where matplotlib is installed)
        incident.json   a small index record, so listing never parses bundles
      20261129T104011Z-on-demand/
        ...

Each incident is written to a hidden temporary directory and renamed into
place, so a reader (``/incidents``, an operator's ``ls``, a crash mid-write)
never sees half a bundle. Everything written, and every summary read back,
passes :func:`sentinel.telemetry.redact.redact`: a bundle made by an older
version, or by a caller that skipped redaction, still leaks nothing through
the store. Retention keeps at most ``max_count`` incidents and
``max_total_bytes`` on disk, removing the oldest first; the newest incident
is always kept even when it alone exceeds the size limit.

Default directory: ``/tmp/sentinel-diagnostics`` (writable in almost every
image, and the same default as the daemon's settings). In a pod, mount an emptyDir (it survives
container restarts of the pod, which is the point: the bundle outlives the
vLLM restart it explains) and set ``--diagnostics-dir`` /
``SENTINEL_DIAGNOSTICS_DIR`` to it, e.g. ``/var/lib/sentinel/diagnostics``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sentinel.diagnostics.bundle import Incident
from sentinel.diagnostics.timeline import TIMELINE_FILE, draw
from sentinel.telemetry.logging import get_logger
from sentinel.telemetry.redact import redact

log = get_logger(__name__)

BUNDLE_FILE = "bundle.json"
SUMMARY_FILE = "summary.txt"
INDEX_FILE = "incident.json"
_TMP_PREFIX = ".tmp-"
_STALE_TMP_S = 3600.0


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    max_count: int = 20
    max_total_bytes: int = 200 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class IncidentRecord:
    """One stored incident, as ``/status`` and ``/incidents`` list it."""

    id: str
    path: str
    started_at: str | None
    trigger: str | None
    cause: str | None
    summary: str  # the one-line cause
    duration_s: float | None
    size_bytes: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class IncidentStore:
    """Writes, lists, reads and prunes incidents under one directory.

    Methods block on the filesystem; from the event loop use :meth:`write_async`
    and :meth:`incidents_async`.
    """

    def __init__(self, root: Path, retention: RetentionPolicy | None = None) -> None:
        self.root = Path(root)
        self.retention = retention or RetentionPolicy()

    def write(self, incident: Incident, *, timeline: bool = False) -> IncidentRecord:
        """Write atomically, then apply retention. Returns the stored record.

        ``timeline``: draw ``timeline.png`` from the bundle too (in a capture's
        child or a one-shot command, never in the daemon: matplotlib's memory).
        """
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{incident.id}-", dir=self.root))
        try:
            bundle = redact(incident.bundle)
            (tmp / BUNDLE_FILE).write_text(
                json.dumps(bundle, indent=1, default=str, sort_keys=False)
            )
            (tmp / SUMMARY_FILE).write_text(redact(incident.summary))
            index = {
                "started_at": incident.started_at,
                "trigger": incident.trigger.kind,
                "cause": incident.cause.value,
                "summary": redact(incident.cause_line),
                "duration_s": incident.duration_s,
            }
            if timeline:
                index["timeline"] = _draw_timeline(tmp, bundle)
            (tmp / INDEX_FILE).write_text(json.dumps(index))
            os.chmod(tmp, 0o750)
            final = self._free_name(incident.id)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        removed = self.prune(keep=final.name)
        record = self._record(final)
        log.info("diagnostics.stored", incident=final.name, path=str(final), pruned=removed or None)
        return record

    async def write_async(self, incident: Incident, *, timeline: bool = False) -> IncidentRecord:
        return await asyncio.to_thread(self.write, incident, timeline=timeline)

    def incidents(self) -> list[IncidentRecord]:
        """Stored incidents, newest first."""
        return [self._record(path) for path in reversed(self._dirs())]

    async def incidents_async(self) -> list[IncidentRecord]:
        return await asyncio.to_thread(self.incidents)

    def read(self, incident_id: str) -> dict[str, Any] | None:
        """The stored bundle, or None for an unknown (or unsafe) id."""
        if "/" in incident_id or incident_id.startswith("."):
            return None
        try:
            data: dict[str, Any] = json.loads((self.root / incident_id / BUNDLE_FILE).read_text())
        except (OSError, ValueError):
            return None
        return data

    def prune(self, keep: str | None = None) -> list[str]:
        """Remove the oldest incidents beyond the count and size limits; returns their ids."""
        self._remove_stale_tmp()
        dirs = self._dirs()
        sizes = {d: _size(d) for d in dirs}
        total = sum(sizes.values())
        removed: list[str] = []
        for d in list(dirs):
            over_count = len(dirs) > self.retention.max_count
            over_size = total > self.retention.max_total_bytes
            if not (over_count or over_size) or len(dirs) <= 1:
                break
            if d.name == keep:
                continue
            shutil.rmtree(d, ignore_errors=True)
            dirs.remove(d)
            total -= sizes[d]
            removed.append(d.name)
        return removed

    def _dirs(self) -> list[Path]:
        """Incident directories, oldest first (names start with a UTC timestamp)."""
        try:
            entries = list(self.root.iterdir())
        except OSError:
            return []
        return sorted(
            (e for e in entries if e.is_dir() and not e.name.startswith(".")), key=lambda p: p.name
        )

    def _free_name(self, incident_id: str) -> Path:
        candidate = self.root / incident_id
        n = 2
        while candidate.exists():
            candidate = self.root / f"{incident_id}-{n}"
            n += 1
        return candidate

    def _remove_stale_tmp(self) -> None:
        try:
            entries = list(self.root.iterdir())
        except OSError:
            return
        now = time.time()
        for entry in entries:
            if entry.name.startswith(_TMP_PREFIX):
                try:
                    if now - entry.stat().st_mtime > _STALE_TMP_S:
                        shutil.rmtree(entry, ignore_errors=True)
                except OSError:
                    continue

    def _record(self, path: Path) -> IncidentRecord:
        meta: dict[str, Any] = {}
        try:
            data = json.loads((path / INDEX_FILE).read_text())
            if isinstance(data, dict):
                meta = data
        except (OSError, ValueError):
            pass
        return IncidentRecord(
            id=path.name,
            path=str(path),
            started_at=meta.get("started_at"),
            trigger=meta.get("trigger"),
            cause=meta.get("cause"),
            summary=redact(str(meta.get("summary") or "")),
            duration_s=meta.get("duration_s"),
            size_bytes=_size(path),
        )


def incidents_payload(records: list[IncidentRecord]) -> dict[str, Any]:
    """The JSON body for ``/incidents`` (and the ``incidents`` key of ``/status``)."""
    return {"count": len(records), "incidents": [r.to_json() for r in records]}


def _draw_timeline(directory: Path, bundle: dict[str, Any]) -> str:
    """Draw the bundle's timeline beside it; what it shows, or why it was not drawn."""
    try:
        png, said = draw(bundle)
    except Exception as exc:  # a picture never costs the bundle
        log.warning("diagnostics.timeline_failed", error=f"{type(exc).__name__}: {exc}")
        return f"not drawn: {type(exc).__name__}: {exc}"
    if png is None:
        return said
    (directory / TIMELINE_FILE).write_bytes(png)
    return f"{TIMELINE_FILE}: {said}"


def _size(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(dirpath, name))
            except OSError:
                continue
    return total
