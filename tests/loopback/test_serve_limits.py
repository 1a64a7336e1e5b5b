"""sentinel's own listener under a connection flood: it stays up and the probe is answered.

The kubelet's liveness probe of the inference server points at sentinel, so a
client that opens connections and sends nothing (or half a request head) must
neither exhaust sentinel's file descriptors nor delay ``/livez``. sentinel runs
as a subprocess with RLIMIT_NOFILE at 1,024 and receives 3,000 half-open
connections.
"""

from __future__ import annotations

import contextlib
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from chaos.ports import free_port

FD_LIMIT = 1024
FLOOD = 3000


def _limit_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


@pytest.fixture
def sentinel_port(tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen[str]]]:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sentinel",
            "run",
            "--target",
            f"http://127.0.0.1:{free_port()}",  # nothing listens: sentinel must still serve
            "--listen",
            f"127.0.0.1:{port}",
            "--grpc-listen",
            "127.0.0.1:0",
            "--diagnostics-dir",
            str(tmp_path / "diagnostics"),
            "--log-format",
            "json",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_limit_descriptors,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/livez", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "sentinel never answered /livez"
            time.sleep(0.1)
        yield port, process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        process.communicate()


@pytest.fixture
def descriptors_for_flood() -> Iterator[None]:
    """This process needs a descriptor per flood connection; raise its soft limit if low."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = FLOOD + 256
    if soft != resource.RLIM_INFINITY and soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"the hard descriptor limit {hard} is below {wanted}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_half_open_flood_leaves_livez_answering(
    sentinel_port: tuple[int, subprocess.Popen[str]], descriptors_for_flood: None
) -> None:
    port, process = sentinel_port
    flood: list[socket.socket] = []
    refused = 0
    # A listener that stopped accepting makes each connect wait out its timeout; bound the flood.
    flood_deadline = time.monotonic() + 60
    try:
        for i in range(FLOOD):
            if time.monotonic() > flood_deadline:
                break
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=1)
            except OSError:
                refused += 1
                continue
            flood.append(sock)
            if i % 2:
                with contextlib.suppress(OSError):  # already shed by sentinel
                    sock.sendall(b"GET /livez HTTP/1.1\r\nHost: sentinel\r\n")  # no blank line
        assert process.poll() is None, "sentinel exited under the flood"
        for _ in range(5):
            started = time.monotonic()
            reply = httpx.get(f"http://127.0.0.1:{port}/livez", timeout=1.0)
            elapsed = time.monotonic() - started
            assert reply.status_code == 200
            assert elapsed < 1.0, f"/livez took {elapsed:.2f} s under the flood"
        shed = sum(1 for sock in flood if _closed_by_peer(sock))
        # sentinel cannot hold 3,000 connections under 1,024 descriptors: most were shed.
        assert shed + refused >= FLOOD - FD_LIMIT, (shed, refused)
    finally:
        for sock in flood:
            sock.close()
    assert process.poll() is None, "sentinel exited after the flood"
    assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200


def _closed_by_peer(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
