"""Switch the chaos plugin's faults on and off in a running real vLLM.

The plugin (``chaos/vllm_plugin``, import name ``sentinel_chaos_vllm``) watches
the directory named by ``SENTINEL_CHAOS_FAULT_DIR`` in every vLLM process. A
fault is on while ``<name>.json`` exists there. Files are written under a
temporary dot-name and renamed into place, so a reader never sees half a file.
The names and parameters match the simulator's control API.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

FAULT_DIR_ENV = "SENTINEL_CHAOS_FAULT_DIR"

#: fault -> {parameter: default}
FAULTS: Mapping[str, Mapping[str, Any]] = {
    "engine_hang": {"engine": None},
    "structured_hang": {},
    "multimodal_hang": {},
    "stream_stall": {"after": 1, "engine": None},
    "slow_decode": {"factor": 10.0, "step_seconds": None, "engine": None},
    # Weights corrupted in place (the plugin's sentinel_chaos_vllm.weights): zero, layers, nan.
    "corrupt_weights": {"mode": "zero", "engine": None},
    # The scheduler admits only requests whose priority is below `below` (the plugin's
    # Scheduler.schedule hook): real traffic starves while the priority canary passes.
    "starve": {"below": 0},
    # API-server process `server` (VLLM::APIServer_<server>) blocks its event loop.
    "api_wedge": {"server": 1},
}


class FaultSwitch:
    """Writes and removes fault files in one fault directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def set(self, name: str, *, duration: float | None = None, **params: Any) -> None:
        """Switch fault ``name`` on (for ``duration`` seconds, or until cleared)."""
        values = self._validate(name, params)
        body = {
            "params": values,
            "expires_at": None if duration is None else time.time() + duration,
        }
        handle, temp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=self.directory)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(body, out)
            os.replace(temp, self.directory / f"{name}.json")
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise

    def clear(self, name: str) -> None:
        if name not in FAULTS:
            raise ValueError(f"unknown fault {name!r}; known: {', '.join(FAULTS)}")
        (self.directory / f"{name}.json").unlink(missing_ok=True)

    def clear_all(self) -> None:
        for name in FAULTS:
            self.clear(name)

    def active(self) -> list[str]:
        """Faults whose files exist (expiry is judged by the plugin)."""
        return sorted(name for name in FAULTS if (self.directory / f"{name}.json").exists())

    @staticmethod
    def _validate(name: str, params: Mapping[str, Any]) -> dict[str, Any]:
        if name not in FAULTS:
            raise ValueError(f"unknown fault {name!r}; known: {', '.join(FAULTS)}")
        allowed = FAULTS[name]
        unknown = sorted(set(params) - set(allowed))
        if unknown:
            raise ValueError(f"fault {name} takes no parameter(s) {', '.join(unknown)}")
        values = {**allowed, **params}
        if "after" in values and int(values["after"]) < 0:
            raise ValueError(f"after must be >= 0, got {values['after']!r}")
        if "factor" in values and float(values["factor"]) <= 0:
            raise ValueError(f"factor must be > 0, got {values['factor']!r}")
        step = values.get("step_seconds")
        if step is not None and float(step) <= 0:
            raise ValueError(f"step_seconds must be > 0, got {step!r}")
        if "mode" in values and values["mode"] not in ("zero", "layers", "nan"):
            raise ValueError(f"mode must be zero, layers or nan, got {values['mode']!r}")
        engine = values.get("engine")
        if engine is not None and (isinstance(engine, bool) or int(engine) < 0):
            raise ValueError(f"engine must be a data-parallel rank >= 0, got {engine!r}")
        # Unset optional knobs stay out of the file: the plugin reads absence as "all".
        return {key: value for key, value in values.items() if value is not None}
