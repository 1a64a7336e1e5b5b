"""The simulator as a contract target, once per scheduling policy.

The ``vllm`` parameter (marked ``engine``) runs the same module against the
session's real vLLM from ``tests/engine``.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from sentinel_sim.launch import SimProcess
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
    params=[
        pytest.param("fcfs", id="sim-fcfs"),
        pytest.param("priority", id="sim-priority"),
        pytest.param("vllm", id="vllm", marks=pytest.mark.engine),
    ],
)
def contract_target(request: pytest.FixtureRequest) -> Iterator[ContractTarget]:
    policy = str(request.param)
    if policy == "vllm":  # the session's real vLLM (tests/engine), shared with the engine tests
        from tests.engine.session import shared_server

        yield shared_server(request.config).contract_target()
        return
    with SimProcess(scheduling_policy=policy, decode_tps=200.0) as sim:
        yield SimTarget(sim)
