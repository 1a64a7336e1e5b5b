"""``sentinel run`` and ``sentinel demo`` on a first start (issue 31, done-when 1, items 1 and 5).

A listen address already taken is one line naming where the address came
from, nothing else; ``demo --fast`` runs its whole timeline and exits 0.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sentinel.commands.demo import FAST_FLAGS, demo_flags
from sentinel.config.loader import load_settings
from sentinel.diagnostics.timeline import answers, restarts, sampled


def sentinel(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SENTINEL_")}
    return subprocess.run(
        [sys.executable, "-m", "sentinel", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**clean, **(env or {})},
        check=False,
    )


@pytest.fixture
def taken() -> Iterator[int]:
    """A port on 127.0.0.1 something listens on for the test's duration."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


TARGET = ("--target", "http://127.0.0.1:9")  # never reached: the run stops before it starts


def test_http_address_in_use_is_one_line_naming_the_flag(taken: int) -> None:
    done = sentinel("run", *TARGET, "--listen", f"127.0.0.1:{taken}", "--grpc-listen", "off")
    assert done.returncode != 0
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"sentinel: --listen: address 127.0.0.1:{taken} already in use"
    ]


def test_grpc_address_in_use_is_one_line_naming_the_flag(taken: int) -> None:
    done = sentinel(
        "run", *TARGET, "--listen", "127.0.0.1:0", "--grpc-listen", f"127.0.0.1:{taken}"
    )
    assert done.returncode != 0
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"sentinel: --grpc-listen: address 127.0.0.1:{taken} already in use"
    ]


def test_address_from_the_environment_names_the_variable(taken: int) -> None:
    done = sentinel(
        "run", *TARGET, "--grpc-listen", "off", env={"SENTINEL_LISTEN": f"0.0.0.0:{taken}"}
    )
    assert done.returncode != 0
    assert done.stderr.splitlines() == [
        f"sentinel: SENTINEL_LISTEN: address 0.0.0.0:{taken} already in use"
    ]


def test_demo_fast_settings_validate(tmp_path: Path) -> None:
    flags = {"target": "http://127.0.0.1:8000", **demo_flags(True, tmp_path)}
    settings = load_settings(None, env={}, flags=flags)
    assert settings.hang_window == FAST_FLAGS["hang_window"]


def test_demo_fast_runs_its_timeline_and_exits_0(tmp_path: Path) -> None:
    done = sentinel(
        "demo",
        "--fast",
        "--diagnostics-dir",
        str(tmp_path / "diag"),
        env={"TMPDIR": str(tmp_path)},
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS: hang detected" in done.stdout
    # The printed bundle is the stored (renamed) one, with its picture (issue 40, done-when 4).
    written = re.search(r"diagnostics written: (\S+) \(", done.stdout)
    assert written is not None, done.stdout
    bundle = Path(written.group(1))
    assert not bundle.name.startswith(".")
    assert bundle.is_dir()
    assert f"timeline {bundle / 'timeline.png'}" in done.stdout
    assert (bundle / "timeline.png").is_file()
    # Its picture's data: liveness red (the restart asked), progress flat before it.
    data = json.loads((bundle / "bundle.json").read_text())
    asked = restarts(data)
    assert asked
    assert asked[-1][1] == "dead"
    red = [span for span in answers(data)["liveness"] if not span[2]]
    assert red
    assert red[-1][0] == asked[-1][0]
    progress = sampled(data)["vllm:generation_tokens"]
    assert any(rate > 0 for at, rate in progress if at < red[-1][0])  # worked, then ...
    before = [rate for at, rate in progress if red[-1][0] - 1.5 <= at <= red[-1][0]]
    assert before
    assert all(rate == 0.0 for rate in before)
