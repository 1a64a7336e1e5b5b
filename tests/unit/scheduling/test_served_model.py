"""The model canaries address, on its own: spec, configuration, or one question per epoch.

The question goes through the real runner to an ``httpx.MockTransport`` (the
one seam) that counts it.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import httpx
from prometheus_client import CollectorRegistry

from sentinel.canary.catalog import load_catalog
from sentinel.canary.runner import CanaryRunner
from sentinel.canary.spec import CanaryKind, CanarySpec
from sentinel.record.ledger import Ledger
from sentinel.record.sink import ResultSink
from sentinel.scheduling.served_model import ServedModel
from sentinel.telemetry.metrics import SentinelMetrics
from sentinel.verdict import Action

TEXT = CanaryKind("text")
SETTLE_ROUNDS = 50  # event-loop turns that let every task block
SPEC = next(s for s in load_catalog().enabled() if s.kind == TEXT)


class Models:
    """``/v1/models``: lists ``served`` after ``gate`` opens; ``refuse`` drops the connection."""

    def __init__(self, served: str = "tiny") -> None:
        self.served = served
        self.asked = 0
        self.refuse = False
        self.gate = asyncio.Event()
        self.gate.set()

    async def handle(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/models"
        self.asked += 1
        if self.refuse:
            raise httpx.ConnectError("connection refused", request=request)
        await self.gate.wait()
        return httpx.Response(200, json={"object": "list", "data": [{"id": self.served}]})


def _served(
    client: httpx.AsyncClient, ledger: Ledger, configured: str | None = None
) -> ServedModel:
    runner = CanaryRunner(client, "http://vllm")
    sink = ResultSink(ledger, SentinelMetrics(CollectorRegistry()), clock=lambda: 5.0)
    return ServedModel(runner, sink, configured=configured)


def _ledger() -> Ledger:
    return Ledger([(TEXT, Action.RESTART, None)], 0.0)


def _with_model(spec: CanarySpec, model: str) -> CanarySpec:
    return replace(spec, request={**spec.request, "model": model})


async def test_the_spec_then_the_configuration_name_the_model_without_asking() -> None:
    models = Models()
    async with httpx.AsyncClient(transport=httpx.MockTransport(models.handle)) as client:
        served = _served(client, _ledger(), configured="configured")
        assert await served.resolve(_with_model(SPEC, "given")) == "given"
        assert await served.resolve(SPEC) == "configured"
    assert models.asked == 0


async def test_the_server_is_asked_once_per_epoch_even_by_loops_asking_together() -> None:
    models = Models()
    ledger = _ledger()
    async with httpx.AsyncClient(transport=httpx.MockTransport(models.handle)) as client:
        served = _served(client, ledger)
        models.gate.clear()
        asking = [asyncio.create_task(served.resolve(SPEC)) for _ in range(3)]
        for _ in range(SETTLE_ROUNDS):  # every task as far as it goes before the answer
            await asyncio.sleep(0)
        assert models.asked == 1
        models.gate.set()
        assert await asyncio.gather(*asking) == ["tiny"] * 3
        assert (models.asked, ledger.model, ledger.reachable) == (1, "tiny", True)

        models.served = "other"
        assert await served.resolve(SPEC) == "tiny"
        ledger.new_epoch("API server restarted", 1.0)
        assert await served.resolve(SPEC) == "other"
    assert models.asked == 2


async def test_a_refused_question_names_no_model_and_starts_the_listener_timer() -> None:
    models = Models()
    models.refuse = True
    ledger = _ledger()
    async with httpx.AsyncClient(transport=httpx.MockTransport(models.handle)) as client:
        served = _served(client, ledger)
        assert await served.resolve(SPEC) is None
        assert (ledger.model, ledger.reachable, ledger.refused_since) == (None, False, 5.0)
        models.refuse = False
        assert await served.resolve(SPEC) == "tiny"
    assert (ledger.reachable, ledger.refused_since, models.asked) == (True, None, 2)
