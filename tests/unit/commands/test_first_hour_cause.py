"""The pure parts of issue 31's first-hour fixes: cause gating, probe outcomes, origins."""

from __future__ import annotations

from pathlib import Path

import pytest

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.commands.listeners import origin
from sentinel.commands.probe import ProbeUsageError, TargetReport, normalize_url, probe_outcome
from sentinel.diagnostics.cause import CauseClass, ProcessObservation, classify
from sentinel.diagnostics.workload import ON_DEMAND, engine_work, requests_running
from sentinel.evidence.process_model import ProcessRole, ProcessState

CORE = ProcessObservation(
    7, "VLLM::EngineCore", ProcessRole.ENGINE_CORE, ProcessState.SLEEPING, 0.0, "pipe_read"
)
STOPPED = ProcessObservation(8, "VLLM::Worker", ProcessRole.WORKER, ProcessState.STOPPED, 0.0)
PTXAS = "ptxas (pid 9, under pid 7)"


@pytest.mark.parametrize(
    ("processes", "running", "compilers", "expected"),
    [
        ([CORE], None, (), CauseClass.ENGINE_BLOCKED),  # work unknown: as before
        ([CORE], 2.0, (), CauseClass.ENGINE_BLOCKED),  # work and no compiler: blocked
        ([CORE], 0.0, (), CauseClass.ENGINE_IDLE),
        ([CORE], 1.0, (PTXAS,), CauseClass.ENGINE_COMPILING),
        ([CORE], None, (PTXAS,), CauseClass.ENGINE_COMPILING),
        ([CORE, STOPPED], 0.0, (PTXAS,), CauseClass.PROCESS_STOPPED),  # the kernel's word first
    ],
)
def test_blocked_only_with_work_and_no_compiler(
    processes: list[ProcessObservation],
    running: float | None,
    compilers: tuple[str, ...],
    expected: CauseClass,
) -> None:
    cause = classify(processes, running=running, compilers=compilers)
    assert cause.cause is expected, cause.summary
    if expected is CauseClass.ENGINE_COMPILING:
        assert cause.summary.startswith(f"engine compiling: {PTXAS} under VLLM::EngineCore")


GAUGE = (
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{engine="0",model_name="m"} %s\n'
    'vllm:num_requests_running{engine="1",model_name="m"} 1.0\n'
    "vllm:num_requests_running_other 9\n"
)


def test_requests_running_sums_engines_of_the_newest_scrape() -> None:
    scrapes = [(1.0, GAUGE % "5.0"), (2.0, GAUGE % "2.0")]
    assert requests_running(scrapes) == 3.0
    assert requests_running([]) is None
    assert requests_running([(1.0, "vllm:generation_tokens_total 4\n")]) is None


def test_only_an_on_demand_capture_reads_the_gauge() -> None:
    idle = [(1.0, GAUGE.replace("1.0", "0.0") % "0.0")]
    assert engine_work(ON_DEMAND, [], idle) == (0.0, ())
    # A daemon's capture is triggered by a waiting canary: a frozen 0 proves nothing.
    assert engine_work("engine-hang", [], idle) == (None, ())


@pytest.mark.parametrize(
    ("given", "normal"),
    [("127.0.0.1:8000", "http://127.0.0.1:8000"), ("vllm:80/v1", "http://vllm:80")],
)
def test_host_port_is_an_http_target(given: str, normal: str) -> None:
    assert normalize_url(given) == normal


@pytest.mark.parametrize("given", ["vllm", "vllm:", "vllm:port", ""])
def test_a_host_without_a_port_is_refused(given: str) -> None:
    with pytest.raises(ProbeUsageError):
        normalize_url(given)


def result(kind: CanaryKind, reason: Reason) -> CanaryResult:
    return CanaryResult(kind.value, kind, reason, 0.0, 0.1)


def test_unsupported_is_a_skip_unless_strict() -> None:
    unsupported = result(CanaryKind("correctness"), Reason.UNSUPPORTED)
    assert probe_outcome(unsupported) == "skipped"
    assert probe_outcome(unsupported, strict=True) == "fail"
    ok = result(CanaryKind.TEXT, Reason.OK)
    assert TargetReport("http://a", "m", (ok, unsupported)).healthy
    assert not TargetReport("http://a", "m", (ok, unsupported), strict=True).healthy
    assert not TargetReport("http://a", "m", (unsupported,)).healthy  # nothing was checked


def test_origin_names_the_flag_variable_file_or_default() -> None:
    config = Path("/etc/sentinel.yaml")
    assert origin("grpc_listen", {"grpc_listen": "x"}, {}, None) == "--grpc-listen"
    assert origin("listen", {}, {"SENTINEL_LISTEN": "x"}, config) == "SENTINEL_LISTEN"
    assert origin("listen", {}, {}, config) == "/etc/sentinel.yaml: listen"
    assert origin("listen", {}, {}, None) == "listen (default)"
