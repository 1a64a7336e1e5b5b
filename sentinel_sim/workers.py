"""Tensor-parallel workers of a simulated engine: ``VLLM::Worker_TP<r>`` children.

Under ``--tensor-parallel-size N`` each engine runs N worker processes, as
vLLM's multiprocess executor does, and every engine step is a collective:
the engine hands each worker its part and waits for every answer. So one
stopped worker (SIGSTOP) stalls its whole engine, as on real vLLM, where the
other ranks wait in the collective: no step, no token, frozen metrics, while
``/health`` keeps answering 200. Only the stopped worker is in state ``T``.

Run by the engine as ``python -m sentinel_sim.workers --fd N --title T``.

A multi-node group's ranks live in pods of their own (``--remote-rank``): the
harness starts each as ``--listen-fd N`` on a listening socket it made, and the
engine connects at start-up, the connection standing in for the rendezvous. A
stopped rank's kernel still accepts, but the rank never greets, so a leader
restarted alone waits on it for good, as a real group waits on a dead rank.
"""

from __future__ import annotations

import argparse
import contextlib
import select
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Sequence

import setproctitle

from sentinel_sim import ipc

PROCESS_TITLE = "VLLM::Worker"


def worker_title(rank: int) -> str:
    """vLLM's title for a tensor-parallel rank (``_TP<r>`` only when there are several)."""
    return f"{PROCESS_TITLE}_TP{rank}"


class TensorGroup:
    """The engine's end of its workers: one socket per rank, one step at a time."""

    def __init__(self, size: int) -> None:
        self.socks: list[socket.socket] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        for rank in range(size):
            ours, theirs = socket.socketpair()
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "sentinel_sim.workers",
                    "--fd",
                    str(theirs.fileno()),
                    "--title",
                    worker_title(rank),
                ],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
            )
            theirs.close()
            self.socks.append(ours)
            self.procs.append(proc)
        for sock in self.socks:  # each says it is titled, so the engine reports ready after
            sock.recv(1)

    @classmethod
    def remote(cls, addresses: Sequence[str]) -> TensorGroup:
        """Ranks in other pods, one TCP connection each (``HOST:PORT``); no children."""
        group = cls(0)
        for address in addresses:
            host, _, port = address.rpartition(":")
            group.socks.append(socket.create_connection((host, int(port)), timeout=30.0))
        for sock in group.socks:
            sock.settimeout(None)  # the rendezvous waits as long as the rank does
            sock.recv(1)
        return group

    @property
    def pids(self) -> list[int]:
        return [proc.pid for proc in self.procs]

    def collective(
        self, other: socket.socket, on_other: Callable[[], None], running: Callable[[], bool]
    ) -> bool:
        """One step's collective: True once every rank answered, False when stopping.

        While a rank keeps the others waiting, messages on ``other`` (the API
        process's socket) are still taken in by ``on_other``, so faults and
        new requests queue up as they would on a stuck real engine.
        """
        for sock in self.socks:
            sock.sendall(b"s")
        waiting = set(self.socks)
        while waiting and running():
            readable, _, _ = select.select([*waiting, other], [], [], None)
            for sock in readable:
                if sock is other:
                    on_other()
                    continue
                if not sock.recv(1):
                    return False  # a worker died: the engine cannot step again
                waiting.discard(sock)
        return not waiting

    def close(self) -> None:
        for sock in self.socks:
            with contextlib.suppress(OSError):
                sock.close()
        for proc in self.procs:
            with contextlib.suppress(OSError):
                proc.send_signal(signal.SIGCONT)
            try:
                proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=2.0)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sentinel_sim.workers")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--fd", type=int, help="the engine's end, connected")
    where.add_argument("--listen-fd", type=int, help="a rank in its own pod: a listening socket")
    parser.add_argument("--title", required=True)
    args = parser.parse_args(argv)
    setproctitle.setproctitle(args.title)
    ipc.die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if args.fd is not None:
        _serve(socket.socket(fileno=args.fd))
        return 0
    listener = socket.socket(fileno=args.listen_fd)
    while True:  # one leader at a time: a leader restarted alone connects again
        connection, _ = listener.accept()
        with connection:
            _serve(connection)


def _serve(sock: socket.socket) -> None:
    """Greet, then answer each step's part until the engine goes away."""
    try:
        sock.sendall(b"r")
        while sock.recv(1):  # each byte is one step's part; an empty read: the engine is gone
            sock.sendall(b"d")
    except OSError:
        pass  # the engine went away mid-step


if __name__ == "__main__":
    raise SystemExit(main())
