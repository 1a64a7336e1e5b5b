"""The ledger: what sentinel has seen of the current server, in memory.

Only ``sentinel/record`` writes it (the observers, the result sink, the planner);
the evaluation loop freezes it into :class:`~sentinel.verdict.Evidence`. One
event loop, so no locks: each method is a few synchronous lines.

A server (re)start — a new API server PID or start time, the attributed API
server exiting, or vLLM's work counters all going down together — opens a new
*epoch*: canary history and progress are forgotten and startup is earned
again. So does a server that went away: connections refused past the dead
grace with no process evidence that its API server lives (a restart loading
its model, a crash); whatever comes back is judged afresh, so a verdict never
outlives its server. A refusal while the API-server process is seen alive
is not a restart (it starts the *listener down* timer), and a reset is a
failed canary: neither says the server's identity changed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from sentinel.canary.result import CanaryResult
from sentinel.canary.spec import CanaryKind
from sentinel.evidence.metrics import MetricsSample
from sentinel.evidence.process_model import ProcessInfo, ProcessSnapshot, ProcessState, placed
from sentinel.progress.path_traffic import PathTraffic
from sentinel.progress.tracker import ProgressTracker
from sentinel.record.departures import Departures
from sentinel.record.elastic_ep import gate_of_canary, observe_gate
from sentinel.record.freeze import freeze
from sentinel.record.lifecycle import LifecycleTracker
from sentinel.record.plan import Plan
from sentinel.record.refusals import Refusals
from sentinel.verdict import Action, Evidence

_DOWN = (ProcessState.STOPPED, ProcessState.ZOMBIE, ProcessState.GONE)

HISTORY = 50  # results kept per kind (the verdict needs only the last few)
# Under data parallelism one idle-gated step sends a canary to every engine at
# once, so the history holds this many rounds per engine (DP 64: 256 results),
# else one engine's timeout is pushed out by the same round's answers.
ROUNDS_KEPT, MAX_ENGINES_KEPT = 4, 1_024


@dataclass(slots=True)
class KindRecord:
    """Per-kind canary history for the current epoch."""

    kind: CanaryKind
    action: Action
    latency_slo: float | None = None
    enabled: bool = True
    disabled_reason: str = ""
    # What the kind sends instead of its spec's request in this epoch, and why
    # (the text canary on /v1/completions for a model without a chat template).
    fallback: str = ""
    set_aside_waiting: str = ""  # "refused 2 of 5 before it is set aside" (record.set_aside)
    results: deque[CanaryResult] = field(default_factory=lambda: deque(maxlen=HISTORY))
    controls: deque[CanaryResult | None] = field(default_factory=lambda: deque(maxlen=HISTORY))
    outstanding: dict[int, float] = field(default_factory=dict)  # token -> send time
    aims: dict[int, int] = field(default_factory=dict)  # token -> engine it was aimed at
    # Timed-out canaries still awaited late: in ``results`` already, no longer
    # outstanding, but still in the engine, so their progress credit stays open.
    awaited: set[int] = field(default_factory=set)

    def make_room(self, engines: int) -> None:
        """Grow the history to :data:`ROUNDS_KEPT` rounds of ``engines`` canaries."""
        want = ROUNDS_KEPT * min(engines, MAX_ENGINES_KEPT)
        if want > (self.results.maxlen or 0):
            self.results = deque(self.results, maxlen=want)
            self.controls = deque(self.controls, maxlen=want)

    def clear(self) -> None:
        self.results.clear()
        self.controls.clear()
        self.enabled, self.disabled_reason = True, ""
        self.fallback = self.set_aside_waiting = ""


class Ledger:
    """In-memory evidence about one target server."""

    def __init__(
        self,
        kinds: Iterable[tuple[CanaryKind, Action, float | None]],
        now: float,
        *,
        on_refused: Callable[[], None] = lambda: None,  # sentinel.scheduling.departure
    ):
        self.records = {kind: KindRecord(kind, action, slo) for kind, action, slo in kinds}
        self.on_refused = on_refused  # told of a server's first refusal (its listener gone)
        self.progress = ProgressTracker()
        self.epoch = 0
        self.epoch_started = now
        self.epoch_reason = "sentinel started"
        self.reachable: bool | None = None
        self.refused_since: float | None = None  # connections refused since (None: answering)
        self.answered = False  # the server answered in this epoch (it can go away)
        self.departures = Departures()  # each epoch that ended: the server went away
        self.model: str | None = None
        self.health_status: int | None = None
        self.health_failing_since: float | None = None
        self.processes: ProcessSnapshot | None = None
        self.engine_down_since: float | None = None
        self.engine_down_detail = ""
        self.engine_down_stopped = False  # every process down is stopped (SIGSTOP, a tracer)
        self.down_engines: tuple[int, ...] = ()  # data-parallel engines of the down processes
        self.down_ranks: tuple[int, ...] = ()  # tensor-parallel ranks of the down processes
        # Titles and placements seen (pid, start time): a zombie keeps only its short name.
        self._placements: dict[tuple[int, float], ProcessInfo] = {}
        self.plan = Plan.fresh(self.epoch)  # what scheduling goes by (sentinel.record.plan)
        self._token = 0
        self.lifecycle = LifecycleTracker()
        self.traffic = PathTraffic()  # real traffic on each path (its kind's counter)
        self.waiting_since: float | None = None  # real requests waiting since (starvation)
        self.waiting_real = 0.0
        self.refusals = Refusals()  # the latest run of each deliberate refusal

    # -- epochs -------------------------------------------------------------
    def new_epoch(self, reason: str, now: float) -> None:
        """Forget everything about the previous server instance; keep that it departed."""
        self.departures.saw(now, reason)
        self.epoch += 1
        self.epoch_started = now
        self.epoch_reason = reason
        self.answered = False
        for record in self.records.values():
            record.clear()
        self.progress.reset()
        self.model = None
        self.health_failing_since = None
        self.engine_down_since = None
        self.engine_down_detail = ""
        self.engine_down_stopped = False
        self.down_engines, self.down_ranks = (), ()
        self.plan = Plan.fresh(self.epoch)
        self.lifecycle.reset()
        self.traffic.reset()
        self.waiting_since, self.waiting_real = None, 0.0
        self.refusals.reset()

    def observe_traffic(self, sample: MetricsSample) -> None:
        """Real path traffic and real requests waiting, from one sample."""
        self.traffic.observe(sample.counters, sample.at)
        # Real requests waiting: for room where the reason is told, less
        # sentinel's own canaries (any of them may be among the waiting).
        waiting = sample.gauges.get("waiting_capacity", sample.gauges.get("waiting"))
        own = max(self.progress.own_requests(sample), float(self.in_flight()))
        real = 0.0 if waiting is None else waiting - own
        self.waiting_real = max(real, 0.0)
        if real < 1.0:
            self.waiting_since = None
        elif self.waiting_since is None:
            self.waiting_since = sample.at

    def observe_lifecycle(self, now: float, **readings: object) -> None:
        """A new word from one lifecycle source (:class:`~sentinel.record.lifecycle.Readings`)."""
        self.lifecycle.update(replace(self.lifecycle.readings, **readings), now)  # type: ignore[arg-type]

    def saw_refusal(self, now: float) -> None:
        """A refused connection: never a restart by itself; it starts the listener-down timer."""
        if self.refused_since is None:
            self.refused_since = now
            self.on_refused()
        self.reachable = False

    def saw_answer(self) -> None:
        self.reachable = True
        self.refused_since = None
        self.answered = True

    def api_alive(self) -> bool | None:
        """Whether the target's API-server process lives (None: no process evidence)."""
        snapshot = self.processes
        if snapshot is None or snapshot.api is None:
            return None
        return snapshot.api.state not in _DOWN

    # -- canaries -----------------------------------------------------------
    def canary_sent(
        self,
        kind: CanaryKind,
        now: float,
        budget: Mapping[str, float] | None = None,
        *,
        engine: int | None = None,
    ) -> int:
        """Note a canary leaving; ``budget`` is the most work it can cause per counter.

        ``engine``: the data-parallel engine it is aimed at (None: unaimed).
        """
        self._token += 1
        self.traffic.canary_sent(kind, now)
        self.records[kind].outstanding[self._token] = now
        if engine is not None:
            self.records[kind].aims[self._token] = engine
        if budget:
            self.progress.canary_sent(self._token, now, budget, engine)
        return self._token

    def canary_abandoned(self, kind: CanaryKind, token: int, now: float) -> None:
        """A canary cancelled without a result: no longer outstanding, its work still discounted.

        Also ends the wait for a late answer that was cancelled (shutdown).
        """
        record = self.records[kind]
        record.aims.pop(token, None)
        awaited = token in record.awaited
        record.awaited.discard(token)
        if record.outstanding.pop(token, None) is not None or awaited:
            self.progress.canary_finished(token, None, now)

    @property
    def canaries_sent(self) -> int:
        """How many canaries left so far (a new one is evidence on its way)."""
        return self._token

    def in_flight(self) -> int:
        """Canaries in the engine right now, all kinds (awaited late ones included)."""
        return sum(
            len(record.outstanding) + len(record.awaited) for record in self.records.values()
        )

    def canary_done(
        self,
        kind: CanaryKind,
        token: int,
        result: CanaryResult,
        now: float,
        *,
        control: CanaryResult | None = None,
        epoch: int,
    ) -> None:
        """Record a finished canary unless the server restarted while it ran.

        A TIMEOUT result ``awaiting_late`` is recorded like any other, but its
        request is still in the engine: its progress credit stays open until
        :meth:`canary_late` (or :meth:`canary_abandoned`) ends the wait.
        """
        record = self.records[kind]
        record.outstanding.pop(token, None)
        record.aims.pop(token, None)
        if result.awaiting_late:
            record.awaited.add(token)
        else:
            self.progress.canary_finished(token, result, now)
        if epoch != self.epoch:
            return
        self._refused(result, now)
        record.make_room(len(self.progress.engines))
        record.results.append(result)
        record.controls.append(control)

    def canary_late(
        self, kind: CanaryKind, token: int, result: CanaryResult, now: float, *, epoch: int
    ) -> None:
        """The late result of a canary recorded at its deadline: the wait for it is over.

        Its credit closes as a finished canary's would, with this result. In
        the history it replaces the timed-out entry of the same canary (same
        ``started``, ``engine`` and name, still ``awaiting_late``), in place,
        so a path kind's ``controls`` stay aligned (the control is kept). An
        entry already gone (a new epoch, or past the history cap) is not
        brought back.
        """
        record = self.records[kind]
        record.awaited.discard(token)
        self.progress.canary_finished(token, result, now)
        if epoch != self.epoch:
            return
        self._refused(result, now)
        for index in range(len(record.results) - 1, -1, -1):
            entry = record.results[index]
            if (
                entry.awaiting_late
                and entry.started == result.started
                and entry.engine == result.engine
                and entry.name == result.name
            ):
                record.results[index] = result
                return

    def _refused(self, result: CanaryResult, now: float) -> None:
        """A finished canary into the refusal runs; its paused refusal is a lifecycle word."""
        runs, before = self.refusals, (self.refusals.paused, self.refusals.paused_at)
        runs.saw(result, self.progress.last_progress_at)  # real progress ended older runs
        if (runs.paused, runs.paused_at) != before:  # a new word, or the same one refreshed
            self.observe_lifecycle(
                now, paused_refusal=runs.paused, paused_refusal_at=runs.paused_at
            )
        observe_gate(self, gate_of_canary(result), result.started, now)  # elastic EP's gate

    def disable(self, kind: CanaryKind, reason: str) -> None:
        """The kind is set aside for the rest of this epoch: its record and the plan say so."""
        record = self.records[kind]
        record.enabled, record.disabled_reason, record.set_aside_waiting = False, reason, ""
        self.plan = self.plan.without(kind, reason)

    def fall_back(self, kind: CanaryKind, note: str) -> None:
        """The kind sends its fallback request for the rest of this epoch (a new one clears it)."""
        self.records[kind].fallback = note
        self.plan = self.plan.falling_back(kind, note)

    def startup_judged(self, passed: bool) -> None:
        """The verdict's word on startup, into this epoch's plan (a new epoch clears it)."""
        self.plan = self.plan.started(passed)

    def busy(self, now: float, idle_window: float) -> bool:
        """Real (not sentinel's) completions happened within the idle window, on every engine.

        Completions vouch only for the engines that made them: while one
        data-parallel engine's work has been flat for the idle window, the
        server is not busy as a whole and canaries keep running (one stuck
        engine among busy ones is exactly what they must catch).
        """
        last = self.progress.last_real_completion_at
        if last is None or now - last > idle_window:
            return False
        # Where decode is told apart, one-token completions (classifiers,
        # scorers) prove no decode: they keep the text canary running.
        decode = self.progress.last_decode_at
        if self.progress.decode_available and (decode is None or now - decode > idle_window):
            return False
        engines = self.progress.engines
        return len(engines) < 2 or all(
            (at := track.vouched_at) is not None and now - at <= idle_window
            for track in engines.values()
        )

    # -- evidence -----------------------------------------------------------
    def observe_health(self, status: int | None, now: float) -> None:
        self.health_status = status
        if status is None or status == 200:
            self.health_failing_since = None
        elif self.health_failing_since is None:
            self.health_failing_since = now

    def observe_processes(self, snapshot: ProcessSnapshot, now: float) -> None:
        snapshot = placed(snapshot, self._placements)
        self._placements = {
            (p.pid, p.create_time): p for p in (*snapshot.engine_processes, *snapshot.coordinators)
        }
        previous, self.processes = self.processes, snapshot
        before = None if previous is None else previous.api_identity
        after = snapshot.api_identity
        # An attributed API server is kept while that very process lives (even
        # with its listener closed), so losing it means it exited: that server
        # is over, as surely as a new PID or start time says it restarted.
        if before is not None and before != after:
            why = (
                f"API server restarted (pid {before[0]} -> {after[0]})"
                if after is not None
                else f"API server exited (pid {before[0]})"
            )
            self.new_epoch(why, now)
        down = [p for p in snapshot.engine_processes if p.state in _DOWN]
        if snapshot.api is not None and down:
            if self.engine_down_since is None:
                self.engine_down_since = now
            self.engine_down_detail = ", ".join(f"{p.describe()} {p.state.value}" for p in down)
            self.engine_down_stopped = all(p.state is ProcessState.STOPPED for p in down)
            self.down_engines = _distinct(p.placement.engine for p in down)
            self.down_ranks = _distinct(p.placement.tp_rank for p in down)
        else:
            self.engine_down_since = None
            self.engine_down_detail = ""
            self.engine_down_stopped = False
            self.down_engines, self.down_ranks = (), ()

    def evidence(
        self,
        now: float,
        freshness: float,
        unobserved: tuple[tuple[float, float], ...] = (),
        sections: Mapping[str, object] | None = None,
    ) -> Evidence:
        """Freeze what the verdict needs (:func:`sentinel.record.freeze.freeze`)."""
        self.refusals.progressed(self.progress.last_progress_at)  # it serves again: runs end
        self.lifecycle.follow(now)  # a paused refusal's word lasts KEEP_WORD unless refreshed
        return freeze(self, now, freshness, unobserved, sections)


def _distinct(values: Iterable[int | None]) -> tuple[int, ...]:
    """The named indices, each once, in order."""
    return tuple(sorted({v for v in values if v is not None}))
