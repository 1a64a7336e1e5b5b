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
its socket when idle.

The busy-looking hang shapes live here too. ``stuck_running`` and the churn
faults seed real requests (not the caller's, as a hung production server has
its clients' requests stuck), take one step so they are running with a token
each, then block like ``engine_hang``; while blocked, ``waiting_churn`` keeps
publishing a changing waiting gauge and ``preemption_churn`` a growing
preemption counter, and nothing else. ``stall_after_first`` seeds the same
stuck requests and lets every request have exactly one token.
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
from sentinel_sim.faults import HUNG_FAULTS, STUCK_FAULTS, ActiveFault, Fault, FaultTable
from sentinel_sim.scheduler import EngineRequest, Scheduler
from sentinel_sim.workers import TensorGroup

PROCESS_TITLE = "VLLM::EngineCore"
# A seeded stuck request: a modest prompt and reply, so it finishes soon once the hang ends.
_STUCK_PROMPT_TOKENS = 48
_STUCK_MAX_TOKENS = 32


def engine_title(index: int, data_parallel_size: int) -> str:
    """vLLM's title for an engine: ``_DP<i>`` only when there are several."""
    return f"{PROCESS_TITLE}_DP{index}" if data_parallel_size > 1 else PROCESS_TITLE


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
        self.scheduler = Scheduler(
            max_num_seqs=int(config["max_num_seqs"]),
            kv_cache_tokens=int(config["kv_cache_tokens"]),
            block_size=int(config["block_size"]),
            policy=str(config["scheduling_policy"]),
            prefill_tps=float(config["prefill_tps"]),
        )
        self.pending: list[tuple[Any, ...]] = []  # work received while the engine hangs
        self.running = True
        self.gauges_dirty = False
        self._next_stuck_rid = -1  # seeded requests use negative ids, unknown to the API side
        self._churn_tick = 0

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
            self.faults.put(ActiveFault(fault, params, until))
            if fault in STUCK_FAULTS and self._hung() in (None, self.faults.get(fault)):
                self._seed_stuck(int(params["requests"]))
        elif kind == "clear":
            self.faults.clear(None if message[1] is None else Fault(message[1]))
        elif kind == "shutdown":
            self.running = False
        elif self._hung() is not None:
            self.pending.append(message)
        else:
            self._apply(message)

    def _apply(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "add":
            for rid, prompt, max_tokens, eos_at, priority, arrival, structured in message[1]:
                self.scheduler.add(
                    EngineRequest(rid, prompt, max_tokens, eos_at, priority, arrival, structured)
                )
            self.gauges_dirty = True
        elif kind == "abort":
            for rid in message[1]:
                self.scheduler.abort(rid)
            self.gauges_dirty = True
            self._publish(("aborted", list(message[1])))

    def _hung(self) -> ActiveFault | None:
        """The fault that blocks the engine loop, if any is in force."""
        for fault in HUNG_FAULTS:
            entry = self.faults.get(fault)
            if entry is not None:
                return entry
        return None

    def _seed_stuck(self, count: int) -> None:
        """Admit ``count`` real requests and give each its first token, before the hang bites.

        Without these a hung engine would show an empty ``running`` gauge,
        which real hung servers rarely do: their clients' requests are stuck.
        """
        if count <= 0:
            return
        now = time.monotonic()
        for _ in range(count):
            rid, self._next_stuck_rid = self._next_stuck_rid, self._next_stuck_rid - 1
            self.scheduler.add(
                EngineRequest(rid, _STUCK_PROMPT_TOKENS, _STUCK_MAX_TOKENS, None, 0, now)
            )
        self.gauges_dirty = True
        self._step(now)

    def _publish(self, message: tuple[Any, ...]) -> None:
        try:
            self.sock.sendall(ipc.encode(message))
        except (ConnectionError, OSError):
            self.running = False

    # -- the loop ------------------------------------------------------------

    def _blocked_in_engine_hang(self, hang: ActiveFault) -> None:
        """A hung engine: no steps, no stats; only a clear or the deadline ends it.

        Under the churn faults the loop wakes every ``period`` to publish the
        one thing that still moves (the waiting gauge, or preemptions).
        """
        now = time.monotonic()
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
            hang = self._hung()
            if hang is not None:
                self._blocked_in_engine_hang(hang)
                was_busy = False
                continue
            if self.pending:
                pending, self.pending = self.pending, []
                for message in pending:
                    self._apply(message)
            now = time.monotonic()
            busy = self.scheduler.has_work
            if busy and not was_busy:
                next_step = now + self._period()
            was_busy = busy
            if not busy:
                if self.gauges_dirty:
                    self._publish(("step", [], self.scheduler.idle_stats()))
                    self.gauges_dirty = False
                self._receive(self._idle_timeout(now))
                continue
            if now < next_step:
                self._receive(next_step - now)
                continue
            self._step(now)
            next_step = max(next_step + self._period(), now)

    def _idle_timeout(self, now: float) -> float | None:
        expiry = self.faults.next_expiry()
        return None if expiry is None else max(0.0, expiry - now)

    def _period(self) -> float:
        slow = self.faults.get(Fault.SLOW_DECODE)
        if slow is None:
            return self.period
        token_s = float(slow.params.get("token_s", 0.0))
        return token_s if token_s > 0 else self.period * float(slow.params["factor"])

    def _stall_after(self) -> int | None:
        stall = self.faults.get(Fault.STREAM_STALL)
        after = None if stall is None else int(stall.params["after"])
        if self.faults.get(Fault.STALL_AFTER_FIRST) is not None:
            after = 1 if after is None else min(after, 1)
        return after

    def _step(self, now: float) -> None:
        if self.group is not None and not self.group.collective(
            self.sock, lambda: self._receive(0), lambda: self.running
        ):
            self.running = False  # a worker died (or we stop): this engine is done, as in vLLM
            return
        result = self.scheduler.step(
            now,
            period=self._period(),
            stall_after=self._stall_after(),
            defer_structured=self.faults.get(Fault.STRUCTURED_HANG) is not None,
            no_decode=self.faults.get(Fault.PREFILL_NO_DECODE) is not None,
        )
        stats = result.stats
        changed = bool(result.outputs) or self.gauges_dirty
        changed = changed or (stats is not None and stats.iteration_tokens > 0)
        if stats is not None and (changed or stats.preemptions):
            self._publish(("step", result.outputs, stats))
            self.gauges_dirty = False


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
    group = TensorGroup(tp) if tp > 1 else None
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
