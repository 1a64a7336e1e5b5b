"""chaos.ports: a port for a server that binds it later is one the kernel never hands out."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pytest

from chaos import ports


def test_a_free_port_is_below_the_ephemeral_range_and_bindable() -> None:
    floor = ports._ephemeral_floor()
    if floor is None or floor <= ports.LOWEST:
        pytest.skip("no Linux ephemeral range with room below it here")
    for _ in range(20):
        port = ports.free_port()
        assert ports.LOWEST <= port < floor
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))


def test_without_a_readable_range_the_kernel_picks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE", tmp_path / "absent")
    port = ports.free_port()
    assert 0 < port < 65536


def test_a_taken_port_is_never_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    floor = ports._ephemeral_floor()
    if floor is None or floor <= ports.LOWEST:
        pytest.skip("no Linux ephemeral range with room below it here")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", ports.LOWEST))
        held.listen()
        monkeypatch.setattr(random, "randrange", lambda low, high: low)
        # Every try lands on the held port: the kernel's pick is the answer.
        assert ports.free_port() != ports.LOWEST
