"""A child still its parent's copy (forked, not yet exec'd) is no engine or worker."""

from __future__ import annotations

from sentinel.evidence.process_model import ProcessRole
from sentinel.evidence.process_table import Row, unexeced_forks

ENGINE = ("VLLM::EngineCore",)
WORKER = ("VLLM::Worker_TP0",)


def row(pid: int, ppid: int | None, cmdline: tuple[str, ...]) -> Row:
    return Row(pid, ppid, cmdline[0][:15], cmdline, 100.0 + pid, "sleeping", 0.0)


def test_only_a_same_titled_child_of_the_same_role_is_a_fork() -> None:
    rows = [
        row(1, None, ("vllm", "serve")),
        row(2, 1, ENGINE),  # the engine
        row(3, 2, ENGINE),  # its copy, mid-fork
        row(4, 2, WORKER),  # its worker, retitled
        row(5, 4, WORKER),  # the worker's copy
        row(6, 2, ("ptxas", "kernel.ptx")),  # a compiler after its exec
        row(7, 1, ENGINE),  # a second engine under the server (data parallel)
    ]
    roles = {
        1: ProcessRole.API_SERVER,
        2: ProcessRole.ENGINE_CORE,
        3: ProcessRole.ENGINE_CORE,
        4: ProcessRole.WORKER,
        5: ProcessRole.WORKER,
        6: None,
        7: ProcessRole.ENGINE_CORE,
    }
    assert sorted(unexeced_forks(rows, roles)) == [3, 5]
