"""What the contract tests need from a server under test, simulated or real.

The contract module (:mod:`tests.contract.test_contract`) only talks HTTP to
``base_url`` and, for the stopped-engine assertions, asks the target to stop
and resume its engine process. Implementations: the simulator in
``tests/contract/conftest.py``; a real vLLM target parametrizes the same
``contract_target`` fixture (marked ``engine``).
"""

from __future__ import annotations

import os
import signal
from typing import Protocol, runtime_checkable

import psutil

ENGINE_TITLE = "VLLM::EngineCore"


@runtime_checkable
class ContractTarget(Protocol):
    """An OpenAI-compatible server with a vLLM-like engine process."""

    @property
    def base_url(self) -> str:
        """Server root without ``/v1``, e.g. ``http://127.0.0.1:8000``."""
        ...

    @property
    def model(self) -> str:
        """The served model name (``model_name`` label, ``/v1/models`` id)."""
        ...

    @property
    def supports_images(self) -> bool: ...

    @property
    def scheduling_policy(self) -> str:
        """``fcfs`` or ``priority``, as the server was started."""
        ...

    def stop_engine(self) -> None:
        """SIGSTOP the process that generates tokens; the API process keeps running."""
        ...

    def resume_engine(self) -> None:
        """SIGCONT what :meth:`stop_engine` stopped."""
        ...


def engine_processes(api_pid: int, title: str = ENGINE_TITLE) -> list[psutil.Process]:
    """Descendants of the API process whose title is ``title`` (how vLLM names EngineCore)."""
    found = []
    for child in psutil.Process(api_pid).children(recursive=True):
        try:
            if child.name() == title or title in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found


def signal_processes(processes: list[psutil.Process], signum: signal.Signals) -> None:
    for process in processes:
        os.kill(process.pid, signum)
