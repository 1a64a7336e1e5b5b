"""The verdict's vocabulary: what it is given, what it remembers and what it answers.

Plain frozen dataclasses and names, no behaviour beyond formatting: the rules
(:mod:`sentinel.verdict.hangs`) and the evaluation
(:mod:`sentinel.verdict.decide`) read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, ClassVar

from sentinel.canary.correctness import CorrectnessEvidence
from sentinel.canary.refusal import Refusal, RefusalSeen
from sentinel.canary.result import CanaryResult
from sentinel.canary.spec import CanaryKind, OpenName
from sentinel.verdict.sections import SectionKey, T

if TYPE_CHECKING:  # a view's field: the verdict's modules load no process reader
    from sentinel.evidence.process_model import ProcessSnapshot


class HangKind(OpenName):
    """What was confirmed; also the ``kind`` label of ``sentinel_hang_detections_total``.

    ``engine``, ``partial`` (one data-parallel engine stuck while others
    serve), ``dead``, ``broken`` and ``listener_down`` are the verdict's own;
    a path hang takes the name of its canary kind, so a kind added to the
    registry brings its hang kind with it (see
    :func:`sentinel.verdict.registry.hang_kinds`).
    """

    __slots__ = ()
    ENGINE: ClassVar[HangKind]
    PARTIAL: ClassVar[HangKind]
    DEAD: ClassVar[HangKind]
    BROKEN: ClassVar[HangKind]
    LISTENER_DOWN: ClassVar[HangKind]
    PAUSED: ClassVar[HangKind]
    ASLEEP: ClassVar[HangKind]
    CORRUPT: ClassVar[HangKind]
    STARVED: ClassVar[HangKind]
    API_SERVER: ClassVar[HangKind]
    SCALING: ClassVar[HangKind]
    DEGENERATE: ClassVar[HangKind]
    WEIGHT_UPDATE: ClassVar[HangKind]
    KV_TRANSFER: ClassVar[HangKind]
    WAKE: ClassVar[HangKind]
    FAULT_TOLERANCE: ClassVar[HangKind]
    REFUSED: ClassVar[HangKind]


HangKind.ENGINE = HangKind("engine")
HangKind.PARTIAL = HangKind("partial")
HangKind.DEAD = HangKind("dead")
HangKind.BROKEN = HangKind("broken")
HangKind.LISTENER_DOWN = HangKind("listener_down")
HangKind.STARVED = HangKind("starved")  # real requests wait while the canaries pass
# One API-server process (of --api-server-count) stopped or not reading its connections.
HangKind.API_SERVER = HangKind("api_server")
HangKind.PAUSED = HangKind("paused")  # paused past its bound (policy alert by default)
HangKind.ASLEEP = HangKind("asleep")  # asleep past a bound, where one is set
HangKind.CORRUPT = HangKind("corrupt")  # answers that left the model's fingerprint
HangKind.SCALING = HangKind("scaling")  # an elastic EP scale that did not end within its bound
# Text canaries answering garbage (token 0's "!" repeated, undecodable text).
HangKind.DEGENERATE = HangKind("degenerate")
# A weight update in flight past its bound (its trainer may have died mid-transfer).
HangKind.WEIGHT_UPDATE = HangKind("weight_update")
# Requests deferred for their remote KV past a bound on a disaggregated decode node.
HangKind.KV_TRANSFER = HangKind("kv_transfer")
HangKind.WAKE = HangKind("wake")
# A fault-tolerance rank dead, or waiting for its retry past engine_recovery_timeout_sec.
HangKind.FAULT_TOLERANCE = HangKind("fault_tolerance")
# Refusing in words nobody taught sentinel past refusal_bound (verdict.hangs.refused).
HangKind.REFUSED = HangKind("refused")


class Phase(StrEnum):
    """The server's lifecycle: asleep and paused are legitimate stalls, never hangs."""

    AWAKE = "awake"
    ASLEEP = "asleep"  # sleep mode: weights offloaded or discarded
    PAUSED = "paused"  # scheduler paused, weights updating, or a maintenance window
    SCALING = "scaling"  # elastic expert-parallel scaling: vLLM answers every path 503
    RECOVERING = "recovering"  # fault tolerance: a rank waits for its retry (vLLM FT)
    # Elastic EP (0.33+, external LB): a rank scaled away, refusing all but /health until
    # its orchestrator ends it; unready, never restarted (its scale-down owns it).
    RETIRED = "retired"


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """Where the server is in its lifecycle, since when, and who said so."""

    phase: Phase = Phase.AWAKE
    since: float = 0.0
    why: str = ""
    # When the server last left a non-awake phase (None: never seen one this
    # epoch): windows start again there, and every kind must pass again.
    resumed_at: float | None = None
    # Since when ``why`` has said what it says (a weight update inside a pause
    # is timed from its own start); None: since ``since``.
    why_since: float | None = None
    # A lifecycle source that stopped answering (timeouts, 5xx): "" when every
    # source answers; its last word is kept meanwhile (record.lifecycle).
    cannot_tell: str = ""
    cannot_tell_since: float | None = None

    @property
    def stalled(self) -> bool:
        return self.phase is not Phase.AWAKE


class Action(StrEnum):
    """What a confirmed hang of a kind does to the kubelet answers."""

    RESTART = "restart"  # fail liveness (and readiness)
    UNREADY = "unready"  # fail readiness only
    ALERT = "alert"  # report only


@dataclass(frozen=True, slots=True)
class ProbeAnswer:
    """One kubelet-facing answer: pass or fail, and a short human reason."""

    ok: bool
    reason: str
    since: float = 0.0  # when this answer last flipped
    # A "not yet" that waits only on what is already under way (the first canaries of
    # a server's start, each kind's canary in flight): it may turn any moment, so the
    # HTTP probes hold it a moment (``probe_hold``) instead of failing a kubelet period.
    settling: bool = False


@dataclass(frozen=True, slots=True)
class KindEvidence:
    """What sentinel saw of one canary kind since the current server epoch began."""

    kind: CanaryKind
    action: Action = Action.RESTART
    enabled: bool = True
    disabled_reason: str = ""  # why a kind was set aside (the server cannot do it)
    # What the kind sends instead of its spec's request in this epoch, and why
    # (empty: as configured): the text canary on /v1/completions for a base
    # model without a chat template (:mod:`sentinel.scheduling.text_fallback`).
    fallback: str = ""
    # On its way to being set aside before startup, said while it waits (empty: not).
    set_aside_waiting: str = ""
    results: tuple[CanaryResult, ...] = ()  # oldest first
    outstanding: tuple[float, ...] = ()  # send times of canaries still in flight
    # The data-parallel engine each of ``outstanding`` was aimed at (aligned
    # with it; None or missing: unaimed).
    outstanding_engines: tuple[int | None, ...] = ()
    # For path kinds: the paired text control of each result (aligned with
    # ``results``; None when no control was sent).
    controls: tuple[CanaryResult | None, ...] = ()
    latency_slo: float | None = None
    # A path kind (structured, multimodal): judged by the path rule against its
    # text controls (the canary kind registry says which kinds are).
    path: bool = False
    # When real (not sentinel's) traffic on this path last got through, where
    # the server counts it (:mod:`sentinel.progress.path_traffic`); None: unknown.
    traffic_at: float | None = None


@dataclass(frozen=True, slots=True)
class EngineProgress:
    """One data-parallel engine's own work, from the ``engine`` label of vLLM's counters."""

    engine: str  # the label's value: "0", "1", ...
    first_seen_at: float  # first sample of this epoch that carried it
    last_progress_at: float | None = None  # its work moved beyond sentinel's own canaries
    # It counts first tokens, so its decode is told apart: then only its
    # decoded tokens and completions beyond sentinel's own vouch for it (an
    # engine whose decode is stuck still prefills what arrives).
    decode_available: bool = False
    last_decode_at: float | None = None
    last_prefill_at: float | None = None  # a prompt prefilled in chunks set a KV-cache high

    @property
    def vouched_at(self) -> float | None:
        """When its own work last vouched for it (decode progress where told apart, or prefill)."""
        work = self.last_decode_at if self.decode_available else self.last_progress_at
        if work is None or self.last_prefill_at is None:
            return work if work is not None else self.last_prefill_at
        return max(work, self.last_prefill_at)


@dataclass(frozen=True, slots=True)
class RestartGate:
    """The pool's restart budget's answer: may a confirmed restart fail liveness now?

    Closed while every restart slot of the pool is held by others
    (:mod:`sentinel.fleet.budget`); ``reason`` names the pool, the slots and their
    holders. Open when no budget applies.
    """

    open: bool = True
    reason: str = ""


# The two sections the evidence keeps as typed fields of its own (a provider hands each;
# sentinel.record.freeze moves them out of the sections): the fingerprint and the gate.
CORRECTNESS: SectionKey[CorrectnessEvidence] = SectionKey("correctness", CorrectnessEvidence)
RESTART_GATE: SectionKey[RestartGate] = SectionKey("restart_gate", RestartGate)


@dataclass(frozen=True, slots=True)
class Evidence:
    """Everything the verdict may use, gathered by the daemon at one instant."""

    epoch: int = 0  # increments when the server's identity changes
    epoch_started: float = 0.0
    kinds: Mapping[CanaryKind, KindEvidence] = field(default_factory=dict)
    progress_available: bool = False  # a fresh /metrics sample with a work counter
    last_progress_at: float | None = None  # work beyond sentinel's own canaries
    # Decode told apart from prefills and first tokens (the server counts
    # first tokens), from a fresh sample; then only decoded tokens and
    # completions beyond sentinel's own vouch for the engine.
    decode_available: bool = False
    last_decode_at: float | None = None
    # A prompt prefilled in chunks set a new KV-cache high while a real request
    # ran and none was admitted (:mod:`sentinel.progress.prefill`): work that moves no counter.
    last_prefill_at: float | None = None
    # Tokens processed by engine steps in a fresh sample: the engine loop's
    # heartbeat. ``steps_seen``: a work counter moved at all in this epoch
    # (sentinel's canaries included: the heartbeat beats); ``last_step_at``:
    # the last sample in which one moved beyond what sentinel's canaries
    # explain (a step that served only a canary of sentinel's, its prefill or
    # first token, excuses no canary); ``sampled_at``: the newest sample, the
    # moment up to which the heartbeat is known.
    steps_available: bool = False
    steps_seen: bool = False
    last_step_at: float | None = None
    sampled_at: float | None = None
    # The running and waiting gauges of that sample are both 0: the engine does
    # not even show the canaries sent to it (False: not so, or unknown).
    queue_empty: bool = False
    # The last moment a work counter was seen at all: without fresh evidence
    # the no-evidence window counts from here, not from an old canary.
    last_evidence_at: float | None = None
    last_real_completion_at: float | None = None  # a request not sentinel's completed
    health_failing_since: float | None = None  # vLLM /health non-200 since
    engine_down_since: float | None = None  # engine process stopped/zombie/gone since
    engine_down_detail: str = ""
    engine_down_stopped: bool = False  # every process behind it is stopped, none gone
    # Which data-parallel engines and tensor-parallel ranks the processes
    # behind ``engine_down_since`` belong to (empty: none named).
    down_engines: tuple[int, ...] = ()
    down_ranks: tuple[int, ...] = ()
    # Per-engine progress from a fresh sample; empty unless the server
    # exposes more than one engine.
    engines: tuple[EngineProgress, ...] = ()
    refused_since: float | None = None  # connections refused since (None: answering)
    api_alive: bool | None = None  # the target's API-server process lives (None: unknown)
    # Asleep, paused or in a maintenance window: no engine-side hang is confirmed.
    lifecycle: Lifecycle = Lifecycle()
    # Real requests (not sentinel's) shown waiting in every sample since (None:
    # none, or no fresh sample), and how many at the last one: starvation.
    waiting_since: float | None = None
    waiting_real: float = 0.0
    # Spans of time sentinel did not observe (its own process paused or
    # starved), oldest first: left out of every window, which pauses over
    # them and resumes after.
    unobserved: tuple[tuple[float, float], ...] = ()
    # The correctness check's fingerprint and vLLM's NaN counter (None: no check runs).
    correctness: CorrectnessEvidence | None = None
    # The pool's restart budget (sentinel.fleet.budget): closed, a restart waits unready.
    restart_gate: RestartGate = RestartGate()
    # Every other evidence provider's frozen section, by its key's name
    # (sentinel.record.provider), read only through :meth:`section`: the
    # engine's CPU, compilers under it, API-server processes stuck, ...
    sections: Mapping[str, object] = field(default_factory=dict)
    # The latest run of each deliberate refusal the server answered in this
    # epoch, by state (sentinel.record.refusals): a success ends every run.
    refusals: Mapping[Refusal, RefusalSeen] = field(default_factory=dict)
    # What the views show that no rule reads, frozen with the rest: /status, the bundle's
    # context and the state metrics render from the judged evidence, never the live record.
    model: str | None = None  # the model the server named (None: not told yet)
    epoch_reason: str = ""  # why the current epoch began
    reachable: bool | None = None  # the last request connected (None: none made yet)
    answered: bool = False  # the server answered in this epoch
    health_status: int | None = None  # vLLM /health's last status code
    departures: tuple[tuple[float, str], ...] = ()  # epochs ended lately: (at, reason)
    processes: ProcessSnapshot | None = None  # the last process sample (None: none)
    progress_signals: tuple[str, ...] = ()  # the work counters the server exposes
    progress_report: Mapping[str, object] = field(default_factory=dict)  # what moved
    # Waiting real requests and a chunked prefill as last seen, however old the sample.
    waiting_seen_since: float | None = None
    prefill_seen_at: float | None = None

    @property
    def enabled(self) -> tuple[KindEvidence, ...]:
        """The canary kinds enabled now, in the order they were given."""
        return tuple(k for k in self.kinds.values() if k.enabled)

    def section(self, key: SectionKey[T]) -> T | None:
        """The section ``key`` declares (None: absent or not of its type, so cannot tell)."""
        return key.read(self.sections)


@dataclass(frozen=True, slots=True)
class Hang:
    """A confirmed hang: its kind, the action its policy takes, why, and where.

    ``engines`` and ``ranks`` name the data-parallel engines and
    tensor-parallel ranks the hang is attributed to (empty: the whole server,
    or not known).
    """

    kind: HangKind
    action: Action
    reason: str
    since: float  # when the condition started (e.g. the oldest unanswered canary)
    engines: tuple[int, ...] = ()
    ranks: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Ineffective:
    """Restarts that did not fix a hang: it came back, the same, after each of them.

    ``cause`` is :func:`sentinel.verdict.cause.cause_key` of the hang;
    ``node`` the node the pod runs on ('' where the pod was not told).
    """

    cause: str
    restarts: int
    node: str = ""


@dataclass(frozen=True, slots=True)
class VerdictState:
    """What the verdict remembers between evaluations."""

    epoch: int = -1
    startup_passed: bool = False  # every enabled kind passed in this epoch (then it stays)
    served: bool = False  # the text canary passed in this epoch: /startupz passes (it stays)
    degraded: bool = False  # readiness hysteresis output
    bad_streak: int = 0
    good_streak: int = 0
    judged_until: float = float("-inf")  # finish time of the newest result judged
    # Real restarts the brake counts: starts of new epochs that followed an
    # enforced liveness-red episode (never red blips within one server).
    restarts: tuple[float, ...] = ()
    # The cause of each of those restarts (sentinel.verdict.cause), in the same order.
    causes: tuple[str, ...] = ()
    red_in_epoch: bool = False  # liveness failed for a hang in the current epoch
    red_cause: str = ""  # the cause liveness failed for in this epoch
    in_episode: bool = False
    braked: bool = False
    ineffective: Ineffective | None = None  # the brake holds a cause restarts did not fix
    confirmed: frozenset[HangKind] = frozenset()
    liveness: ProbeAnswer = ProbeAnswer(True, "no hang confirmed")
    readiness: ProbeAnswer = ProbeAnswer(False, "startup has not passed")
    startup: ProbeAnswer = ProbeAnswer(
        False, "waiting for every canary kind to succeed", settling=True
    )

    @property
    def episodes(self) -> tuple[float, ...]:
        """The restarts the brake counts (the name ``/status`` has long used)."""
        return self.restarts


@dataclass(frozen=True, slots=True)
class Verdict:
    """The answers plus what changed, for views, metrics, logs and Events."""

    liveness: ProbeAnswer
    readiness: ProbeAnswer
    startup: ProbeAnswer
    hangs: tuple[Hang, ...] = ()
    new_hangs: tuple[Hang, ...] = ()  # confirmed in this evaluation
    brake_engaged: bool = False
    # The brake holds a cause that came back after each of its restarts: look at the node.
    ineffective: Ineffective | None = None
    would_restart: bool = False  # a restart-action hang under observe-only mode
    new_epoch: bool = False
    # A confirmed restart-action hang, enforcing, brake off: the restart a slot is asked for.
    restart_wanted: bool = False
    budget_held: bool = False  # the pool's restart budget holds that restart: unready, live
