"""A probe's answer: the contract's series, parsed back with prometheus-client's own parser."""

from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.exporter.exposition import render, tokens_per_second
from sentinel.exporter.prober import ProbeOutcome, TargetEvidence


def result(
    kind: str,
    reason: Reason = Reason.OK,
    *,
    ttft: float | None = None,
    completion_tokens: int | None = None,
    tokens_received: int | None = None,
) -> CanaryResult:
    return CanaryResult(
        name=kind,
        kind=CanaryKind(kind),
        reason=reason,
        started=0.0,
        duration=0.5,
        ttft=ttft,
        completion_tokens=completion_tokens,
        tokens_received=tokens_received,
    )


def samples(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }


def test_a_passing_probe() -> None:
    text = result("text", ttft=0.1, completion_tokens=5)
    image = result("multimodal", Reason.UNSUPPORTED)  # a text-only model: skipped
    evidence = TargetEvidence(
        running=2, waiting=0, phase="asleep", progress=True, stalled_seconds=0
    )
    got = samples(render(ProbeOutcome((text, image), evidence=evidence), 0.7))
    assert got[("probe_success", ())] == 1.0
    assert got[("probe_duration_seconds", ())] == 0.7
    assert got[("probe_sentinel_canary_success", (("kind", "text"),))] == 1.0
    assert ("probe_sentinel_canary_success", (("kind", "multimodal"),)) not in got
    assert got[("probe_sentinel_canary_duration_seconds", (("kind", "multimodal"),))] == 0.5
    assert got[("probe_sentinel_ttft_seconds", ())] == 0.1
    assert got[("probe_sentinel_tokens_per_second", ())] == 4 / 0.4
    assert got[("probe_sentinel_target_requests_running", ())] == 2.0
    assert got[("probe_sentinel_target_phase", (("phase", "asleep"),))] == 1.0
    assert got[("probe_sentinel_target_progress", ())] == 1.0
    assert got[("probe_sentinel_target_stalled_seconds", ())] == 0.0
    assert not [k for k in got if k[0] == "probe_sentinel_failure"]
    assert not [k for k in got if any(label == "target" for label, _ in k[1])]


def test_a_failed_probe_names_one_reason_and_leaves_unknowns_absent() -> None:
    stuck = result("text", Reason.TIMEOUT)
    outcome = ProbeOutcome((stuck,), "timeout", "no answer", TargetEvidence(error="timeout: x"))
    got = samples(render(outcome, 2.5))
    assert got[("probe_success", ())] == 0.0
    assert got[("probe_sentinel_failure", (("reason", "timeout"),))] == 1.0
    assert got[("probe_sentinel_canary_success", (("kind", "text"),))] == 0.0
    names = {name for name, _ in got}
    for absent in (
        "probe_sentinel_ttft_seconds",
        "probe_sentinel_tokens_per_second",
        "probe_sentinel_target_requests_running",
        "probe_sentinel_target_phase",
        "probe_sentinel_target_progress",
    ):
        assert absent not in names


def test_tokens_per_second_needs_two_tokens_and_a_first_token_time() -> None:
    assert tokens_per_second(result("text", ttft=0.1, completion_tokens=1)) is None
    assert tokens_per_second(result("text", completion_tokens=5)) is None
    assert tokens_per_second(result("text", ttft=0.5, completion_tokens=5)) is None
    assert tokens_per_second(result("text", ttft=0.1, tokens_received=3)) == 2 / 0.4


def _exporter_doc_names() -> set[str]:
    from sentinel.reference import DOCS

    text = (DOCS / "exporter.md").read_text(encoding="utf-8")
    return set(re.findall(r"^\| `([a-z_:*]+)` \|", text, re.MULTILINE))


def test_every_series_of_both_exporter_answers_is_in_docs_exporter_md() -> None:
    """docs/exporter.md is hand-written: every family of a /probe or /metrics answer is in it."""
    from sentinel.exporter.own_metrics import ExporterMetrics
    from sentinel.exporter.state import TargetStore

    evidence = TargetEvidence(
        running=1, waiting=1, phase="serving", progress=True, stalled_seconds=3
    )
    every = ProbeOutcome((result("text", ttft=0.1, completion_tokens=5),), evidence=evidence)
    failed = ProbeOutcome((result("text", Reason.TIMEOUT),), "timeout", "no answer")
    probe = {
        f.name
        for o in (every, failed)
        for f in text_string_to_metric_families(render(o, 1).decode())
    }
    own = ExporterMetrics(TargetStore(8, 60.0), ["text"]).registry
    exporter = {f.name + ("_total" if f.type == "counter" else "") for f in own.collect()}
    documented = _exporter_doc_names()
    assert "probe_sentinel_target_stalled_seconds" in probe
    missing = sorted(
        n for n in probe | exporter if n not in documented and not n.startswith("process_")
    )
    assert not missing, f"not in docs/exporter.md: {missing}"
