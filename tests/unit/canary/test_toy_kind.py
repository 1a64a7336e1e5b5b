"""A canary kind added from outside sentinel: one module (tests/toykind.py) plus one registration.

The toy kind goes through the catalog (a YAML file in a temporary catalog
directory), the scheduler (paired with the text control, through the real
runner against an ``httpx.MockTransport``) and the verdict (a path hang of kind
``toy``), with no edit anywhere in sentinel.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client import CollectorRegistry

from sentinel.canary.catalog import CatalogError, describe, load_catalog
from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.runner import CanaryRunner
from sentinel.canary.spec import TEXT
from sentinel.record.ledger import Ledger
from sentinel.record.planner import Planner
from sentinel.record.sink import ResultSink
from sentinel.scheduling.scheduler import Scheduler
from sentinel.telemetry.metrics import SentinelMetrics, hang_kinds
from sentinel.verdict import Action, HangKind, Policy, VerdictState, evaluate
from tests import toykind

REQUEST = {"messages": [{"role": "user", "content": "Say ok."}], "max_tokens": 2}
TOY_DEADLINE = 0.2  # each toy miss costs this much wall time; two are needed


@pytest.fixture
def toy_registered() -> Iterator[None]:
    with toykind.registered():
        yield


def write_catalog(directory: Path, **toy: Any) -> Path:
    files = {
        "text.yaml": {"kind": "text", "request": REQUEST},
        "toy.yaml": {"kind": "toy", "request": REQUEST, **toy},
    }
    for name, content in files.items():
        (directory / name).write_text(yaml.safe_dump(content))
    return directory


def test_the_catalog_loads_a_toy_canary_with_the_kind_defaults(
    toy_registered: None, tmp_path: Path
) -> None:
    catalog = load_catalog(write_catalog(tmp_path))
    assert catalog.kinds() == (TEXT, toykind.KIND)
    toy = catalog.get("toy")
    assert toy.kind is toykind.KIND
    assert (toy.deadline, toy.interval, toy.jitter) == (3.0, 7.0, 0.0)
    assert describe([toy])[0]["kind"] == "toy"
    assert HangKind(toykind.KIND) in hang_kinds()


@pytest.mark.parametrize(
    ("toy", "key", "problem"),
    [
        pytest.param({"schema": {"enum": ["{nonce}"]}}, "schema", "not used by a toy", id="schema"),
        pytest.param({"endpoint": "/v1/completions"}, "endpoint", "a toy canary needs", id="ep"),
    ],
)
def test_the_catalog_holds_a_toy_canary_to_the_kind_rules(
    toy_registered: None, tmp_path: Path, toy: dict[str, Any], key: str, problem: str
) -> None:
    with pytest.raises(CatalogError) as caught:
        load_catalog(write_catalog(tmp_path, **toy))
    assert (caught.value.key, problem in caught.value.problem) == (key, True)


def test_a_toy_path_kind_needs_the_text_control(toy_registered: None, tmp_path: Path) -> None:
    write_catalog(tmp_path)
    (tmp_path / "text.yaml").unlink()
    with pytest.raises(CatalogError, match=r"toy\.yaml: kind: .*needs an enabled text canary"):
        load_catalog(tmp_path)


def test_without_its_registration_the_toy_kind_is_unknown(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="unknown canary kind 'toy'"):
        load_catalog(write_catalog(tmp_path))
    assert HangKind(toykind.KIND) not in hang_kinds()


async def never_elapses(delay: float) -> None:
    """The scheduler's sleep between ticks: parked until cancelled, so each loop ticks once."""
    await asyncio.Event().wait()


async def test_a_hung_toy_path_is_confirmed_through_scheduler_and_verdict(
    toy_registered: None, tmp_path: Path
) -> None:
    catalog = load_catalog(write_catalog(tmp_path, deadline=TOY_DEADLINE, interval=1.0))
    released = asyncio.Event()

    async def server(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if str(body.get("user", "")).startswith(toykind.USER_PREFIX):
            await released.wait()  # the toy path hangs; the text path answers
        message = {"role": "assistant", "content": "ok"}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        usage = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
        return httpx.Response(200, json={"choices": [choice], "usage": usage})

    toy_results: list[CanaryResult] = []
    two_misses = asyncio.Event()

    def on_result(result: CanaryResult) -> None:
        if result.kind is toykind.KIND:
            toy_results.append(result)
            if len(toy_results) >= 2:
                two_misses.set()

    ledger = Ledger(
        [(s.kind, Action(s.policy), s.latency_slo) for s in catalog.enabled()], time.monotonic()
    )
    # The toy path worked once in this epoch: a path that never worked is a
    # startup failure, not a hang.
    worked = ledger.canary_sent(toykind.KIND, time.monotonic())
    ledger.canary_done(
        toykind.KIND,
        worked,
        CanaryResult("toy", toykind.KIND, Reason.OK, time.monotonic(), 0.01),
        time.monotonic(),
        epoch=ledger.epoch,
    )
    registry = CollectorRegistry()
    metrics = SentinelMetrics(registry)
    async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as client:
        scheduler = Scheduler(
            catalog.enabled(),
            CanaryRunner(client, "http://target.invalid"),
            ledger,
            metrics,
            sink=ResultSink(ledger, metrics, clock=time.monotonic, listener=on_result),
            planner=Planner(ledger, catalog.enabled()),
            idle_window=5.0,
            configured_model="m",
            clock=time.monotonic,
            sleep=never_elapses,
            beat=lambda name, gap: None,
        )
        loops = asyncio.create_task(scheduler.run())
        try:
            await asyncio.wait_for(two_misses.wait(), timeout=10.0)
        finally:
            loops.cancel()
            released.set()
            with contextlib.suppress(asyncio.CancelledError):
                await loops

    toy = ledger.records[toykind.KIND]
    assert [r.reason for r in toy.results][-2:] == [Reason.TIMEOUT, Reason.TIMEOUT]
    assert [c is not None and c.ok for c in toy.controls][-2:] == [True, True]

    now = time.monotonic()
    evidence = ledger.evidence(now, freshness=10.0)
    _, verdict = evaluate(VerdictState(), evidence, Policy(), now)
    assert [h.kind for h in verdict.hangs] == [HangKind(toykind.KIND)]
    hang = verdict.hangs[0]
    assert hang.action is Action.RESTART
    assert hang.reason.startswith("toy path hang: 2 canaries made no progress")
    assert not verdict.liveness.ok

    metrics.hang_detected(hang.kind)
    detections = registry.get_sample_value("sentinel_hang_detections_total", {"kind": "toy"})
    assert detections == 1.0
