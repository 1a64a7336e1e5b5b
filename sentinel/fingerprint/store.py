"""The correctness fingerprint's file: one small JSON document beside the diagnostics bundles.

Written atomically (a temporary file, flushed and synced, renamed into place),
so a reader sees the old document or the new, never half of one. What is read
back is treated as hostile: capped in size, parsed strictly (no NaN or
Infinity constants), every field typed and bounded; an entry that is not well
formed is dropped with a warning and never trusted, and an unusable file is
no fingerprint at all (the next check takes one again).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sentinel.canary.correctness import Fingerprint
from sentinel.canary.result import Generation
from sentinel.capped import FileTooLarge, read_capped_file
from sentinel.telemetry.logging import get_logger

log = get_logger("sentinel.fingerprint")

FILE_NAME = "fingerprints.json"
FORMAT = 1
MAX_FILE_BYTES = 1024 * 1024
MAX_KEPT = 32  # fingerprints kept on disk, newest first (models and weight versions served)
MAX_TEXT = 512
MAX_GENERATIONS = 16
MAX_TOKENS = 256
MAX_TOKEN_ID = 1 << 31
MAX_CANDIDATES = 8  # per token, as a reply is cut (sentinel.canary.replies)


class FingerprintStore:
    """One JSON file of fingerprints, newest first, written atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> list[Fingerprint]:
        """What the file holds; [] when there is none or it is unusable (logged)."""
        try:
            raw = read_capped_file(self.path, MAX_FILE_BYTES)
        except FileNotFoundError:
            return []
        except OSError as exc:
            log.warning("fingerprint_file_unreadable", path=str(self.path), error=str(exc))
            return []
        except FileTooLarge:
            log.warning("fingerprint_file_unreadable", path=str(self.path), error="too large")
            return []
        try:
            document = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
        except (ValueError, UnicodeDecodeError) as exc:
            log.warning("fingerprint_file_unreadable", path=str(self.path), error=str(exc)[:200])
            return []
        entries = document.get("fingerprints") if isinstance(document, dict) else None
        if not isinstance(entries, list):
            log.warning("fingerprint_file_unreadable", path=str(self.path), error="no list")
            return []
        prints = [p for p in (fingerprint_from_json(e) for e in entries[:MAX_KEPT]) if p]
        if len(prints) != min(len(entries), MAX_KEPT):
            log.warning("fingerprint_entries_dropped", path=str(self.path))
        return prints

    def save(self, prints: Sequence[Fingerprint]) -> None:
        """Replace the file with ``prints`` (newest first); a reader sees the old or the new."""
        document = {"format": FORMAT, "fingerprints": [fingerprint_json(p) for p in prints]}
        text = json.dumps(document, allow_nan=False, separators=(",", ":"))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle, temp = tempfile.mkstemp(prefix=".fingerprints.", dir=self.path.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temp, self.path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a log-probability a fingerprint may hold")


def fingerprint_json(p: Fingerprint) -> dict[str, Any]:
    return {
        "model": p.model,
        "weights": p.weights,
        "request": p.request,
        "recorded_at": p.recorded_at,
        "why": p.why,
        "generations": [
            {
                "token_ids": list(g.token_ids),
                "logprobs": list(g.logprobs),
                "margins": list(g.margins),
                "runner_ups": list(g.runner_ups),
                "candidates": [[list(c) for c in step] for step in g.candidates],
            }
            for g in p.generations
        ],
    }


def fingerprint_from_json(data: Any) -> Fingerprint | None:
    """A fingerprint from what the file held, or None when any part is not well formed."""
    if not isinstance(data, dict):
        return None
    texts = [data.get(k) for k in ("model", "weights", "request", "why")]
    if not all(isinstance(t, str) and len(t) <= MAX_TEXT for t in texts):
        return None
    at, generations = data.get("recorded_at"), data.get("generations")
    if not isinstance(at, int | float) or isinstance(at, bool) or not 0 <= at < 1e11:
        return None
    if not isinstance(generations, list):
        return None
    if not 0 < len(generations) <= MAX_GENERATIONS:
        return None
    parsed = [_generation(g) for g in generations]
    if any(g is None for g in parsed):
        return None
    model, weights, request, why = (str(t) for t in texts)
    return Fingerprint(model, weights, request, tuple(g for g in parsed if g), float(at), why)


def _generation(data: Any) -> Generation | None:
    if not isinstance(data, dict):
        return None
    ids, values, margins = data.get("token_ids"), data.get("logprobs"), data.get("margins")
    if not isinstance(ids, list) or not isinstance(values, list) or not isinstance(margins, list):
        return None
    if not len(ids) == len(values) <= MAX_TOKENS or len(margins) not in (0, len(ids)):
        return None
    if not all(type(i) is int and 0 <= i < MAX_TOKEN_ID for i in ids):
        return None
    if not all(_number(v) and v <= 1e-3 for v in values):
        return None
    if not all(m is None or _number(m) for m in margins):
        return None
    runners = data.get("runner_ups", [])
    if not isinstance(runners, list) or len(runners) not in (0, len(ids)):
        return None
    if not all(r is None or _token(r) for r in runners):
        return None
    candidates = _candidates(data.get("candidates", []), len(ids))
    if candidates is None:
        return None
    return Generation(
        tuple(ids), tuple(float(v) for v in values), tuple(margins), tuple(runners), candidates
    )


def _candidates(data: Any, tokens: int) -> tuple[tuple[tuple[int | None, float], ...], ...] | None:
    """Each token's other candidates, ``[[id or null, lead], ...]`` per token; absent in files
    written before they were kept (those fingerprints judge by their one runner-up)."""
    if not isinstance(data, list) or len(data) not in (0, tokens):
        return None
    steps: list[tuple[tuple[int | None, float], ...]] = []
    for step in data:
        if not isinstance(step, list) or len(step) > MAX_CANDIDATES:
            return None
        pairs: list[tuple[int | None, float]] = []
        for pair in step:
            if not isinstance(pair, list) or len(pair) != 2:
                return None
            ident, lead = pair
            if not (ident is None or _token(ident)) or not _number(lead):
                return None
            pairs.append((ident, float(lead)))
        steps.append(tuple(pairs))
    return tuple(steps)


def _token(value: Any) -> bool:
    return type(value) is int and 0 <= value < MAX_TOKEN_ID


def _number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and abs(value) < 1e6
