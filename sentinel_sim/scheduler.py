"""The engine's scheduler, with vLLM 0.32's semantics, as a pure step function.

One :meth:`Scheduler.step` is one engine iteration at time ``now``:

1. Running requests first, in admission order. Each one whose prefill is done
   needs KV-cache room for one more token. When the cache is full a running
   request is preempted: under ``priority`` the one with the worst
   ``(priority, arrival)``; under ``fcfs`` the most recently admitted. The
   victim loses its KV blocks, keeps its output so far, and goes back to the
   waiting queue (it is recomputed on readmission). This is the only way a
   running request is ever displaced: priority never preempts by itself.
2. If nothing was preempted in this step, waiting requests are admitted while
   fewer than ``max_num_seqs`` run and their prompt fits in the cache. Under
   ``priority`` the waiting queue is ordered by ``(priority, arrival)``, lower
   first; under ``fcfs`` by arrival, and the priority field is ignored.
   Structured-output requests whose grammar is "still compiling" (the
   ``structured_hang`` fault) stay waiting with reason ``deferred``.

Nothing here reads a clock or touches a socket, so the semantics are tested
directly (see ``tests/loopback/test_sim_scheduler.py``).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple


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
    generated: int = 0
    blocks: int = 0
    prefill_done_at: float = 0.0
    first_scheduled: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    prompt_counted: bool = False
    is_running: bool = False

    def sort_key(self) -> tuple[int, float, int]:
        return (self.priority, self.arrival, self.rid)

    def __lt__(self, other: EngineRequest) -> bool:
        return self.sort_key() < other.sort_key()


class Finished(NamedTuple):
    """What vLLM records for a finished request (``request_success`` and latency histograms)."""

    reason: str  # "stop" | "length"
    e2e: float
    queued: float
    prefill: float
    decode: float
    inference: float
    prompt_tokens: int
    generation_tokens: int
    max_tokens: int


class EngineStats(NamedTuple):
    """One iteration's scheduler and iteration stats, published to the API process."""

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


@dataclass(slots=True)
class StepResult:
    outputs: list[tuple[int, int, str | None]] = field(default_factory=list)
    stats: EngineStats | None = None


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
    ) -> None:
        if policy not in ("fcfs", "priority"):
            raise ValueError(f"unknown scheduling policy {policy!r}")
        self.max_num_seqs = max_num_seqs
        self.block_size = block_size
        self.total_blocks = max(1, kv_cache_tokens // block_size)
        self.policy = policy
        self.prefill_tps = prefill_tps
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
        return True

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
        period: float,
        stall_after: int | None = None,
        defer_structured: bool = False,
        no_decode: bool = False,
    ) -> StepResult:
        """Advance one iteration; ``stall_after`` withholds tokens past that many (stream stall).

        ``no_decode`` (the ``prefill_no_decode`` fault) prefills prompts (their
        tokens are counted, as in a prefill-only step) and decodes nothing.
        """
        result = StepResult()
        prompt_tokens = 0
        generation_tokens = 0
        preemptions = 0
        ttfts: list[float] = []
        itls: list[float] = []
        finished: list[Finished] = []

        # 1. running requests, in admission order
        for request in list(self.running):
            if not request.is_running or now < request.prefill_done_at:
                continue
            if no_decode:
                prompt_tokens += self._count_prompt(request)
                continue
            if stall_after is not None and request.generated >= stall_after:
                continue
            needed = (
                self._blocks_for(request.prompt_tokens + request.generated + 1) - request.blocks
            )
            while needed > self.free_blocks:
                victim = self._victim()
                self._unrun(victim)
                self._push_waiting(victim, front=True)  # output kept, KV recomputed later
                preemptions += 1
                if victim is request:
                    break
            if not request.is_running:
                continue
            self.free_blocks -= needed
            request.blocks += needed
            generated, prompt, _ = self._advance(request, now, result, finished, ttfts, itls)
            generation_tokens += generated
            prompt_tokens += prompt

        self.running = [r for r in self.running if r.is_running]

        # 2. admissions, only when this step preempted nothing
        deferred: list[EngineRequest] = []
        active = len(self.running)
        if preemptions == 0:
            while active < self.max_num_seqs and self.num_waiting:
                request = self._peek_waiting()
                if defer_structured and request.structured:
                    deferred.append(self._pop_waiting())
                    continue
                needed = self._blocks_for(request.prompt_tokens + request.generated + 1)
                if needed > self.free_blocks:
                    break
                self._pop_waiting()
                self.free_blocks -= needed
                request.blocks = needed
                request.is_running = True
                active += 1
                if request.first_scheduled is None:
                    request.first_scheduled = now
                recompute = request.prompt_tokens + request.generated
                prefill = recompute / self.prefill_tps
                self.running.append(request)
                if prefill > period:
                    request.prefill_done_at = now + prefill
                    continue
                request.prefill_done_at = now
                if no_decode:
                    prompt_tokens += self._count_prompt(request)
                    continue
                if stall_after is not None and request.generated >= stall_after:
                    continue
                generated, prompt, done = self._advance(request, now, result, finished, ttfts, itls)
                generation_tokens += generated
                prompt_tokens += prompt
                if done:
                    active -= 1
        self.running = [r for r in self.running if r.is_running]
        for request in deferred:
            self._push_waiting(request, front=False)
        num_deferred = sum(1 for r in self.waiting() if r.structured) if defer_structured else 0

        result.stats = EngineStats(
            running=len(self.running),
            waiting=self.num_waiting,
            waiting_deferred=num_deferred,
            kv_usage=self.kv_usage(),
            prompt_tokens=prompt_tokens,
            generation_tokens=generation_tokens,
            preemptions=preemptions,
            iteration_tokens=prompt_tokens + generation_tokens,
            ttfts=tuple(ttfts),
            itls=tuple(itls),
            finished=tuple(finished),
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
        """One decode step of a running request: (tokens emitted, prompt tokens counted, done)."""
        generated = self._emit(request, now, ttfts, itls)
        prompt = 0
        if not request.prompt_counted:
            request.prompt_counted = True
            prompt = request.prompt_tokens
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
