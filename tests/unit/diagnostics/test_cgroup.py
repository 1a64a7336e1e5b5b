"""Container CPU checks against a fake cgroup tree, and the doctor's pure checks."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from sentinel.diagnostics import cgroup
from sentinel.diagnostics.doctor import (
    ProbeTimings,
    Severity,
    check_cpu,
    check_metrics,
    check_probe_timings,
    check_scheduling_policy,
    fetch_metrics,
)
from sentinel.evidence.process_model import scheduling_policy


def fake_cgroup(root: Path, cpu_max: str, stat: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cpu.max").write_text(cpu_max + "\n")
    (root / "cpu.stat").write_text(
        stat or "usage_usec 9000000\nnr_periods 1000\nnr_throttled 400\nthrottled_usec 5000000\n"
    )
    return root


def threads(
    pid: int = 10,
    omp: str | None = None,
    affinity: int | None = 192,
    num_threads: int | None = 8,
    readable: bool = True,
) -> cgroup.ProcessThreads:
    return cgroup.ProcessThreads(pid, "VLLM::Worker", omp, readable, affinity, num_threads)


def test_quota_and_throttling(tmp_path: Path) -> None:
    root = fake_cgroup(tmp_path, "1200000 100000")
    quota = cgroup.read_cpu_quota(root)
    assert quota.cpus == 12.0
    assert quota.throttling["nr_throttled"] == 400
    assert quota.error is None


def test_unlimited_and_missing(tmp_path: Path) -> None:
    assert cgroup.read_cpu_quota(fake_cgroup(tmp_path / "a", "max 100000")).cpus is None
    missing = cgroup.read_cpu_quota(tmp_path / "nothing")
    assert missing.cpus is None
    assert missing.error


def test_unset_omp_on_a_big_host_is_oversubscribed(tmp_path: Path) -> None:
    root = fake_cgroup(tmp_path, "1200000 100000")
    section = cgroup.snapshot([threads(omp=None, affinity=192)], root=root, proc_root=tmp_path)
    [check] = section.checks
    assert check.omp_effective == 192
    assert check.omp_oversubscribed
    assert section.omp_oversubscribed == [check]
    assert any("192" in note for note in check.notes)


@pytest.mark.parametrize(
    ("omp", "num_threads", "omp_over", "threads_over"),
    [
        ("12", 8, False, False),
        ("12", 40, False, True),
        ("24", 8, True, False),
        ("4,2", 8, False, False),  # nested form: the first level counts
    ],
)
def test_set_omp_against_quota(
    tmp_path: Path, omp: str, num_threads: int, omp_over: bool, threads_over: bool
) -> None:
    root = fake_cgroup(tmp_path, "1200000 100000")
    section = cgroup.snapshot(
        [threads(omp=omp, num_threads=num_threads)], root=root, proc_root=tmp_path
    )
    [check] = section.checks
    assert check.omp_oversubscribed is omp_over
    assert check.threads_exceed_quota is threads_over


def test_no_quota_flags_nothing(tmp_path: Path) -> None:
    root = fake_cgroup(tmp_path, "max 100000")
    [check] = cgroup.snapshot(
        [threads(omp=None, num_threads=500)], root=root, proc_root=tmp_path
    ).checks
    assert not check.oversubscribed


def test_unreadable_environment_is_said(tmp_path: Path) -> None:
    root = fake_cgroup(tmp_path, "200000 100000")
    [check] = cgroup.snapshot(
        [threads(readable=False, num_threads=1)], root=root, proc_root=tmp_path
    ).checks
    assert check.omp_effective is None
    assert not check.omp_oversubscribed
    assert "unreadable" in check.notes[0]


def test_process_cgroup_under_root_is_preferred(tmp_path: Path) -> None:
    root = fake_cgroup(tmp_path / "cg", "max 100000")
    fake_cgroup(root / "kubepods" / "pod1" / "vllm", "400000 100000")
    proc_root = tmp_path / "proc"
    (proc_root / "10").mkdir(parents=True)
    (proc_root / "10" / "cgroup").write_text("0::/kubepods/pod1/vllm\n")
    section = cgroup.snapshot([threads(omp="8")], root=root, proc_root=proc_root)
    assert section.per_process[10].cpus == 4.0
    assert section.checks[0].omp_oversubscribed


def test_doctor_cpu_check(tmp_path: Path) -> None:
    root = fake_cgroup(tmp_path, "1200000 100000")
    section = cgroup.snapshot([threads(omp=None, affinity=192)], root=root, proc_root=tmp_path)
    checks = check_cpu(section)
    assert [c.severity for c in checks] == [Severity.WARN, Severity.PROBLEM]  # 40 % throttled
    assert "OMP_NUM_THREADS" in checks[1].summary


@pytest.mark.parametrize(
    ("argv", "policy", "severity"),
    [
        (
            [
                "python",
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--scheduling-policy",
                "priority",
            ],
            "priority",
            Severity.OK,
        ),
        (["vllm", "serve", "m", "--scheduling-policy=priority"], "priority", Severity.OK),
        (["vllm", "serve", "m"], None, Severity.WARN),
        (["vllm", "serve", "m", "--scheduling-policy", "fcfs"], "fcfs", Severity.WARN),
        # A title set with setproctitle shorter than the original command line:
        # the kernel shows it as one argument, the whole command in it.
        (
            ["python -m vllm.entrypoints.openai.api_server --scheduling-policy priority"],
            "priority",
            Severity.OK,
        ),
        (["vllm serve m --scheduling_policy=PRIORITY"], "priority", Severity.OK),
    ],
)
def test_scheduling_policy(argv: list[str], policy: str | None, severity: Severity) -> None:
    found = scheduling_policy(argv)
    assert (None if found is None else found.value) == policy
    assert check_scheduling_policy([argv]).severity is severity


def test_scheduling_policy_without_processes_is_skipped() -> None:
    assert check_scheduling_policy([]).severity is Severity.SKIPPED


METRICS_OK = """\
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="m"} 42.0
# HELP vllm:iteration_tokens_total Histogram of the number of tokens per engine_step.
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{le="1.0",model_name="m"} 3.0
vllm:iteration_tokens_total_bucket{le="+Inf",model_name="m"} 5.0
vllm:iteration_tokens_total_count{model_name="m"} 5.0
vllm:iteration_tokens_total_sum{model_name="m"} 80.0
"""


def test_metrics_check() -> None:
    assert check_metrics(METRICS_OK).severity is Severity.OK
    only_gen = METRICS_OK.split("# HELP vllm:iteration")[0]
    missing = check_metrics(only_gen)
    assert missing.severity is Severity.PROBLEM
    assert "vllm:iteration_tokens_total" in missing.summary
    # No /metrics at all, or another server's: a note, since sentinel run works without them.
    absent = check_metrics(None, "HTTP 404")
    assert absent.severity is Severity.NOTE
    assert "run still works" in absent.detail
    assert check_metrics("llamacpp:tokens_predicted_total 4\n").severity is Severity.NOTE


async def test_fetch_metrics_through_a_transport() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/metrics"
        return httpx.Response(200, text=METRICS_OK)

    text, error = await fetch_metrics("http://vllm:8000/", transport=httpx.MockTransport(handler))
    assert error is None
    assert text == METRICS_OK


def test_default_timings_are_sane() -> None:
    checks = check_probe_timings(ProbeTimings())
    assert all(c.severity is Severity.OK for c in checks), checks


@pytest.mark.parametrize(
    ("timings", "word"),
    [
        (ProbeTimings(scrape_interval_s=10.0), "scrape interval"),
        (ProbeTimings(text_deadline_s=20.0), "canary deadlines"),
        (ProbeTimings(liveness_failure_threshold=2), "sentinel outage"),
        (ProbeTimings(diagnostics_budget_s=30.0), "diagnostics budget"),
    ],
)
def test_bad_timings_are_problems(timings: ProbeTimings, word: str) -> None:
    bad = [c for c in check_probe_timings(timings) if c.severity is Severity.PROBLEM]
    assert len(bad) == 1
    assert word in bad[0].summary
