"""The simulator's fault catalog: names, parameters, parsing and the live fault table.

A fault is switched on with optional parameters and an optional duration, and
switched off explicitly or when its duration runs out. The API process owns the
authoritative :class:`FaultTable`; faults that act inside the engine are
forwarded to it with their absolute deadline (``time.monotonic`` is one clock
for every process on the machine), so the engine can expire them on its own
even while the API process is busy.

The legitimate-stall states (vLLM 0.32 doing what it was asked, while every
request waits; a health checker must not call them hangs):

``long_prefill`` (``tokens`` 60000, ``chunk`` 0, ``prefill_tps`` 0,
``max_tokens`` 16, ``priority`` 0)
    The engine seeds one real (non-canary) request with a ``tokens``-long
    prompt. It prefills chunk by chunk, each step taking the whole token
    budget (``chunk`` if set, else ``--max-num-batched-tokens``) and lasting
    ``chunk / prefill_tps`` seconds (``prefill_tps`` if set, else
    ``--prefill-tps``), so every waiting request, priority canaries included,
    waits until its first token; then it decodes ``max_tokens`` and finishes.
    Only gauges move meanwhile: running >= 1, waiting = the queued requests,
    ``vllm:kv_cache_usage_perc`` up one chunk per step. ``tokens`` plus
    ``max_tokens`` must fit in ``--kv-cache-tokens`` (the control port refuses
    the fault otherwise; the default 65536 takes the default 60000). A stall of
    100 s: ``tokens=200000,prefill_tps=2000`` on a simulator started with
    ``--kv-cache-tokens 262144`` (25 chunks of 8192, about 4 s each). Clearing the
    fault (or its duration running out) aborts the request if it is still in
    flight; its natural end does not clear the fault.
``sleep`` (``level`` 0|1|2, default 1; ``mode`` queue|503, default queue;
``pause`` abort|wait|keep, default abort)
    Sleep mode, as ``POST /sleep?level=N&mode=...``: the scheduler is paused
    first (``pause``: vLLM's ``mode``), then ``vllm:engine_sleep_state`` reads
    ``awake`` 0 and ``weights_offloaded`` 1 (level 1) or ``discard_all`` 1
    (level 2; level 0 sets none). No step runs, so the scheduler gauges keep
    their last values; generation requests wait unscheduled until wake-up
    (``mode=queue``, vLLM 0.32) or get 503 at once (``mode=503``, what vLLM's
    older sleep-mode documentation describes); ``/health`` answers 200.
``pause`` (``mode`` keep|wait|abort, default keep)
    The scheduler is paused, as ``POST /pause``: ``keep`` freezes running and
    waiting requests and queues new ones; ``wait`` lets running requests finish
    and queues the rest; ``abort`` aborts every request in the engine (their
    clients get ``finish_reason`` ``abort``). No step runs (under ``wait``, once
    the running ones are done), the gauges describe the last finished step,
    ``/is_paused`` and ``/is_sleeping`` both say true, the sleep gauge says awake.
    Under ``--release 0.33`` and later, ``wait`` and ``abort`` reject each new
    request instead (vLLM's engine core): 503 "Generation is paused. Please
    retry after it resumes.", or a streamed request's HTTP 200 then an error
    event with code 503. ``checkpoint`` (0.34's ``/checkpoint/prepare`` and
    ``--checkpoint-prepare-on-startup``) rejects so in every release form, and
    ``/resume`` refuses to end it: only ``POST /checkpoint/restore`` does.
``refuse`` (``message``, ``status`` 503, ``stream`` event|body, default event)
    Every generation request is refused at once with ``status`` and an error
    body carrying ``message`` (default: words no vLLM release sends, a state
    sentinel does not know); a streamed request gets HTTP 200, then the error
    as an SSE event with its ``code``, then ``[DONE]`` (``stream=body``: the
    plain answer). With vLLM's admission text it is the streamed admission
    refusal a proxy or an engine-side check gives.
``weight_update`` (``operation`` start|update|finish|..., default update;
``version``)
    The engine is inside a weight-transfer RPC: its loop runs no step (as a
    collective RPC blocks vLLM's engine core), requests and engine queries
    (``/is_paused``, ``/weight_info``) wait, and
    ``vllm:rl_weight_update_operations_in_flight{operation=...}`` reads 1.
    When it ends the gauge reads 0 and, with ``version``, ``/weight_info``
    reports that version.
``compile_step`` (``seconds`` 5, ``compiler`` ptxas|nvcc|cc1plus|ninja|none, ``storm``)
    The engine's next step lasts ``seconds``: its loop blocks (no stats, no
    message taken in) while a child process named like the compiler (psutil
    ``name()`` and ``cmdline()[0]``) burns CPU; the child is reaped when the
    step ends. ``compiler=none`` compiles in-process (NVRTC-like): no child,
    the engine itself burns CPU, which looks exactly like ``engine_hang`` with
    ``spin=true`` while it lasts.
    ``storm=true`` (``child_s`` 0.3, ``gap_s`` 0.2) is a Triton autotuning or
    JIT storm: the step spawns one short-lived compiler after another, each
    burning CPU for ``child_s`` and exiting, ``gap_s`` apart, so a sampler
    sees a compiler in some samples only and never the same pid twice.
``slow_image`` (``seconds`` 2)
    Each image request spends ``seconds`` in the API process's single-worker
    preprocessing queue, behind earlier image requests, then completes
    normally; text requests are unaffected.
``decode_dead``
    vLLM #45094 (TP 2, PP 2): the decode loop died while prefill lives. Every
    request is prefilled at once and gets its first token (prompt, first-token
    and iteration counters keep moving, one-token requests complete), and
    never a second: it stays in ``running`` until its client gives up. The
    engine keeps stepping and using CPU, ``/health`` and ``/v1/models`` answer
    200. Unlike ``stall_after_first`` it seeds no stuck request: the canaries
    (and whatever clients arrive) are all the traffic there is. A broken
    state, not a legitimate stall; its working twins are one-token traffic at
    saturation, ``slow_decode`` and ``long_prefill``.
``metrics_401``
    ``/metrics`` answers 401 with ``WWW-Authenticate``; serving goes on.
``elastic_scale`` (``commit`` ok|fail, ``retire`` false, ``size`` 2)
    An elastic expert-parallel scale, as ``POST /scale_elastic_ep`` runs one:
    vLLM's scaling middleware answers the OpenAI port 503 with "The model is
    currently scaling. Please try again later." for the fault's duration
    (none: a scale that never ends; every path in ``--elastic-ep-release
    0.32``, all but ``/health`` and ``POST /is_scaling_elastic_ep`` in 0.33,
    whose status walks ``preparing``, ``committing``, then ``completed``). A
    ``size`` above the current one is a scale-up: every counter restarts at 0.
    ``commit=fail`` ends it in phase ``failed`` with the gate left up for good;
    ``retire=true`` (0.33) retires this rank from the commit on: every path
    but those two answers 503 "This data-parallel rank has been retired and
    is awaiting shutdown.", ``/health`` 200 whatever its engine does.
    ``sentinel_sim.elastic_ep``; the engine is untouched.
``remote_kv`` (``seconds`` 2, ``land`` after|never, ``connector`` nixl|mooncake)
    A disaggregated decode node (vLLM's NIXL or Mooncake KV connector): a
    request whose body carries ``kv_transfer_params`` with
    ``do_remote_prefill`` true (what a disaggregation proxy sends; sentinel's
    canaries carry none and are served locally) gets its KV blocks allocated
    and then waits in ``WAITING_FOR_REMOTE_KVS``, counted in
    ``vllm:num_requests_waiting_by_reason{reason="deferred"}``, neither
    running nor generating, until its transfer lands ``seconds`` later; then
    it is admitted with its prompt already computed and decodes.
    ``land=never`` is the broken twin (Mooncake's decode side waiting forever,
    NIXL notifications lost): nothing lands, deferred requests pile up and
    hold their blocks. ``connector=nixl`` publishes the NIXL connector's
    ``vllm:nixl_xfer_time_seconds`` histogram (one observation per landed
    transfer) and its failure counters from the first step under the fault;
    ``mooncake`` publishes none. Without the fault the field is ignored, as
    vLLM without a KV connector ignores it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sentinel_sim.scheduler import RemoteKv


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
    # vLLM #45094: the decode loop died after the first token, prefill alive (no seeded
    # requests; the engine keeps stepping and burning CPU); see the module docstring.
    DECODE_DEAD = "decode_dead"
    # Only requests with priority below `below` are admitted: a leaked KV cache
    # or a scheduler bug starves real traffic while the priority canary passes.
    STARVE = "starve"
    # A caching or deduplicating proxy in front: a request body seen before is
    # answered from the cache, whatever the engine does.
    CACHE_FRONT = "cache_front"
    # One of several API-server processes (--api-server-count) wedged: its event loop
    # blocks (or spins, with `spin`) for the fault's duration; `server` 1..N-1.
    API_WEDGE = "api_wedge"
    # Broken shapes: every request fails fast.
    RESET_ALL = "reset_all"  # each generation request's connection closed, no response
    EMPTY_200 = "empty_200"  # HTTP 200 with zero generated tokens, engine untouched
    LISTENER_CLOSED = "listener_closed"  # the API port closes for good; the process lives
    METRICS_LAPSE = "metrics_lapse"  # /metrics never answers; serving goes on
    METRICS_401 = "metrics_401"  # /metrics answers 401 (a proxy wanting credentials)
    # Legitimate stalls: vLLM 0.32 states in which requests wait while nothing is broken.
    LONG_PREFILL = "long_prefill"  # a real request with a `tokens`-long prompt prefills
    SLEEP = "sleep"  # sleep mode `level` 0|1|2; requests queue (or 503 under mode=503)
    PAUSE = "pause"  # the scheduler is paused (`mode` keep|wait|abort), as by POST /pause
    WEIGHT_UPDATE = "weight_update"  # the engine is inside an RL weight-update RPC
    COMPILE_STEP = "compile_step"  # one step lasts `seconds` while a compiler child runs
    SLOW_IMAGE = "slow_image"  # each image request waits `seconds` in the preprocessing queue
    # An elastic EP scale (POST /scale_elastic_ep): every path answers vLLM's scaling 503
    # for the fault's duration (none: a scale that never ends); sentinel_sim.elastic_ep.
    ELASTIC_SCALE = "elastic_scale"
    # Silent corruption: every free-text reply one token repeated (weights lost on wake-up;
    # schema-constrained replies stay valid), or new weights declared at /weight_info.
    WEIGHTS_LOST = "weights_lost"
    WEIGHTS_UPDATED = "weights_updated"  # replies change; `version` declared, as RL updates do
    NO_LOGPROBS = "no_logprobs"  # a proxy in front strips log-probabilities (`logprobs` null)
    NEAR_TIES = "near_ties"  # GPU batch variance: close candidates; `flip` none|third|far
    # A disaggregated decode node: requests marked remote wait `seconds` for their KV
    # (deferred), or forever with `land: never` (transfers that never land).
    REMOTE_KV = "remote_kv"
    # Idle auto-sleep's broken twin (--sleep-idle-ttl): a request's wake never completes.
    WAKE_HANG = "wake_hang"
    # A deliberate refusal in any words: `status` with `message`, streamed as an error event.
    REFUSE = "refuse"


#: Faults during which the engine takes no step at all (its loop is blocked).
HUNG_FAULTS = frozenset(
    {
        Fault.ENGINE_HANG,
        Fault.STUCK_RUNNING,
        Fault.WAITING_CHURN,
        Fault.PREEMPTION_CHURN,
        Fault.WEIGHT_UPDATE,
    }
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
    Fault.DECODE_DEAD,
    Fault.STARVE,
    Fault.LONG_PREFILL,
    Fault.SLEEP,
    Fault.PAUSE,
    Fault.COMPILE_STEP,
    Fault.REMOTE_KV,
}

#: Faults that pause the scheduler, as vLLM's ``pause_scheduler`` does (sleep pauses first).
PAUSING_FAULTS = frozenset({Fault.PAUSE, Fault.SLEEP})

GARBAGE_MODES = ("invalid_json", "schema_break")
#: The ``refuse`` fault's default words: no vLLM release sends them.
UNKNOWN_REFUSAL = "Maintenance in progress: this replica is draining. Retry elsewhere."
#: vLLM's ``PauseMode``: what a pause (or a sleep) does with the requests in flight.
PAUSE_MODES = ("abort", "wait", "keep")
#: How the simulator answers generation requests while asleep (``sleep`` fault, ``mode``).
SLEEP_ANSWERS = ("queue", "503")
#: The RL weight-transfer operations of vLLM's ``rl_weight_update_operations_in_flight``.
WEIGHT_OPERATIONS = ("init", "shutdown", "start", "start_draft", "update", "finish")
#: When a ``remote_kv`` transfer lands, and the KV connector the decode node runs.
KV_LANDINGS = ("after", "never")
KV_CONNECTORS = ("nixl", "mooncake")
#: Names a ``compile_step`` child can take (``none``: an in-process compiler such as NVRTC).
COMPILERS = ("ptxas", "nvcc", "cc1plus", "ninja", "none")


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


def _choice(name: str, choices: tuple[str, ...]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        text = str(value)
        if text not in choices:
            raise FaultError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
        return text

    return check


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise FaultError(f"must be a boolean, got {value!r}")


def _level(value: Any) -> int:
    number = int(value)
    if number not in (0, 1, 2):
        raise FaultError(f"level must be 0, 1 or 2, got {value!r}")
    return number


def _at_least_one(name: str) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        number = int(value)
        if number < 1:
            raise FaultError(f"{name} must be >= 1, got {value!r}")
        return number

    return check


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
    # spin: the hung loop burns CPU (a busy-waiting engine), instead of blocking idle.
    Fault.ENGINE_HANG: {"spin": (_bool, False)},
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
    Fault.DECODE_DEAD: {},
    Fault.STARVE: {"below": (int, 0)},
    Fault.CACHE_FRONT: {},
    Fault.API_WEDGE: {"server": (_at_least_one("server"), 1), "spin": (_bool, False)},
    Fault.RESET_ALL: {},
    Fault.EMPTY_200: {},
    Fault.WAKE_HANG: {},
    Fault.LISTENER_CLOSED: {},
    Fault.METRICS_LAPSE: {},
    Fault.METRICS_401: {},
    # tokens: the prompt; chunk (0: the --max-num-batched-tokens budget) and prefill_tps
    # (0: --prefill-tps) set the step budget and prefill pace while it prefills.
    Fault.LONG_PREFILL: {
        "tokens": (_at_least_one("tokens"), 60000),
        "chunk": (_count, 0),
        "prefill_tps": (_non_negative("prefill_tps"), 0.0),  # 0: not set
        "max_tokens": (_at_least_one("max_tokens"), 16),
        "priority": (int, 0),
    },
    Fault.SLEEP: {
        "level": (_level, 1),
        "mode": (_choice("mode", SLEEP_ANSWERS), "queue"),
        "pause": (_choice("pause", PAUSE_MODES), "abort"),
    },
    Fault.PAUSE: {
        "mode": (_choice("mode", PAUSE_MODES), "keep"),
        "checkpoint": (_bool, False),  # 0.34's checkpoint pause: only a restore ends it
    },
    Fault.REFUSE: {
        "message": (str, UNKNOWN_REFUSAL),
        "status": (_status, 503),
        "stream": (_choice("stream", ("event", "body")), "event"),
    },
    # version: the weight version /weight_info reports once the update is over.
    Fault.WEIGHT_UPDATE: {
        "operation": (_choice("operation", WEIGHT_OPERATIONS), "update"),
        "version": (str, None),
    },
    # storm: many short-lived compilers (child_s each, gap_s apart) instead of one.
    Fault.COMPILE_STEP: {
        "seconds": (_positive("seconds"), 5.0),
        "compiler": (_choice("compiler", COMPILERS), "ptxas"),
        "storm": (_bool, False),
        "child_s": (_positive("child_s"), 0.3),
        "gap_s": (_non_negative("gap_s"), 0.2),
    },
    Fault.SLOW_IMAGE: {"seconds": (_non_negative("seconds"), 2.0)},
    # commit: how the scale ends; retire: this rank is scaled away (0.33 external LB);
    # size: the data-parallel size asked for (above the current one: a scale-up).
    Fault.ELASTIC_SCALE: {
        "commit": (_choice("commit", ("ok", "fail")), "ok"),
        "retire": (_bool, False),
        "size": (_at_least_one("size"), 2),
    },
    Fault.WEIGHTS_LOST: {},
    Fault.WEIGHTS_UPDATED: {"version": (str, "v2")},
    Fault.NO_LOGPROBS: {},
    Fault.NEAR_TIES: {"flip": (_choice("flip", ("none", "third", "far")), "none")},
    Fault.REMOTE_KV: {
        "seconds": (_non_negative("seconds"), 2.0),
        "land": (_choice("land", KV_LANDINGS), "after"),
        "connector": (_choice("connector", KV_CONNECTORS), "nixl"),
    },
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


def remote_kv_of(entry: ActiveFault | None) -> RemoteKv | None:
    """What the ``remote_kv`` fault in force asks of the scheduler (None: no KV connector)."""
    if entry is None:
        return None
    never = entry.params.get("land") == "never"
    wait = math.inf if never else float(entry.params.get("seconds", 2.0))
    return RemoteKv(wait=wait, connector=str(entry.params.get("connector", "nixl")))
