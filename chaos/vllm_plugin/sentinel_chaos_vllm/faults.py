"""The fault board: which faults are on, read from one file per fault in a directory.

Writers (``chaos.vllm_engine.faults.FaultSwitch``) place ``<name>.json`` atomically
(write a dot-file, rename it in); removing the file clears the fault. A check
on vLLM's hot path (every engine step) costs one ``stat`` of the directory: the
files are read again when its modification time changed, and in any case every
``interval`` seconds (the kernel's coarse timestamps can hide two changes in a
row).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

FAULT_DIR_ENV = "SENTINEL_CHAOS_FAULT_DIR"
FAULTS = frozenset(
    {
        "engine_hang",
        "structured_hang",
        "multimodal_hang",
        "stream_stall",
        "slow_decode",
        "corrupt_weights",
        "starve",
        "api_wedge",
    }
)
POLL_INTERVAL = 0.2
#: How long a blocked hook sleeps between checks.
PAUSE = 0.05


class FaultBoard:
    """A cached view of the fault directory, safe to share between threads."""

    def __init__(self, directory: Path, interval: float = POLL_INTERVAL) -> None:
        self.directory = directory
        self.interval = interval
        self._faults: Mapping[str, Mapping[str, Any]] = {}
        self._expires: Mapping[str, float] = {}
        self._next_scan = 0.0
        self._seen_mtime = -1
        self._lock = threading.Lock()

    def get(self, name: str) -> Mapping[str, Any] | None:
        """The parameters of fault ``name`` if it is on, else ``None``."""
        self._refresh()
        params = self._faults.get(name)
        if params is None:
            return None
        expires = self._expires.get(name)
        if expires is not None and time.time() >= expires:
            return None
        return params

    def _refresh(self) -> None:
        now = time.monotonic()
        try:
            mtime = os.stat(self.directory).st_mtime_ns
        except OSError:
            mtime = -1
        if now < self._next_scan and mtime == self._seen_mtime:
            return
        # Every thread that saw a change waits for a fresh view: a hook that read
        # the stale one while another thread was scanning would miss its fault.
        with self._lock:
            if now < self._next_scan and mtime == self._seen_mtime:
                return  # another thread scanned meanwhile
            self._scan()
            self._seen_mtime = mtime
            self._next_scan = now + self.interval

    def wait_while(self, name: str) -> None:
        """Block the calling thread while fault ``name`` is on."""
        while self.get(name) is not None:
            time.sleep(PAUSE)

    def _scan(self) -> None:
        faults: dict[str, Mapping[str, Any]] = {}
        expires: dict[str, float] = {}
        try:
            entries = list(os.scandir(self.directory))
        except OSError:
            entries = []
        for entry in entries:
            name, dot, suffix = entry.name.rpartition(".")
            if suffix != "json" or not dot or name.startswith(".") or name not in FAULTS:
                continue
            try:
                with open(entry.path, encoding="utf-8") as handle:
                    body = json.load(handle)
            except (OSError, ValueError):
                continue  # removed or replaced between listing and reading
            if not isinstance(body, dict):
                continue
            params = body.get("params") or {}
            faults[name] = params if isinstance(params, dict) else {}
            until = body.get("expires_at")
            if isinstance(until, int | float):
                expires[name] = float(until)
        self._faults, self._expires = faults, expires
