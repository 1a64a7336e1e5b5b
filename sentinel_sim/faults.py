"""The simulator's fault catalog: names, parameters, parsing and the live fault table.

A fault is switched on with optional parameters and an optional duration, and
switched off explicitly or when its duration runs out. The API process owns the
authoritative :class:`FaultTable`; faults that act inside the engine are
forwarded to it with their absolute deadline (``time.monotonic`` is one clock
for every process on the machine), so the engine can expire them on its own
even while the API process is busy.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Fault(StrEnum):
    """Every fault the simulator can inject; the strings are the public names."""

    ENGINE_HANG = "engine_hang"  # engine loop blocks; /health 200; /metrics frozen
    STRUCTURED_HANG = "structured_hang"  # grammar compilation never ends: structured requests wait
    MULTIMODAL_HANG = "multimodal_hang"  # image preprocessing blocks; later image requests queue
    STREAM_STALL = "stream_stall"  # requests stop receiving tokens after `after` tokens
    SLOW_DECODE = "slow_decode"  # step period multiplied by `factor`: degraded, progressing
    ERROR_5XX = "error_5xx"  # generation answers 5xx with probability `rate`
    GARBAGE = "garbage"  # replies broken: `mode` invalid_json | schema_break
    BLACKHOLE = "blackhole"  # connections accepted, requests never answered
    EXIT = "exit"  # the API server exits (after `delay` seconds)
    # Hang shapes that look busy: the engine makes no progress while something still moves.
    STUCK_RUNNING = "stuck_running"  # engine hung with `requests` real requests in running
    WAITING_CHURN = "waiting_churn"  # engine hung; the waiting gauge keeps changing
    PREEMPTION_CHURN = "preemption_churn"  # engine hung; num_preemptions_total keeps growing
    PREFILL_NO_DECODE = "prefill_no_decode"  # prompts are prefilled; no token is ever decoded
    STALL_AFTER_FIRST = "stall_after_first"  # every stream stops after its first token
    # Broken shapes: every request fails fast.
    RESET_ALL = "reset_all"  # each generation request's connection closed, no response
    EMPTY_200 = "empty_200"  # HTTP 200 with zero generated tokens, engine untouched
    LISTENER_CLOSED = "listener_closed"  # the API port closes for good; the process lives
    METRICS_LAPSE = "metrics_lapse"  # /metrics never answers; serving goes on


#: Faults during which the engine takes no step at all (its loop is blocked).
HUNG_FAULTS = frozenset(
    {Fault.ENGINE_HANG, Fault.STUCK_RUNNING, Fault.WAITING_CHURN, Fault.PREEMPTION_CHURN}
)

#: Faults that leave real (non-canary) requests stuck in ``running``, seeded by the engine.
STUCK_FAULTS = frozenset(
    {Fault.STUCK_RUNNING, Fault.WAITING_CHURN, Fault.PREEMPTION_CHURN, Fault.STALL_AFTER_FIRST}
)

#: Faults that act inside the engine process and are forwarded to it.
ENGINE_FAULTS = HUNG_FAULTS | {
    Fault.STRUCTURED_HANG,
    Fault.STREAM_STALL,
    Fault.SLOW_DECODE,
    Fault.PREFILL_NO_DECODE,
    Fault.STALL_AFTER_FIRST,
}

GARBAGE_MODES = ("invalid_json", "schema_break")


class FaultError(ValueError):
    """A fault name or parameter the simulator does not understand."""


def _positive(name: str) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        number = float(value)
        if number <= 0:
            raise FaultError(f"{name} must be > 0, got {value!r}")
        return number

    return check


def _non_negative(name: str) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        number = float(value)
        if number < 0:
            raise FaultError(f"{name} must be >= 0, got {value!r}")
        return number

    return check


def _rate(value: Any) -> float:
    number = float(value)
    if not 0.0 <= number <= 1.0:
        raise FaultError(f"rate must be within 0..1, got {value!r}")
    return number


def _mode(value: Any) -> str:
    text = str(value)
    if text not in GARBAGE_MODES:
        raise FaultError(f"mode must be one of {', '.join(GARBAGE_MODES)}, got {value!r}")
    return text


def _status(value: Any) -> int:
    number = int(value)
    if not 500 <= number <= 599:
        raise FaultError(f"status must be a 5xx code, got {value!r}")
    return number


def _count(value: Any) -> int:
    number = int(value)
    if number < 0:
        raise FaultError(f"must be >= 0, got {value!r}")
    return number


# name -> {param: (coerce, default)}
_PARAMS: dict[Fault, dict[str, tuple[Callable[[Any], Any], Any]]] = {
    Fault.ENGINE_HANG: {},
    Fault.STRUCTURED_HANG: {},
    Fault.MULTIMODAL_HANG: {},
    Fault.STREAM_STALL: {"after": (_count, 1)},
    # token_s > 0 sets the step period outright (2.0: two seconds per token); else factor.
    Fault.SLOW_DECODE: {
        "factor": (_positive("factor"), 10.0),
        "token_s": (_non_negative("token_s"), 0.0),
    },
    Fault.ERROR_5XX: {"rate": (_rate, 1.0), "status": (_status, 500)},
    Fault.GARBAGE: {"mode": (_mode, "invalid_json")},
    Fault.BLACKHOLE: {},
    Fault.EXIT: {"delay": (_non_negative("delay"), 0.0), "code": (int, 1)},
    Fault.STUCK_RUNNING: {"requests": (_count, 1)},
    Fault.WAITING_CHURN: {"requests": (_count, 1), "period": (_positive("period"), 0.5)},
    Fault.PREEMPTION_CHURN: {"requests": (_count, 1), "period": (_positive("period"), 0.5)},
    Fault.PREFILL_NO_DECODE: {},
    Fault.STALL_AFTER_FIRST: {"requests": (_count, 1)},
    Fault.RESET_ALL: {},
    Fault.EMPTY_200: {},
    Fault.LISTENER_CLOSED: {},
    Fault.METRICS_LAPSE: {},
}


# Faults acting inside the engine may aim at one data-parallel engine
# (``engine: 1``); without it they act on every engine.
for _fault in ENGINE_FAULTS:
    _PARAMS[_fault]["engine"] = (_count, None)


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """One requested fault: validated parameters and an optional duration in seconds."""

    fault: Fault
    params: Mapping[str, Any] = field(default_factory=dict)
    duration: float | None = None

    @classmethod
    def build(
        cls, name: str, params: Mapping[str, Any] | None = None, duration: float | None = None
    ) -> FaultSpec:
        try:
            fault = Fault(name)
        except ValueError:
            known = ", ".join(f.value for f in Fault)
            raise FaultError(f"unknown fault {name!r}; known: {known}") from None
        allowed = _PARAMS[fault]
        given = dict(params or {})
        unknown = sorted(set(given) - set(allowed))
        if unknown:
            raise FaultError(f"fault {name} takes no parameter(s) {', '.join(unknown)}")
        values: dict[str, Any] = {}
        for key, (coerce, default) in allowed.items():
            if key not in given and default is None:
                continue  # an optional aim (``engine``): absent means every one
            try:
                values[key] = coerce(given[key]) if key in given else default
            except (TypeError, ValueError) as exc:
                raise FaultError(f"fault {name}: bad {key}: {exc}") from None
        if duration is not None:
            duration = float(duration)
            if duration <= 0:
                raise FaultError(f"fault {name}: duration must be > 0")
        return cls(fault, values, duration)

    @classmethod
    def parse(cls, text: str) -> FaultSpec:
        """Parse the CLI form ``NAME[:k=v,...]``; ``duration`` is one of the keys."""
        name, _, rest = text.partition(":")
        params: dict[str, str] = {}
        for item in filter(None, (part.strip() for part in rest.split(","))):
            key, sep, value = item.partition("=")
            if not sep:
                raise FaultError(f"fault parameter {item!r} is not key=value")
            params[key.strip()] = value.strip()
        duration = params.pop("duration", None)
        return cls.build(name.strip(), params, float(duration) if duration else None)


@dataclass(frozen=True, slots=True)
class ActiveFault:
    """A fault switched on, with the monotonic deadline at which it ends (None: never)."""

    fault: Fault
    params: Mapping[str, Any]
    until: float | None

    def live(self, now: float) -> bool:
        return self.until is None or now < self.until

    def describe(self, now: float) -> dict[str, Any]:
        remaining = None if self.until is None else max(0.0, self.until - now)
        return {"name": self.fault.value, "params": dict(self.params), "remaining_s": remaining}


class FaultTable:
    """The faults in force; expired entries read as absent, so no timer is needed."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._active: dict[Fault, ActiveFault] = {}

    def set(self, spec: FaultSpec) -> ActiveFault:
        until = None if spec.duration is None else self._clock() + spec.duration
        entry = ActiveFault(spec.fault, dict(spec.params), until)
        self._active[spec.fault] = entry
        return entry

    def put(self, entry: ActiveFault) -> None:
        self._active[entry.fault] = entry

    def clear(self, fault: Fault | None = None) -> None:
        if fault is None:
            self._active.clear()
        else:
            self._active.pop(fault, None)

    def get(self, fault: Fault) -> ActiveFault | None:
        entry = self._active.get(fault)
        if entry is None:
            return None
        if not entry.live(self._clock()):
            del self._active[fault]
            return None
        return entry

    def active(self) -> list[ActiveFault]:
        return [e for f in list(self._active) if (e := self.get(f)) is not None]

    def next_expiry(self) -> float | None:
        deadlines = [e.until for e in self.active() if e.until is not None]
        return min(deadlines) if deadlines else None
