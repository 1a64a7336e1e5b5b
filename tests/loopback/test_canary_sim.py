"""The canary runner and ``probe_targets`` against the simulated vLLM, with injected faults."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import httpx
import pytest

from sentinel.canary.catalog import load_catalog
from sentinel.canary.kinds import KINDS
from sentinel.canary.result import Reason
from sentinel.canary.runner import CanaryRunner
from sentinel.canary.spec import CanaryKind, CanarySpec
from sentinel.commands.probe import probe_targets
from sentinel_sim.launch import SimProcess

CATALOG = load_catalog()
TEXT = CATALOG.get("text")
STRUCTURED = CATALOG.get("structured")
MULTIMODAL = CATALOG.get("multimodal")
DEADLINE = 1.5  # seconds: the sim answers a canary in milliseconds


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess(scheduling_policy="priority", decode_tps=500.0) as process:
        yield process


@pytest.fixture
def healthy_sim(sim: SimProcess) -> Iterator[SimProcess]:
    sim.control.clear_all()
    try:
        yield sim
    finally:
        sim.control.clear_all()


async def run_all(sim: SimProcess, *specs: CanarySpec) -> dict[str, Reason]:
    async with httpx.AsyncClient() as client:
        runner = CanaryRunner(client, sim.base_url)
        model = await runner.resolve_model(deadline=5)
        assert model == sim.model
        results = {}
        for spec in (TEXT, STRUCTURED, MULTIMODAL, *specs):
            result = await runner.run(spec, model=model, deadline=DEADLINE)
            results[result.name] = result.reason
        return results


async def test_healthy_sim_passes_every_kind(healthy_sim: SimProcess) -> None:
    streamed = replace(TEXT, name="text-stream", stream=True)
    reasons = await run_all(healthy_sim, streamed)
    assert reasons == {
        "text": Reason.OK,
        "structured": Reason.OK,
        "multimodal": Reason.OK,
        "text-stream": Reason.OK,
    }


async def test_streaming_reports_ttft_and_usage(healthy_sim: SimProcess) -> None:
    async with httpx.AsyncClient() as client:
        runner = CanaryRunner(client, healthy_sim.base_url)
        spec = replace(MULTIMODAL, stream=True)
        result = await runner.run(spec, model=healthy_sim.model, deadline=DEADLINE)
    assert result.reason is Reason.OK, result.detail
    assert result.ttft is not None
    assert result.prompt_tokens is not None


async def test_engine_hang_times_out_every_kind(healthy_sim: SimProcess) -> None:
    healthy_sim.control.set_fault("engine_hang")
    async with httpx.AsyncClient() as client:
        runner = CanaryRunner(client, healthy_sim.base_url)
        text = await runner.run(TEXT, model=healthy_sim.model, deadline=0.5)
        stream = await runner.run(replace(TEXT, stream=True), model=healthy_sim.model, deadline=0.5)
    assert (text.reason, stream.reason) == (Reason.TIMEOUT, Reason.TIMEOUT)


async def test_structured_hang_fails_only_structured(healthy_sim: SimProcess) -> None:
    healthy_sim.control.set_fault("structured_hang")
    reasons = await run_all(healthy_sim)
    assert reasons == {
        "text": Reason.OK,
        "structured": Reason.TIMEOUT,
        "multimodal": Reason.OK,
    }


async def test_multimodal_hang_fails_only_multimodal(healthy_sim: SimProcess) -> None:
    healthy_sim.control.set_fault("multimodal_hang")
    reasons = await run_all(healthy_sim)
    assert reasons["text"] is Reason.OK
    assert reasons["multimodal"] is Reason.TIMEOUT


@pytest.mark.parametrize(
    ("mode", "kind", "reason"),
    [("schema_break", "structured", Reason.SCHEMA), ("invalid_json", "text", Reason.BAD_BODY)],
)
async def test_garbage_replies(
    healthy_sim: SimProcess, mode: str, kind: str, reason: Reason
) -> None:
    healthy_sim.control.set_fault("garbage", mode=mode)
    assert (await run_all(healthy_sim))[kind] is reason


async def test_error_5xx_is_http_status(healthy_sim: SimProcess) -> None:
    healthy_sim.control.set_fault("error_5xx")
    assert (await run_all(healthy_sim))["text"] is Reason.HTTP_STATUS


async def test_probe_targets_against_the_sim(healthy_sim: SimProcess) -> None:
    (report,) = await probe_targets([healthy_sim.base_url + "/v1"], timeout=DEADLINE)
    assert report.healthy, report
    assert {r.kind for r in report.results} == set(KINDS)
    healthy_sim.control.set_fault("structured_hang")
    (report,) = await probe_targets(
        [healthy_sim.base_url], kinds=[CanaryKind.TEXT, CanaryKind.STRUCTURED], timeout=DEADLINE
    )
    assert not report.healthy
    assert [r.reason for r in report.results] == [Reason.OK, Reason.TIMEOUT]


async def test_text_only_sim_reports_multimodal_unsupported() -> None:
    with SimProcess(text_only=True) as sim:
        async with httpx.AsyncClient() as client:
            runner = CanaryRunner(client, sim.base_url)
            result = await runner.run(MULTIMODAL, model=sim.model, deadline=DEADLINE)
        assert result.reason is Reason.UNSUPPORTED, result.detail
        assert result.http_status == 400
        (report,) = await probe_targets([sim.base_url], timeout=DEADLINE)
        assert report.healthy
