"""The engine child process (``VLLM::EngineCore``): the step loop that generates tokens.

Run by the API process as ``python -m sentinel_sim.engine --ipc-fd N ...``. Like
vLLM's EngineCore it owns the scheduler and produces every token, and it
publishes each iteration's outputs and stats to the API process, which keeps
the Prometheus state. So when this process is stopped (SIGSTOP) or blocked
(the ``engine_hang`` fault), generation stalls and ``/metrics`` freezes while
the API process keeps answering ``/health``; when it dies, the API process
sees its socket close, answers ``/health`` with 503 and exits.

Under ``--data-parallel-size N`` the API process runs N of these, titled
``VLLM::EngineCore_DP<i>``, each with its own scheduler; under
``--tensor-parallel-size N`` each one runs N worker children
(:mod:`sentinel_sim.workers`) and waits for all of them at every step. Like
vLLM's engine core it reports every request it drops on an abort (the
API side counts a request in flight on its engine until then), so a hung
engine, which takes in no abort, keeps its requests counted.

The loop steps every ``1 / decode_tps`` seconds (times ``factor``, or
``token_s`` outright, under ``slow_decode``) while there is work, and blocks on
its socket when idle. A step that prefills N prompt tokens lasts
``N / prefill_tps`` seconds when that is longer: its outputs and stats are
published when that time is over, and the messages that arrive meanwhile are
taken in (requests queue, aborts apply), while engine queries wait for the
step's end, as vLLM answers utility calls between steps.

The busy-looking hang shapes live here too. ``stuck_running`` and the churn
faults seed real requests (not the caller's, as a hung production server has
its clients' requests stuck), take one step so they are running with a token
each, then block like ``engine_hang``; while blocked, ``waiting_churn`` keeps
publishing a changing waiting gauge and ``preemption_churn`` a growing
preemption counter, and nothing else. ``stall_after_first`` seeds the same
stuck requests and lets every request have exactly one token; ``decode_dead``
lets every request have one token too, seeds none and keeps stepping on CPU. ``engine_hang``
with ``spin`` keeps the loop burning CPU while hung.

The legitimate stalls (see :mod:`sentinel_sim.faults`): ``long_prefill``
seeds one real request with a long prompt; ``pause`` and ``sleep`` pause the
scheduler (``keep``: no step at all; ``wait``: running requests drain, no
admission; ``abort``: every request aborted first), publishing nothing while
paused so the gauges keep the last step's values; ``weight_update`` blocks
the loop like a collective RPC; ``compile_step`` makes the next step last
``seconds`` with a stand-in compiler child (:mod:`sentinel_sim.compiler`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import signal
import socket
import time
from collections.abc import Sequence
from typing import Any

import setproctitle

from sentinel_sim import ipc
from sentinel_sim.compiler import run_storm, start_compiler
from sentinel_sim.faults import (
    HUNG_FAULTS,
    PAUSING_FAULTS,
    STUCK_FAULTS,
    ActiveFault,
    Fault,
    FaultTable,
    remote_kv_of,
)
from sentinel_sim.scheduler import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    EngineRequest,
    EngineStats,
    Scheduler,
    StepPlan,
)
from sentinel_sim.workers import TensorGroup

PROCESS_TITLE = "VLLM::EngineCore"
# A seeded stuck request: a modest prompt and reply, so it finishes soon once the hang ends.
_STUCK_PROMPT_TOKENS = 48
_STUCK_MAX_TOKENS = 32
_SPIN_SLICE_S = 0.05  # a spinning engine looks at its socket this often
DEFAULT_WEIGHT_VERSION = "default"  # vLLM's EngineCore._weight_version before any update


def engine_title(index: int, data_parallel_size: int) -> str:
    """vLLM's title for an engine: ``_DP<i>`` only when there are several."""
    return f"{PROCESS_TITLE}_DP{index}" if data_parallel_size > 1 else PROCESS_TITLE


# A long forward pass uses this share of a core, a slice at a time (Engine._work).
WORK_SLICE_S = 0.25
WORK_DUTY = 0.08
DECODE_DEAD_DUTY = 0.25  # the share of each step a dead decode loop still burns


def _spin_until(deadline: float) -> None:
    """Burn CPU until ``deadline`` (monotonic): a busy engine thread, not a sleeping one."""
    x = 0
    while time.monotonic() < deadline:
        for _ in range(2000):
            x = (x * 1103515245 + 12345) & 0xFFFFFFFF


class Engine:
    """The step loop around :class:`Scheduler`, with the engine-side faults."""

    def __init__(
        self, config: dict[str, Any], sock: socket.socket, group: TensorGroup | None = None
    ) -> None:
        self.sock = sock
        self.group = group
        self.decoder = ipc.FrameDecoder()
        self.faults = FaultTable()
        self.period = 1.0 / float(config["decode_tps"])
        self.prefill_tps = float(config["prefill_tps"])
        self.scheduler = Scheduler(
            max_num_seqs=int(config["max_num_seqs"]),
            kv_cache_tokens=int(config["kv_cache_tokens"]),
            block_size=int(config["block_size"]),
            policy=str(config["scheduling_policy"]),
            prefill_tps=self.prefill_tps,
            max_num_batched_tokens=int(
                config.get("max_num_batched_tokens", DEFAULT_MAX_NUM_BATCHED_TOKENS)
            ),
        )
        self.pending: list[tuple[Any, ...]] = []  # work received while the engine hangs
        self.running = True
        self.gauges_dirty = False
        self.weight_version = DEFAULT_WEIGHT_VERSION
        self._next_stuck_rid = -1  # seeded requests use negative ids, unknown to the API side
        self._churn_tick = 0
        self._plan: StepPlan | None = None  # a step whose forward pass is still running
        self._publish_at = 0.0
        self._deferred_calls: list[tuple[Any, ...]] = []  # queries that wait for the step's end
        self._drain_waiters: list[int] = []  # "drained" queries, answered when nothing runs
        self._long_prefill: tuple[ActiveFault, int] | None = None  # (fault, seeded rid)
        self._compiled: ActiveFault | None = None  # the compile_step fault already served

    # -- messages ------------------------------------------------------------

    def _receive(self, timeout: float | None) -> None:
        """Wait up to ``timeout`` for input and take in every complete message."""
        readable, _, _ = select.select([self.sock], [], [], timeout)
        if not readable:
            return
        try:
            data = self.sock.recv(1 << 20)
        except (ConnectionError, OSError):
            data = b""
        if not data:  # the API process is gone
            self.running = False
            return
        for message in self.decoder.feed(data):
            self._handle(message)

    def _handle(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "fault":
            _, name, params, until = message
            fault = Fault(name)
            entry = ActiveFault(fault, params, until)
            self.faults.put(entry)
            if fault in STUCK_FAULTS and self._hung() in (None, self.faults.get(fault)):
                self._seed_stuck(int(params["requests"]))
            if fault is Fault.LONG_PREFILL:
                self._seed_long_prefill(entry)
            if fault in PAUSING_FAULTS and self._pause_mode(entry) == "abort":
                self._abort_all()
        elif kind == "clear":
            self.faults.clear(None if message[1] is None else Fault(message[1]))
            self._check_long_prefill()
        elif kind == "shutdown":
            self.running = False
        elif kind == "utility" and self._plan is not None:
            self._deferred_calls.append(message)
        elif self._hung() is not None:
            self.pending.append(message)
        else:
            self._apply(message)

    def _apply(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "add":
            for row in message[1]:  # (rid, prompt, max_tokens, eos_at, priority, arrival, ...)
                request = EngineRequest(*row[:7])
                request.remote = len(row) > 7 and bool(row[7])  # marked for a remote prefill
                self.scheduler.add(request)
            self.gauges_dirty = True
        elif kind == "abort":
            for rid in message[1]:
                self.scheduler.abort(rid)
            self.gauges_dirty = True
            self._publish(("aborted", list(message[1])))
            self._check_drained()
        elif kind == "utility":
            _, call_id, name, arg = message
            self._utility(int(call_id), str(name), arg)

    def _utility(self, call_id: int, name: str, arg: Any) -> None:
        """Answer an engine query, as vLLM's EngineCore answers utility calls between steps."""
        result: Any = None
        if name in ("is_paused", "is_sleeping"):
            # vLLM 0.32: is_sleeping() is is_scheduler_paused() or the executor asleep,
            # and a sleep always pauses the scheduler first.
            result = self._pause_state() is not None
        elif name == "weight_version":
            result = self.weight_version
        elif name == "set_weight_version":
            self.weight_version = str(arg)
        elif name == "rpc":
            time.sleep(max(0.0, float(arg or 0.0)))  # a collective RPC: the loop is blocked
        elif name == "drained":
            if self.scheduler.running:
                self._drain_waiters.append(call_id)
                return
            result = True
        self._publish(("utility", call_id, result))

    def _check_drained(self) -> None:
        if self._drain_waiters and not self.scheduler.running:
            waiters, self._drain_waiters = self._drain_waiters, []
            for call_id in waiters:
                self._publish(("utility", call_id, True))

    def _hung(self) -> ActiveFault | None:
        """The fault that blocks the engine loop, if any is in force."""
        for fault in HUNG_FAULTS:
            entry = self.faults.get(fault)
            if entry is not None:
                return entry
        return None

    # -- pause and sleep -----------------------------------------------------

    @staticmethod
    def _pause_mode(entry: ActiveFault) -> str:
        return str(entry.params["mode"] if entry.fault is Fault.PAUSE else entry.params["pause"])

    def _pause_state(self) -> str | None:
        """vLLM's scheduler pause state: "all" (keep), "new" (wait, abort) or None."""
        modes = [
            self._pause_mode(entry)
            for fault in PAUSING_FAULTS
            if (entry := self.faults.get(fault)) is not None
        ]
        if "keep" in modes:
            return "all"
        return "new" if modes else None

    def _has_work(self) -> bool:
        state = self._pause_state()
        if state == "all":
            return False
        if state == "new":
            return bool(self.scheduler.running)  # running requests drain; nothing is admitted
        return self.scheduler.has_work

    def _abort_all(self) -> None:
        """A pause (or sleep) in abort mode: every request ends with reason "abort"."""
        self._check_long_prefill()
        outputs, finished = self.scheduler.abort_all(time.monotonic())
        if outputs:
            stats = EngineStats(
                running=0,
                waiting=0,
                waiting_deferred=0,
                kv_usage=0.0,
                prompt_tokens=0,
                generation_tokens=0,
                preemptions=0,
                iteration_tokens=0,
                ttfts=(),
                itls=(),
                finished=tuple(finished),
                scheduler=False,
            )
            self._publish(("step", outputs, stats))
        self._check_drained()

    # -- seeded requests -----------------------------------------------------

    def _new_seeded_rid(self) -> int:
        rid, self._next_stuck_rid = self._next_stuck_rid, self._next_stuck_rid - 1
        return rid

    def _seed_stuck(self, count: int) -> None:
        """Admit ``count`` real requests and give each its first token, before the hang bites.

        Without these a hung engine would show an empty ``running`` gauge,
        which real hung servers rarely do: their clients' requests are stuck.
        """
        if count <= 0:
            return
        now = time.monotonic()
        if self._plan is not None:  # finish the step in flight before the seeding step
            plan, self._plan = self._plan, None
            self._finish(plan, now)
        for _ in range(count):
            self.scheduler.add(
                EngineRequest(
                    self._new_seeded_rid(), _STUCK_PROMPT_TOKENS, _STUCK_MAX_TOKENS, None, 0, now
                )
            )
        self.gauges_dirty = True
        self._step(now)
        if self._plan is not None:
            plan, self._plan = self._plan, None
            self._finish(plan, time.monotonic())

    def _seed_long_prefill(self, entry: ActiveFault) -> None:
        """One real request with a long prompt (a client's document, not a canary)."""
        self._end_long_prefill()
        rid = self._new_seeded_rid()
        params = entry.params
        self.scheduler.add(
            EngineRequest(
                rid,
                int(params["tokens"]),
                int(params["max_tokens"]),
                None,
                int(params["priority"]),
                time.monotonic(),
            )
        )
        self._long_prefill = (entry, rid)
        self.gauges_dirty = True

    def _end_long_prefill(self) -> None:
        if self._long_prefill is not None:
            _, rid = self._long_prefill
            self._long_prefill = None
            if self.scheduler.abort(rid):
                self.gauges_dirty = True
                self._check_drained()

    def _check_long_prefill(self) -> None:
        """Forget a finished long prefill; abort one whose fault was cleared or ran out."""
        if self._long_prefill is None:
            return
        entry, rid = self._long_prefill
        if rid not in self.scheduler.requests:
            self._long_prefill = None
        elif self.faults.get(Fault.LONG_PREFILL) is not entry:
            self._end_long_prefill()

    def _long_prefill_param(self, name: str) -> float:
        """A ``long_prefill`` override (0: none) while its request is still prefilling."""
        if self._long_prefill is None:
            return 0.0
        entry, rid = self._long_prefill
        request = self.scheduler.requests.get(rid)
        if request is None or request.generated > 0:
            return 0.0
        return float(entry.params[name])

    def _publish(self, message: tuple[Any, ...]) -> None:
        try:
            self.sock.sendall(ipc.encode(message))
        except (ConnectionError, OSError):
            self.running = False

    # -- the loop ------------------------------------------------------------

    def _blocked_in_engine_hang(self, hang: ActiveFault) -> None:
        """A hung engine: no steps, no stats; only a clear or the deadline ends it.

        Under the churn faults the loop wakes every ``period`` to publish the
        one thing that still moves (the waiting gauge, or preemptions). Under
        ``engine_hang`` with ``spin`` it burns CPU, looking at its socket only
        between slices, as an engine stuck in a busy-wait does.
        """
        now = time.monotonic()
        if hang.fault is Fault.ENGINE_HANG and hang.params.get("spin"):
            end = now + _SPIN_SLICE_S
            _spin_until(end if hang.until is None else min(end, hang.until))
            self._receive(0)
            return
        timeout = None if hang.until is None else max(0.0, hang.until - now)
        churn = hang.fault in (Fault.WAITING_CHURN, Fault.PREEMPTION_CHURN)
        if churn:
            period = float(hang.params["period"])
            timeout = period if timeout is None else min(timeout, period)
        self._receive(timeout)
        if churn and self.running and self._hung() is hang:
            self._churn_tick += 1
            stats = self.scheduler.idle_stats()
            if hang.fault is Fault.WAITING_CHURN:
                stats = stats._replace(waiting=stats.waiting + 1 + self._churn_tick % 3)
            else:
                stats = stats._replace(preemptions=1)
            self._publish(("step", [], stats))

    def run(self) -> None:
        next_step = 0.0
        was_busy = False
        while self.running:
            if self._plan is not None:  # a long step's forward pass
                now = time.monotonic()
                if now < self._publish_at:
                    self._work(self._publish_at - now)
                    continue
                plan, self._plan = self._plan, None
                self._finish(plan, now)
                calls, self._deferred_calls = self._deferred_calls, []
                for call in calls:
                    self._handle(call)
                continue
            hang = self._hung()
            if hang is not None:
                self._blocked_in_engine_hang(hang)
                was_busy = False
                continue
            if self.pending:
                pending, self.pending = self.pending, []
                for message in pending:
                    self._apply(message)
            self._check_long_prefill()
            now = time.monotonic()
            busy = self._has_work()
            if busy and not was_busy:
                next_step = now + self._period()
            was_busy = busy
            if not busy:
                # A paused scheduler publishes nothing: the gauges keep the last step's values.
                if self.gauges_dirty and self._pause_state() is None:
                    self._publish(("step", [], self.scheduler.idle_stats()))
                    self.gauges_dirty = False
                self._receive(self._idle_timeout(now))
                continue
            if now < next_step:
                self._work(next_step - now)
                continue
            started, seconds = self._step(now)
            next_step = max(next_step + seconds, started)

    def _work(self, timeout: float) -> None:
        """Wait out part of a forward pass as a working engine does: using some CPU.

        A real engine burns CPU through every step (computing on the CPU build,
        spinning in the CUDA synchronisation that ends a GPU step), which is
        how sentinel tells a long step from a blocked loop; a long wait spins
        for a share of each slice and listens for input the rest of it.
        """
        if timeout < WORK_SLICE_S:
            self._receive(timeout)
            return
        _spin_until(time.monotonic() + WORK_SLICE_S * WORK_DUTY)
        self._receive(WORK_SLICE_S * (1 - WORK_DUTY))

    def _idle_timeout(self, now: float) -> float | None:
        expiry = self.faults.next_expiry()
        return None if expiry is None else max(0.0, expiry - now)

    def _period(self) -> float:
        slow = self.faults.get(Fault.SLOW_DECODE)
        if slow is None:
            return self.period
        token_s = float(slow.params.get("token_s", 0.0))
        return token_s if token_s > 0 else self.period * float(slow.params["factor"])

    def _starve_below(self) -> int | None:
        entry = self.faults.get(Fault.STARVE)
        return None if entry is None else int(entry.params.get("below", 0))

    def _stall_after(self) -> int | None:
        stall = self.faults.get(Fault.STREAM_STALL)
        after = None if stall is None else int(stall.params["after"])
        if any(
            self.faults.get(f) is not None for f in (Fault.STALL_AFTER_FIRST, Fault.DECODE_DEAD)
        ):
            after = 1 if after is None else min(after, 1)
        return after

    def _compile(self) -> None:
        """``compile_step``: this step blocks for ``seconds`` (once per fault set)."""
        entry = self.faults.get(Fault.COMPILE_STEP)
        if entry is None or entry is self._compiled:
            return
        self._compiled = entry
        deadline = time.monotonic() + float(entry.params["seconds"])
        compiler = str(entry.params["compiler"])
        if compiler == "none":  # in-process (NVRTC): the engine thread itself is busy
            _spin_until(deadline)
            return
        if entry.params.get("storm"):  # many short-lived compilers (Triton autotuning)
            run_storm(
                compiler, deadline, float(entry.params["child_s"]), float(entry.params["gap_s"])
            )
            return
        child = start_compiler(compiler)
        try:
            time.sleep(max(0.0, deadline - time.monotonic()))  # waiting on the child
        finally:
            child.stop()

    def _step(self, now: float) -> tuple[float, float]:
        """Schedule one step; returns (when it started, how long its forward pass lasts)."""
        if self.group is not None and not self.group.collective(
            self.sock, lambda: self._receive(0), lambda: self.running
        ):
            self.running = False  # a worker died (or we stop): this engine is done, as in vLLM
            return now, self._period()
        if self.faults.get(Fault.COMPILE_STEP) not in (None, self._compiled):
            self._compile()
            now = time.monotonic()
        chunk = int(self._long_prefill_param("chunk"))
        plan = self.scheduler.schedule(
            now,
            stall_after=self._stall_after(),
            defer_structured=self.faults.get(Fault.STRUCTURED_HANG) is not None,
            no_decode=self.faults.get(Fault.PREFILL_NO_DECODE) is not None,
            admit=self._pause_state() is None,
            budget=chunk if chunk > 0 else None,
            admit_below=self._starve_below(),
            remote_kv=remote_kv_of(self.faults.get(Fault.REMOTE_KV)),
        )
        if self.faults.get(Fault.DECODE_DEAD) is not None:
            # The dead decode still runs its step (GPU kernels, synchronisation): CPU used.
            _spin_until(time.monotonic() + self._period() * DECODE_DEAD_DUTY)
        rate = self._long_prefill_param("prefill_tps")
        period = self._period()
        seconds = self.scheduler.step_seconds(plan, period, rate if rate > 0 else None)
        if seconds > period:
            # A long forward pass: outputs and stats come out when it ends.
            self._plan = plan
            self._publish_at = now + seconds - period
        else:
            self._finish(plan, now)
        return now, seconds

    def _finish(self, plan: StepPlan, now: float) -> None:
        """The forward pass is over: sample tokens and publish the step."""
        result = self.scheduler.execute(plan, now)
        stats = result.stats
        changed = bool(result.outputs) or self.gauges_dirty or result.scheduled_tokens > 0
        changed = changed or (stats is not None and stats.iteration_tokens > 0)
        if stats is not None and (changed or stats.preemptions):
            self._publish(("step", result.outputs, stats))
            self.gauges_dirty = False
        self._check_drained()
        self._check_long_prefill()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m sentinel_sim.engine")
    parser.add_argument("--ipc-fd", type=int, required=True)
    parser.add_argument("--config", required=True, help="SimConfig as JSON")
    # Visible in the command line the way vLLM's flags are; the JSON config is authoritative.
    parser.add_argument("--scheduling-policy", choices=("fcfs", "priority"), default="fcfs")
    parser.add_argument("--max-num-seqs", type=int, default=None)
    parser.add_argument("--data-parallel-rank", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    config = json.loads(args.config)
    ipc.die_with_parent()
    dp = int(config.get("data_parallel_size", 1))
    setproctitle.setproctitle(engine_title(args.data_parallel_rank, dp))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the API process decides when we stop
    sock = socket.socket(fileno=args.ipc_fd)
    tp = int(config.get("tensor_parallel_size", 1))
    remote = config.get("remote_ranks") or []
    group = TensorGroup.remote(remote) if remote else TensorGroup(tp) if tp > 1 else None
    if float(config.get("startup_delay", 0.0)) > 0:
        time.sleep(float(config["startup_delay"]))  # simulated weight loading and compilation
    engine = Engine(config, sock, group)
    engine._publish(("ready", os.getpid(), [] if group is None else group.pids))
    try:
        engine.run()
    finally:
        if group is not None:
            group.close()
        with contextlib.suppress(OSError):
            sock.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
