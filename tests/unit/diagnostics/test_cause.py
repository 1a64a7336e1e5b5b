"""The cause classifier, table-driven: status, CPU and wait channel in, one cause out."""

from __future__ import annotations

import pytest

from sentinel.diagnostics.cause import (
    SPINNING_CPU_PERCENT,
    CauseClass,
    ProcessObservation,
    classify,
)
from sentinel.evidence.process_model import ProcessRole, ProcessState

S = ProcessState
R = ProcessRole


def proc(
    pid: int,
    role: ProcessRole,
    status: ProcessState = S.SLEEPING,
    cpu: float | None = 1.0,
    wchan: str | None = "do_epoll_wait",
) -> ProcessObservation:
    title = {R.ENGINE_CORE: "VLLM::EngineCore", R.WORKER: "VLLM::Worker"}.get(role, "python")
    return ProcessObservation(pid, title, role, status, cpu, wchan)


API = proc(1, R.API_SERVER, cpu=3.0)

CASES: list[tuple[str, list[ProcessObservation], CauseClass, int | None]] = [
    ("nothing visible", [], CauseClass.PROCESS_GONE, None),
    ("engine zombie", [API, proc(2, R.ENGINE_CORE, S.ZOMBIE)], CauseClass.PROCESS_GONE, 2),
    (
        "engine spinning on a shared core",
        [API, proc(2, R.ENGINE_CORE, S.RUNNING, 44.0)],
        CauseClass.ENGINE_SPINNING,
        2,
    ),
    (
        "engine blocked, a helper thread awake",
        [API, proc(2, R.ENGINE_CORE, cpu=8.0, wchan="futex_wait_queue")],
        CauseClass.ENGINE_BLOCKED,
        2,
    ),
    (
        "worker vanished",
        [API, proc(2, R.ENGINE_CORE), proc(3, R.WORKER, S.GONE)],
        CauseClass.PROCESS_GONE,
        3,
    ),
    (
        "worker stopped",
        [API, proc(2, R.ENGINE_CORE), proc(3, R.WORKER, S.STOPPED, 0.0)],
        CauseClass.PROCESS_STOPPED,
        3,
    ),
    (
        "api stopped",
        [proc(1, R.API_SERVER, S.STOPPED), proc(2, R.ENGINE_CORE)],
        CauseClass.PROCESS_STOPPED,
        1,
    ),
    (
        "gone beats stopped",
        [proc(2, R.ENGINE_CORE, S.STOPPED), proc(3, R.WORKER, S.ZOMBIE)],
        CauseClass.PROCESS_GONE,
        3,
    ),
    (
        "stopped beats D",
        [proc(2, R.ENGINE_CORE, S.DISK_SLEEP), proc(3, R.WORKER, S.STOPPED)],
        CauseClass.PROCESS_STOPPED,
        3,
    ),
    (
        "an unreadable state is not a dead process",
        [API, proc(2, R.ENGINE_CORE, S.UNKNOWN, 0.0)],
        CauseClass.ENGINE_BLOCKED,
        2,
    ),
    (
        "worker in D state",
        [
            API,
            proc(2, R.ENGINE_CORE),
            proc(3, R.WORKER, S.DISK_SLEEP, 0.0, "os_wait_for_completion"),
        ],
        CauseClass.UNINTERRUPTIBLE_WAIT,
        3,
    ),
    (
        "engine blocked on a pipe",
        [API, proc(2, R.ENGINE_CORE, cpu=0.2, wchan="pipe_read")],
        CauseClass.ENGINE_BLOCKED,
        2,
    ),
    (
        "engine spinning",
        [API, proc(2, R.ENGINE_CORE, S.RUNNING, 99.0, "0")],
        CauseClass.ENGINE_SPINNING,
        2,
    ),
    # The EngineCore decides: a busy worker polling for work does not make it spinning.
    (
        "engine blocked, worker busy",
        [API, proc(2, R.ENGINE_CORE, cpu=0.5), proc(3, R.WORKER, S.RUNNING, 100.0)],
        CauseClass.ENGINE_BLOCKED,
        2,
    ),
    (
        "no engine core: busiest worker",
        [API, proc(3, R.WORKER, cpu=2.0), proc(4, R.WORKER, S.RUNNING, 95.0)],
        CauseClass.ENGINE_SPINNING,
        4,
    ),
    ("only an api server, idle", [API], CauseClass.ENGINE_BLOCKED, 1),
    (
        "cpu unknown counts as blocked",
        [proc(2, R.ENGINE_CORE, cpu=None)],
        CauseClass.ENGINE_BLOCKED,
        2,
    ),
    (
        "just under the threshold",
        [proc(2, R.ENGINE_CORE, S.RUNNING, SPINNING_CPU_PERCENT - 0.1)],
        CauseClass.ENGINE_BLOCKED,
        2,
    ),
    (
        "at the threshold",
        [proc(2, R.ENGINE_CORE, S.RUNNING, SPINNING_CPU_PERCENT)],
        CauseClass.ENGINE_SPINNING,
        2,
    ),
]


@pytest.mark.parametrize(
    ("processes", "expected", "pid"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_classify(
    processes: list[ProcessObservation], expected: CauseClass, pid: int | None
) -> None:
    cause = classify(processes)
    assert cause.cause is expected
    assert cause.pid == pid
    assert "\n" not in cause.summary
    assert cause.summary.startswith(expected.value.replace("_", " ") + ":")


def test_summary_names_the_process_and_wait_channel() -> None:
    cause = classify([proc(7, R.ENGINE_CORE, cpu=0.0, wchan="futex_wait_queue")])
    assert "VLLM::EngineCore (pid 7)" in cause.summary
    assert "futex_wait_queue" in cause.summary
