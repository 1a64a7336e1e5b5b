"""The non-root tier's fixtures: another uid, the read-only root, the figures it prints.

The tier fails (never skips) where it cannot run sentinel as uid 10001: tests
and CI run as root, so ``setpriv`` can always make that process, and a tier
that skipped there would pass without testing anything. Only the capability
test may skip, by name and with its reason (tests/nonroot/test_capabilities.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.ports import free_port
from sentinel_sim.launch import SimProcess
from tests.nonroot.shape import (
    PYTHON,
    UID,
    private_mounts_allowed,
    run_as_other_user,
    writable_dirs,
)

FIGURES: list[str] = []


def report(line: str) -> None:
    """A figure printed at the end of the session (``make test`` shows it)."""
    FIGURES.append(line)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FIGURES:
        terminalreporter.section("non-root sidecar (tests/nonroot)")
        for line in FIGURES:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def other_uid() -> int:
    """uid 10001 can run sentinel's interpreter and import it, with no capabilities."""
    if os.geteuid() != 0:
        pytest.fail(f"tests/nonroot needs root to start a process as uid {UID} (run as root)")
    try:
        done = run_as_other_user(
            [PYTHON, "-c", "import os, sentinel, psutil; print(os.geteuid(), os.getegid())"]
        )
    except OSError as exc:
        pytest.fail(f"cannot start a process as uid {UID}: {exc}")
    if done.returncode != 0 or done.stdout.split() != [str(UID), str(UID)]:
        pytest.fail(
            f"cannot run sentinel's interpreter as uid {UID} (setpriv): exit {done.returncode}\n"
            f"{done.stdout}{done.stderr[-2000:]}"
        )
    return UID


@pytest.fixture(scope="session")
def read_only_root() -> bool:
    """Whether a private read-only mount namespace is used (else only the writes check)."""
    why = private_mounts_allowed()
    report(
        "read-only root: private mount namespace (every mount read-only but /proc, /sys)"
        if not why
        else f"read-only root: no private mount namespace here ({why}); "
        "checked by the writable directories only"
    )
    return not why


@pytest.fixture(scope="session")
def writable() -> list[Path]:
    """The directories uid 10001 could write to, searched after every run."""
    return writable_dirs()


@pytest.fixture
def sim() -> Iterator[SimProcess]:
    """A simulated vLLM as root, its port on its command line as vLLM's would be."""
    port = free_port()
    with SimProcess(scheduling_policy="priority", extra_args=["--port", str(port)]) as process:
        assert process.port == port
        yield process
