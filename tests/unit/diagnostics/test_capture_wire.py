"""The context a capture child receives is the context the daemon built, every field of it."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.diagnostics.bundle import DiagnosticsContext, Trigger
from sentinel.diagnostics.child import decode_context, encode_context
from sentinel.diagnostics.procs import ProcessMatch
from sentinel.diagnostics.sections import ProbeTransition


def _everything_set() -> DiagnosticsContext:
    result = CanaryResult(
        "text-default",
        CanaryKind.TEXT,
        Reason.TIMEOUT,
        100.0,
        8.0,
        "deadline",
        ttft=0.5,
        http_status=200,
        prompt_tokens=7,
        completion_tokens=0,
        stream=True,
        tokens_received=0,
        engine=1,
    )
    return DiagnosticsContext(
        trigger=Trigger("engine-hang", "no progress"),
        process_match=ProcessMatch(
            titles=("VLLM::X",), cmdlines=("serve m",), include_descendants=False, roots=(42,)
        ),
        metrics_text=((1.0, "a 1\n"), (2.0, "é 2\n"), (3.0, "c 3\n")),
        metrics_cut=(0, 5, 7),
        canary_history={"text": (result,)},
        outstanding={"structured": [97.5, 99.0]},
        samples=({"at": 98.0, "counters": {"completions": 3.0}, "gauges": {"running": 1.0}},),
        probe_answers=(
            ProbeTransition(90.0, "startup", True, "every kind passed"),
            ProbeTransition(99.5, "liveness", False, "engine hang", ("engine", "text"), True),
        ),
        config={"target": "http://127.0.0.1:8000", "nested": {"list": [1, 2]}},
        version="9.9.9",
        budget_s=3.5,
        cpu_window_s=0.25,
        stack_timeout_s=1.5,
        cgroup_root=Path("/sys/fs/cgroup/pod"),
        py_spy="/usr/bin/py-spy",
        gpu_enabled=False,
        xid_window_s=0.75,
        section_max_bytes=1234,
        bundle_max_bytes=5678,
        correctness={"model": "m", "fingerprint": {"generations": [{"token_ids": [1, 2]}]}},
    )


def test_every_field_crosses_the_pipe() -> None:
    context = _everything_set()
    default = DiagnosticsContext(trigger=Trigger("x", "y"))
    # This test covers a field only while the context above sets it.
    unset = [
        f.name for f in fields(context) if getattr(context, f.name) == getattr(default, f.name)
    ]
    assert unset == []

    header, texts = encode_context(context)

    assert decode_context(header, texts) == context


def test_only_what_a_bundle_keeps_crosses_the_pipe() -> None:
    scrapes = tuple((float(i), f"line {i}\n" * 100) for i in range(5))
    context = DiagnosticsContext(
        trigger=Trigger("x", "y"), metrics_text=scrapes, section_max_bytes=1000
    )

    header, texts = encode_context(context)
    decoded = decode_context(header, texts)

    assert [at for at, _ in decoded.metrics_text] == [2.0, 3.0, 4.0]
    assert sum(len(t.encode()) for t in texts) <= 1000
    assert [size for _, size, _ in header["metrics"]] == [len(t.encode()) for t in texts]
    for (_, whole), text, cut in zip(scrapes[2:], texts, decoded.metrics_cut, strict=True):
        assert len(text.encode()) + cut == len(whole.encode())
