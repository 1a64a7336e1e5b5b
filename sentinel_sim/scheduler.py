"""The engine's scheduler, with vLLM 0.32's semantics, as a pure step function.

One engine iteration is :meth:`Scheduler.schedule` (at the step's start)
followed by :meth:`Scheduler.execute` (when the simulated forward pass ends);
:meth:`Scheduler.step` does both at one instant. Like vLLM V1 the scheduler
hands out a budget of ``max_num_batched_tokens`` tokens per step:

1. Running requests first, in admission order. A request has ``computed``
   tokens in the KV cache out of its known tokens (prompt plus output so far);
   it is scheduled ``min(known - computed, budget left)`` tokens. A decoding
   request needs exactly one; one still prefilling takes a chunk of its
   prompt, as large as the budget allows (chunked prefill). KV blocks are
   allocated for the scheduled tokens only, so a long prompt fills the cache
   chunk by chunk. When the cache is full a running request is preempted:
   under ``priority`` the one with the worst ``(priority, arrival)``; under
   ``fcfs`` the most recently admitted. The victim loses its KV blocks and
   its scheduled tokens, keeps its output so far, and goes back to the front
   of the waiting queue (its prompt and output are recomputed on readmission).
   This is the only way a running request is ever displaced: priority never
   preempts by itself.
2. If nothing was preempted in this step and ``admit`` is set (not paused),
   waiting requests are admitted while fewer than ``max_num_seqs`` run, budget
   remains and their first chunk fits in the cache. Under ``priority`` the
   waiting queue is ordered by ``(priority, arrival)``, lower first; under
   ``fcfs`` by arrival, and the priority field is ignored. An admitted
   request's first chunk uses what is left of the budget. Structured-output
   requests whose grammar is "still compiling" (the ``structured_hang``
   fault) stay waiting with reason ``deferred``. Under a KV connector
   (``remote_kv``: a disaggregated decode node) a request marked remote
   first gets blocks for its prompt and waits in ``WAITING_FOR_REMOTE_KVS``
   (reason ``deferred``, holding its blocks) until its transfer lands; then
   it is admitted with its prompt computed and one token to schedule, as
   vLLM's ``_update_waiting_for_remote_kv`` sets ``num_computed_tokens``.

A request whose scheduled tokens reach the end of its known tokens samples one
token in :meth:`Scheduler.execute`: that is its first token after a prefill,
or the next one while decoding. A step that only advanced a prefill produces
no output and moves no counter (vLLM counts prompt tokens, iteration tokens,
generation tokens and time to first token only from outputs), yet its
:class:`EngineStats` carry the scheduler gauges (running, waiting, KV usage).

Nothing here reads a clock or touches a socket, so the semantics are tested
directly (see ``tests/loopback/test_sim_scheduler.py``).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192


@dataclass(slots=True)
class EngineRequest:
    """A request as the engine sees it: token counts and times, no text."""

    rid: int
    prompt_tokens: int
    max_tokens: int
    eos_at: int | None  # output length at which the model emits end-of-sequence
    priority: int
    arrival: float
    structured: bool = False
    remote: bool = False  # its KV comes from a prefill worker (``kv_transfer_params``)
    generated: int = 0
    blocks: int = 0
    computed: int = 0  # tokens whose KV is in the cache (prompt first, then output)
    first_scheduled: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    prompt_counted: bool = False
    is_running: bool = False
    withheld: bool = False  # prefilled, but its next token is held back (stall faults)
    kv_since: float | None = None  # its blocks allocated, its remote KV awaited since
    kv_landed: bool = False

    @property
    def awaiting_kv(self) -> bool:
        """In ``WAITING_FOR_REMOTE_KVS``: blocks held, the transfer not landed."""
        return self.kv_since is not None and not self.kv_landed

    @property
    def known_tokens(self) -> int:
        """Prompt plus output so far: what the KV cache must hold to sample the next token."""
        return self.prompt_tokens + self.generated

    @property
    def prefilling(self) -> bool:
        """More than one token to compute before the next sample: a (re)computed prompt."""
        return self.known_tokens - self.computed > 1 or self.generated == 0

    def sort_key(self) -> tuple[int, float, int]:
        return (self.priority, self.arrival, self.rid)

    def __lt__(self, other: EngineRequest) -> bool:
        return self.sort_key() < other.sort_key()


class RemoteKv(NamedTuple):
    """A KV connector in force: how long a remote request's transfer takes to land, and which."""

    wait: float  # seconds from its blocks' allocation to the transfer landing (inf: never)
    connector: str  # "nixl" | "mooncake"


class Finished(NamedTuple):
    """What vLLM records for a finished request (``request_success`` and latency histograms)."""

    reason: str  # "stop" | "length" | "abort" (aborted by the engine: pause, sleep)
    e2e: float
    queued: float
    prefill: float
    decode: float
    inference: float
    prompt_tokens: int
    generation_tokens: int
    max_tokens: int


class EngineStats(NamedTuple):
    """One iteration's scheduler and iteration stats, published to the API process.

    ``scheduler`` False marks outputs sent outside a step (requests the
    engine aborted on a pause): they carry no scheduler gauges, which keep
    the last step's values, as vLLM's abort outputs carry no scheduler stats.
    """

    running: int
    waiting: int
    waiting_deferred: int
    kv_usage: float
    prompt_tokens: int
    generation_tokens: int
    preemptions: int
    iteration_tokens: int
    ttfts: tuple[float, ...]
    itls: tuple[float, ...]
    finished: tuple[Finished, ...]
    scheduler: bool = True
    kv_connector: str = ""  # the KV connector in force ("": none)
    kv_landed: tuple[float, ...] = ()  # seconds each remote transfer landed in this step took


@dataclass(slots=True)
class StepPlan:
    """What :meth:`Scheduler.schedule` decided: tokens per request, before the forward pass."""

    now: float
    scheduled: dict[int, int] = field(default_factory=dict)  # rid -> tokens this step
    prefill_tokens: int = 0  # scheduled tokens of requests still prefilling
    preemptions: int = 0
    deferred: int = 0
    no_decode: bool = False
    stall_after: int | None = None
    kv_connector: str = ""
    kv_landed: list[float] = field(default_factory=list)

    @property
    def total_tokens(self) -> int:
        return sum(self.scheduled.values())


@dataclass(slots=True)
class StepResult:
    outputs: list[tuple[int, int, str | None]] = field(default_factory=list)
    stats: EngineStats | None = None
    scheduled_tokens: int = 0
    prefill_tokens: int = 0


class Scheduler:
    """Running list, waiting queue and KV blocks; :meth:`step` advances one iteration."""

    def __init__(
        self,
        *,
        max_num_seqs: int,
        kv_cache_tokens: int,
        block_size: int,
        policy: str,
        prefill_tps: float,
        max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    ) -> None:
        if policy not in ("fcfs", "priority"):
            raise ValueError(f"unknown scheduling policy {policy!r}")
        if max_num_batched_tokens < 1:
            raise ValueError("max_num_batched_tokens must be >= 1")
        self.max_num_seqs = max_num_seqs
        self.block_size = block_size
        self.total_blocks = max(1, kv_cache_tokens // block_size)
        self.policy = policy
        self.prefill_tps = prefill_tps  # the engine's pace for prefill chunks (tokens/s)
        self.max_num_batched_tokens = max_num_batched_tokens
        self.running: list[EngineRequest] = []
        self._fcfs: deque[EngineRequest] = deque()
        self._heap: list[EngineRequest] = []
        self.free_blocks = self.total_blocks
        self.requests: dict[int, EngineRequest] = {}

    # -- queue ---------------------------------------------------------------

    def add(self, request: EngineRequest) -> None:
        self.requests[request.rid] = request
        self._push_waiting(request, front=False)

    def _push_waiting(self, request: EngineRequest, *, front: bool) -> None:
        if self.policy == "priority":
            heapq.heappush(self._heap, request)
        elif front:
            self._fcfs.appendleft(request)
        else:
            self._fcfs.append(request)

    def waiting(self) -> list[EngineRequest]:
        return list(self._fcfs) if self.policy == "fcfs" else sorted(self._heap)

    @property
    def num_waiting(self) -> int:
        return len(self._fcfs) + len(self._heap)

    def abort(self, rid: int) -> bool:
        """Drop a request wherever it is (client gone); it never counts as a success."""
        request = self.requests.pop(rid, None)
        if request is None:
            return False
        if request.is_running:
            self._unrun(request)
            self.running.remove(request)
        elif self.policy == "fcfs":
            self._fcfs.remove(request)
        else:
            self._heap.remove(request)
            heapq.heapify(self._heap)
        self._free(request)  # a request awaiting its remote KV holds blocks while it waits
        return True

    def abort_all(self, now: float) -> tuple[list[tuple[int, int, str | None]], list[Finished]]:
        """The engine aborts every request it holds (a pause or sleep in ``abort`` mode).

        Returns each one's final output ``(rid, generated, "abort")`` and its
        :class:`Finished` record: unlike a client's abort, vLLM reports these
        as finished with reason ``abort``.
        """
        outputs: list[tuple[int, int, str | None]] = []
        finished: list[Finished] = []
        for request in [*self.running, *self.waiting()]:
            self.abort(request.rid)
            outputs.append((request.rid, request.generated, "abort"))
            finished.append(self._finished(request, "abort", now))
        return outputs, finished

    @property
    def has_work(self) -> bool:
        return bool(self.running) or self.num_waiting > 0

    # -- KV cache ------------------------------------------------------------

    def _blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.block_size)

    def _free(self, request: EngineRequest) -> None:
        self.free_blocks += request.blocks
        request.blocks = 0

    def _unrun(self, request: EngineRequest) -> None:
        """Take a request off the running set (the list is compacted at the end of a step)."""
        request.is_running = False
        request.computed = 0  # its KV is gone: recomputed on readmission
        request.withheld = False
        self._free(request)

    def kv_usage(self) -> float:
        return (self.total_blocks - self.free_blocks) / self.total_blocks

    def _victim(self) -> EngineRequest:
        running = [r for r in self.running if r.is_running]
        if self.policy == "priority":
            return max(running, key=EngineRequest.sort_key)
        return running[-1]

    # -- one iteration -------------------------------------------------------

    def step(
        self,
        now: float,
        *,
        period: float = 0.0,
        stall_after: int | None = None,
        defer_structured: bool = False,
        no_decode: bool = False,
        admit: bool = True,
        budget: int | None = None,
        admit_below: int | None = None,
        remote_kv: RemoteKv | None = None,
    ) -> StepResult:
        """Schedule and execute one iteration at ``now`` (see :meth:`schedule`).

        ``period`` is accepted for callers of the older signature and unused:
        how long a step lasts is the engine's business (:meth:`step_seconds`).
        """
        del period
        plan = self.schedule(
            now,
            stall_after=stall_after,
            defer_structured=defer_structured,
            no_decode=no_decode,
            admit=admit,
            budget=budget,
            admit_below=admit_below,
            remote_kv=remote_kv,
        )
        return self.execute(plan, now)

    def step_seconds(
        self, plan: StepPlan, period: float, prefill_tps: float | None = None
    ) -> float:
        """How long the step's forward pass lasts: a decode period, or its prefill chunks' time."""
        rate = self.prefill_tps if prefill_tps is None else prefill_tps
        return max(period, plan.prefill_tokens / rate if rate > 0 else period)

    def schedule(
        self,
        now: float,
        *,
        stall_after: int | None = None,
        defer_structured: bool = False,
        no_decode: bool = False,
        admit: bool = True,
        budget: int | None = None,
        admit_below: int | None = None,
        remote_kv: RemoteKv | None = None,
    ) -> StepPlan:
        """Decide this step's tokens per request and allocate their KV blocks.

        ``stall_after`` withholds tokens past that many (stream stall);
        ``no_decode`` (the ``prefill_no_decode`` fault) prefills prompts and
        samples nothing; ``admit`` False (a pause that lets running requests
        drain) admits no waiting request; ``budget`` overrides
        ``max_num_batched_tokens`` for this step; ``admit_below`` (the
        ``starve`` fault: a leaked cache or a scheduler bug) admits only
        requests whose priority is below it, so real traffic starves while a
        priority canary is still served; ``remote_kv`` (a KV connector) holds
        requests marked remote until their transfer lands.
        """
        plan = StepPlan(now=now, no_decode=no_decode, stall_after=stall_after)
        plan.kv_connector = "" if remote_kv is None else remote_kv.connector
        left = self.max_num_batched_tokens if budget is None else budget

        # 1. running requests, in admission order
        for request in list(self.running):
            if left <= 0:
                break
            if not request.is_running:
                continue  # preempted earlier in this step
            want = request.known_tokens - request.computed
            held = no_decode or (stall_after is not None and request.generated >= stall_after)
            if want <= 0 or (held and want <= 1 and (request.withheld or request.generated)):
                continue  # decoding, or its first token withheld: nothing to compute
            request.withheld = False
            tokens = min(want, left)
            needed = self._blocks_for(request.computed + tokens) - request.blocks
            while needed > self.free_blocks:
                victim = self._victim()
                left += self._preempt(victim, plan)
                if victim is request:
                    break
            if not request.is_running:
                continue
            self.free_blocks -= needed
            request.blocks += needed
            plan.scheduled[request.rid] = tokens
            if request.prefilling:
                plan.prefill_tokens += tokens
            left -= tokens
        self.running = [r for r in self.running if r.is_running]

        # 2. admissions, only when this step preempted nothing
        deferred: list[EngineRequest] = []
        if plan.preemptions == 0 and admit:
            while left > 0 and len(self.running) < self.max_num_seqs and self.num_waiting:
                request = self._peek_waiting()
                starved = admit_below is not None and request.priority >= admit_below
                if starved or (defer_structured and request.structured):
                    deferred.append(self._pop_waiting())
                    continue
                connector = remote_kv is not None or request.kv_since is not None
                if request.remote and not request.kv_landed and connector:
                    awaiting = self._await_kv(request, remote_kv, now, plan)
                    if awaiting is None:
                        break  # no room for its blocks: it waits for capacity
                    if awaiting:
                        deferred.append(self._pop_waiting())
                        continue
                # A landed transfer's prompt is in the cache: one token to compute.
                cached = request.known_tokens - 1 if request.kv_landed and request.blocks else 0
                tokens = min(request.known_tokens - cached, left)
                needed = self._blocks_for(cached + tokens) - request.blocks
                if needed > self.free_blocks:
                    break
                self._pop_waiting()
                self.free_blocks -= needed
                request.blocks += needed
                request.computed = cached
                request.is_running = True
                if request.first_scheduled is None:
                    request.first_scheduled = now
                self.running.append(request)
                plan.scheduled[request.rid] = tokens
                if not cached:
                    plan.prefill_tokens += tokens
                left -= tokens
        for request in deferred:
            self._push_waiting(request, front=False)
        plan.deferred = sum(
            1 for r in self.waiting() if (defer_structured and r.structured) or r.awaiting_kv
        )
        return plan

    def _await_kv(
        self, request: EngineRequest, remote: RemoteKv | None, now: float, plan: StepPlan
    ) -> bool | None:
        """A remote request's transfer: True while awaited, False once landed, None: no room.

        Its blocks are allocated first (vLLM's ``load_kv_async``), and held
        while it waits; a connector switched off meanwhile lands it at once.
        """
        if request.kv_since is None:
            needed = self._blocks_for(request.prompt_tokens)
            if needed > self.free_blocks:
                return None
            self.free_blocks -= needed
            request.blocks = needed
            request.kv_since = now
        if remote is not None and now - request.kv_since < remote.wait:
            return True
        request.kv_landed = True
        plan.kv_landed.append(now - request.kv_since)
        return False

    def _preempt(self, victim: EngineRequest, plan: StepPlan) -> int:
        """Preempt ``victim``; returns the budget its scheduled tokens give back."""
        tokens = plan.scheduled.pop(victim.rid, 0)
        if tokens and victim.prefilling:
            plan.prefill_tokens -= tokens  # its chunk is given back with its blocks
        self._unrun(victim)
        self._push_waiting(victim, front=True)  # output kept, KV recomputed later
        plan.preemptions += 1
        return tokens

    def execute(self, plan: StepPlan, now: float) -> StepResult:
        """The forward pass ends at ``now``: advance each scheduled request, sample tokens."""
        result = StepResult(scheduled_tokens=plan.total_tokens, prefill_tokens=plan.prefill_tokens)
        prompt_tokens = 0
        generation_tokens = 0
        ttfts: list[float] = []
        itls: list[float] = []
        finished: list[Finished] = []
        for rid, tokens in plan.scheduled.items():
            request = self.requests.get(rid)
            if request is None or not request.is_running:
                continue  # aborted while the step ran: its output is dropped
            request.computed += tokens
            if request.computed < request.known_tokens:
                continue  # a prefill chunk: no output, no counter moves
            held = plan.no_decode or (
                plan.stall_after is not None and request.generated >= plan.stall_after
            )
            if held:
                request.computed -= 1  # the sample is withheld; the last token waits
                request.withheld = True
                if plan.no_decode:
                    prompt_tokens += self._count_prompt(request)
                continue
            generated, prompt, _ = self._advance(request, now, result, finished, ttfts, itls)
            generation_tokens += generated
            prompt_tokens += prompt
        self.running = [r for r in self.running if r.is_running]

        result.stats = EngineStats(
            running=len(self.running),
            waiting=self.num_waiting,
            waiting_deferred=plan.deferred,
            kv_usage=self.kv_usage(),
            prompt_tokens=prompt_tokens,
            generation_tokens=generation_tokens,
            preemptions=plan.preemptions,
            iteration_tokens=prompt_tokens + generation_tokens,
            ttfts=tuple(ttfts),
            itls=tuple(itls),
            finished=tuple(finished),
            kv_connector=plan.kv_connector,
            kv_landed=tuple(plan.kv_landed),
        )
        return result

    @staticmethod
    def _count_prompt(request: EngineRequest) -> int:
        """The prompt tokens a prefill adds to ``prompt_tokens_total``, once per request."""
        if request.prompt_counted:
            return 0
        request.prompt_counted = True
        return request.prompt_tokens

    def _advance(
        self,
        request: EngineRequest,
        now: float,
        result: StepResult,
        finished: list[Finished],
        ttfts: list[float],
        itls: list[float],
    ) -> tuple[int, int, bool]:
        """Sample one token of a running request: (tokens emitted, prompt tokens counted, done)."""
        generated = self._emit(request, now, ttfts, itls)
        prompt = self._count_prompt(request)
        done = self._finish_reason(request)
        result.outputs.append((request.rid, request.generated, done))
        if done is not None:
            finished.append(self._finished(request, done, now))
            self._unrun(request)
            self.requests.pop(request.rid, None)
        return generated, prompt, done is not None

    def idle_stats(self) -> EngineStats:
        """Gauges only, for the state right after requests were aborted or queued."""
        return EngineStats(
            running=len(self.running),
            waiting=self.num_waiting,
            waiting_deferred=0,
            kv_usage=self.kv_usage(),
            prompt_tokens=0,
            generation_tokens=0,
            preemptions=0,
            iteration_tokens=0,
            ttfts=(),
            itls=(),
            finished=(),
        )

    # -- internals -------------------------------------------------------------

    def _peek_waiting(self) -> EngineRequest:
        return self._heap[0] if self.policy == "priority" else self._fcfs[0]

    def _pop_waiting(self) -> EngineRequest:
        return heapq.heappop(self._heap) if self.policy == "priority" else self._fcfs.popleft()

    @staticmethod
    def _emit(request: EngineRequest, now: float, ttfts: list[float], itls: list[float]) -> int:
        request.generated += 1
        if request.first_token_at is None:
            request.first_token_at = now
            ttfts.append(now - request.arrival)
        elif request.last_token_at is not None:
            itls.append(now - request.last_token_at)
        request.last_token_at = now
        return 1

    @staticmethod
    def _finish_reason(request: EngineRequest) -> str | None:
        if request.eos_at is not None and request.generated >= request.eos_at:
            return "stop"
        if request.generated >= request.max_tokens:
            return "length"
        return None

    @staticmethod
    def _finished(request: EngineRequest, reason: str, now: float) -> Finished:
        scheduled = request.first_scheduled if request.first_scheduled is not None else now
        first = request.first_token_at if request.first_token_at is not None else now
        return Finished(
            reason=reason,
            e2e=now - request.arrival,
            queued=scheduled - request.arrival,
            prefill=first - scheduled,
            decode=now - first,
            inference=now - scheduled,
            prompt_tokens=request.prompt_tokens,
            generation_tokens=request.generated,
            max_tokens=request.max_tokens,
        )
