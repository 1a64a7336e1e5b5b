"""The engine child process (``VLLM::EngineCore``): the step loop that generates tokens.

Run by the API process as ``python -m sentinel_sim.engine --ipc-fd N ...``. Like
vLLM's EngineCore it owns the scheduler and produces every token, and it
publishes each iteration's outputs and stats to the API process, which keeps
the Prometheus state. So when this process is stopped (SIGSTOP) or blocked
(the ``engine_hang`` fault), generation stalls and ``/metrics`` freezes while
the API process keeps answering ``/health``; when it dies, the API process
sees its socket close, answers ``/health`` with 503 and exits.

The loop steps every ``1 / decode_tps`` seconds (times ``factor`` under
``slow_decode``) while there is work, and blocks on its socket when idle.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Sequence
from typing import Any

import setproctitle

from sentinel_sim import ipc
from sentinel_sim.faults import ActiveFault, Fault, FaultTable
from sentinel_sim.scheduler import EngineRequest, Scheduler

PROCESS_TITLE = "VLLM::EngineCore"
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL us when the API process dies, even while we are stopped."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class Engine:
    """The step loop around :class:`Scheduler`, with the engine-side faults."""

    def __init__(self, config: dict[str, Any], sock: socket.socket) -> None:
        self.sock = sock
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
            self.faults.put(ActiveFault(Fault(name), params, until))
        elif kind == "clear":
            self.faults.clear(None if message[1] is None else Fault(message[1]))
        elif kind == "shutdown":
            self.running = False
        elif self.faults.get(Fault.ENGINE_HANG) is not None:
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

    def _publish(self, message: tuple[Any, ...]) -> None:
        try:
            self.sock.sendall(ipc.encode(message))
        except (ConnectionError, OSError):
            self.running = False

    # -- the loop ------------------------------------------------------------

    def _blocked_in_engine_hang(self, hang: ActiveFault) -> None:
        """The engine_hang fault: no steps, no stats; only a clear or the deadline ends it."""
        timeout = None if hang.until is None else max(0.0, hang.until - time.monotonic())
        self._receive(timeout)

    def run(self) -> None:
        next_step = 0.0
        was_busy = False
        while self.running:
            hang = self.faults.get(Fault.ENGINE_HANG)
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
        return self.period * (float(slow.params["factor"]) if slow else 1.0)

    def _step(self, now: float) -> None:
        stall = self.faults.get(Fault.STREAM_STALL)
        result = self.scheduler.step(
            now,
            period=self._period(),
            stall_after=int(stall.params["after"]) if stall else None,
            defer_structured=self.faults.get(Fault.STRUCTURED_HANG) is not None,
        )
        stats = result.stats
        changed = bool(result.outputs) or self.gauges_dirty
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
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    config = json.loads(args.config)
    _die_with_parent()
    setproctitle.setproctitle(PROCESS_TITLE)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the API process decides when we stop
    sock = socket.socket(fileno=args.ipc_fd)
    if float(config.get("startup_delay", 0.0)) > 0:
        time.sleep(float(config["startup_delay"]))  # simulated weight loading and compilation
    engine = Engine(config, sock)
    engine._publish(("ready", os.getpid()))
    engine.run()
    with contextlib.suppress(OSError):
        sock.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
