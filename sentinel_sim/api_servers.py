"""``--api-server-count N``: server 0's side of the extra API-server processes.

Server 0 (the simulator's API process) binds the OpenAI socket itself, serves
it, and hands the same socket to N-1 satellites (:mod:`sentinel_sim.satellite`),
which relay to server 0's private loopback port. It also delivers the
``api_wedge`` fault to a satellite, and stops them all on its way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import sys

SATELLITE_READY_S = 30.0
STOP_GRACE_S = 3.0


class ApiServers:
    """The shared listening socket and the satellites serving it beside server 0."""

    def __init__(self, count: int, host: str, port: int) -> None:
        self.count = count
        self.socket = socket.create_server((host, port), backlog=4096)
        self.socket.set_inheritable(True)
        self._procs: list[asyncio.subprocess.Process] = []

    @property
    def pids(self) -> list[int]:
        """The satellites' PIDs, server 1 first."""
        return [proc.pid for proc in self._procs]

    async def start(self, upstream: str) -> None:
        """Start servers 1..N-1 on the shared socket and wait until each serves."""
        fd = self.socket.fileno()
        for index in range(1, self.count):
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "sentinel_sim.satellite",
                "--fd",
                str(fd),
                "--index",
                str(index),
                "--upstream",
                upstream,
                pass_fds=(fd,),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
            self._procs.append(proc)
            assert proc.stdout is not None
            async with asyncio.timeout(SATELLITE_READY_S):
                while line := await proc.stdout.readline():
                    with contextlib.suppress(ValueError):
                        if json.loads(line).get("event") == "ready":
                            break
                else:
                    raise RuntimeError(f"API server {index} exited before serving")

    def wedge(self, index: int, seconds: float, spin: bool) -> None:
        """Block satellite ``index``'s event loop for ``seconds`` (idle, or spinning)."""
        if not 1 <= index < self.count:
            raise ValueError(f"server must be 1..{self.count - 1} (server 0 owns the engine link)")
        stdin = self._procs[index - 1].stdin
        assert stdin is not None
        stdin.write(json.dumps({"wedge": seconds, "spin": spin}).encode() + b"\n")

    async def stop(self) -> None:
        """Stop every satellite, stopped or wedged ones included; close the socket."""
        for proc in self._procs:
            if proc.stdin is not None:
                proc.stdin.close()
            for signum in (signal.SIGCONT, signal.SIGTERM):
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signum)
        for proc in self._procs:
            try:
                await asyncio.wait_for(proc.wait(), STOP_GRACE_S)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        self.socket.close()
