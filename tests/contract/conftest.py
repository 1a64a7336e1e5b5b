"""The simulator as a contract target, once per scheduling policy.

A real-vLLM target joins by adding a parameter to ``contract_target`` (marked
``engine``) that yields another :class:`~tests.contract.target.ContractTarget`.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from chaos.sim.launch import SimProcess
from tests.contract.target import ContractTarget, engine_processes, signal_processes


@dataclass
class SimTarget:
    """The simulated vLLM behind the contract protocol; the engine is found by its title."""

    sim: SimProcess
    supports_images: bool = True

    @property
    def base_url(self) -> str:
        return self.sim.base_url

    @property
    def model(self) -> str:
        return self.sim.model

    @property
    def scheduling_policy(self) -> str:
        return self.sim.scheduling_policy

    def stop_engine(self) -> None:
        signal_processes(engine_processes(self.sim.api_pid), signal.SIGSTOP)

    def resume_engine(self) -> None:
        signal_processes(engine_processes(self.sim.api_pid), signal.SIGCONT)


@pytest.fixture(
    scope="session",
    params=[pytest.param("fcfs", id="sim-fcfs"), pytest.param("priority", id="sim-priority")],
)
def contract_target(request: pytest.FixtureRequest) -> Iterator[ContractTarget]:
    policy = str(request.param)
    with SimProcess(scheduling_policy=policy, decode_tps=200.0) as sim:
        yield SimTarget(sim)
