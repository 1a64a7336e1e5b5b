"""The HTTP view over a real socket: probe endpoints, /status, /metrics, extra routes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import httpx
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.evaluation.health import HealthState, ProbeAnswer
from sentinel.evaluation.status import PriorityReport, StatusInputs, Transition, status_document
from sentinel.record.ledger import Ledger
from sentinel.serve.answers import AnswerBodies
from sentinel.serve.http import HttpServer
from sentinel.serve.state_metrics import daemon_metrics
from sentinel.verdict import Action, Policy, VerdictState, evaluate
from tests.metric_contract import CONTRACT


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _incidents(request: web.Request) -> web.Response:
    return web.json_response({"incidents": []})


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def state(clock: Clock) -> HealthState:
    return HealthState(clock=clock)


@pytest.fixture
async def server(state: HealthState, clock: Clock) -> AsyncIterator[HttpServer]:
    registry = CollectorRegistry()
    daemon_metrics(registry, state, clock=clock)
    http = HttpServer(
        state, registry, "127.0.0.1", 0, extra_routes=[web.get("/incidents", _incidents)]
    )
    await http.start()
    try:
        yield http
    finally:
        await http.stop()


@pytest.fixture
async def client(server: HttpServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=5.0) as c:
        yield c


async def test_binds_an_allocated_port(server: HttpServer) -> None:
    assert server.port > 0
    assert server.url == f"http://127.0.0.1:{server.port}"


async def test_initial_answers(client: httpx.AsyncClient) -> None:
    live = await client.get("/livez")
    ready = await client.get("/readyz")
    startup = await client.get("/startupz")
    assert live.status_code == 200
    assert live.json() == {"status": "ok", "reason": "no hang confirmed", "since": 0.0}
    assert ready.status_code == 503
    assert ready.json()["status"] == "fail"
    assert startup.status_code == 503
    assert startup.json()["reason"]


async def test_endpoints_follow_published_snapshots(
    state: HealthState, client: httpx.AsyncClient
) -> None:
    await state.publish(
        replace(
            state.snapshot(),
            liveness=ProbeAnswer(False, "engine hang confirmed", since=42.0),
            readiness=ProbeAnswer(False, "liveness fails", since=42.0),
            startup=ProbeAnswer(True, "every canary kind succeeded", since=10.0),
            priority_effective=True,
            status={"target": "http://127.0.0.1:8000", "kinds": {"text": {"ok": False}}},
        )
    )
    live = await client.get("/livez")
    assert live.status_code == 503
    assert live.json() == {"status": "fail", "reason": "engine hang confirmed", "since": 42.0}
    assert (await client.get("/startupz")).status_code == 200

    status = (await client.get("/status")).json()
    assert status["target"] == "http://127.0.0.1:8000"
    assert status["kinds"] == {"text": {"ok": False}}
    assert status["liveness"]["status"] == "fail"
    assert status["startup"]["status"] == "ok"
    assert status["priority_effective"] is True
    assert status["revision"] == 1  # the change counter; "version" is the release

    await state.publish(
        replace(state.snapshot(), liveness=ProbeAnswer(True, "no hang confirmed", since=50.0))
    )
    assert (await client.get("/livez")).status_code == 200


async def test_status_passes_the_redactor(state: HealthState, client: httpx.AsyncClient) -> None:
    """A target URL with userinfo and a secret in a cause line never leave through /status."""
    await state.publish(
        replace(
            state.snapshot(),
            status={
                "target": "http://admin:hunter2-pw@vllm:8000",
                "incident": {
                    "cause": "engine_blocked: vllm serve --api-key sk-live-0123456789abcdef"
                },
                "model": "tiny-llama",
            },
        )
    )
    body = (await client.get("/status")).text
    assert "hunter2-pw" not in body
    assert "sk-live-0123456789abcdef" not in body
    status = json.loads(body)
    assert status["target"].endswith("@vllm:8000")
    assert status["model"] == "tiny-llama"


async def test_healthz_fails_when_a_loop_stops_ticking(
    state: HealthState, clock: Clock, client: httpx.AsyncClient
) -> None:
    state.beat("scheduler", max_gap=3.0)
    ok = await client.get("/healthz")
    assert ok.status_code == 200
    clock.now += 10.0
    stale = await client.get("/healthz")
    assert stale.status_code == 503
    assert "scheduler" in stale.json()["reason"]


async def test_metrics_parse_back_with_every_contract_name(
    state: HealthState, client: httpx.AsyncClient
) -> None:
    await state.publish(replace(state.snapshot(), priority_effective=False, progress_at=990.0))
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    # The parser names counter families without `_total`.
    exposed = {name if f.type != "counter" else name + "_total" for name, f in families.items()}
    assert exposed >= CONTRACT
    (age,) = families["sentinel_progress_age_seconds"].samples
    assert age.value == 10.0


async def test_metrics_negotiate_openmetrics(client: httpx.AsyncClient) -> None:
    response = await client.get(
        "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/openmetrics-text")
    assert response.text.rstrip().endswith("# EOF")


async def test_extra_routes_are_served(client: httpx.AsyncClient) -> None:
    response = await client.get("/incidents")
    assert response.status_code == 200
    assert response.json() == {"incidents": []}
    assert (await client.get("/nope")).status_code == 404


async def test_stop_closes_the_port(state: HealthState) -> None:
    http = HttpServer(state, CollectorRegistry(), "127.0.0.1", 0)
    await http.start()
    url = http.url
    await http.stop()
    async with httpx.AsyncClient(timeout=2.0) as c:
        with pytest.raises(httpx.ConnectError):
            await c.get(url + "/livez")


async def test_start_fails_on_a_taken_port(server: HttpServer, state: HealthState) -> None:
    second = HttpServer(state, CollectorRegistry(), "127.0.0.1", server.port)
    with pytest.raises(OSError, match="address already in use"):
        await second.start()


def test_status_document_is_built_from_its_inputs_alone() -> None:
    """Every age is the given ``now`` minus a given time; no clock is read."""
    text = CanaryKind("text")
    ledger = Ledger([(text, Action.RESTART, None)], 100.0)
    token = ledger.canary_sent(text, 104.0)
    result = CanaryResult(name="text", kind=text, reason=Reason.OK, started=104.0, duration=0.5)
    ledger.canary_done(text, token, result, 104.5, epoch=0)
    ledger.canary_sent(text, 108.0)
    evidence = ledger.evidence(110.0, freshness=10.0)
    _, verdict = evaluate(VerdictState(), evidence, Policy(), 110.0)

    def document() -> dict[str, Any]:
        return status_document(
            StatusInputs(
                now=110.0,
                target="http://vllm:8000",
                enforce=True,
                config={"listen": ":8081"},
                evidence=evidence,
                verdict=verdict,
                episodes=[0.0, 55.0, 109.0],
                brake_window=60.0,
                priority=PriorityReport("priority", "config"),
                stalls=2,
                last_scrape_error="",
                incident=None,
                recent_incidents=[],
                transitions=[Transition(105.0, "startup", True, "every kind passed")],
            )
        )

    doc = document()
    assert doc["server"]["epoch_age"] == 10.0
    canary = doc["canaries"]["text"]
    assert canary["outstanding_for"] == [2.0]
    assert [(r["ago"], r["reason"]) for r in canary["last"]] == [(5.5, "ok")]
    assert canary["passing"] is True
    assert doc["verdict"]["hang_episodes_last_hour"] == 2
    assert doc["verdict"]["sentinel_stalls"] == 2
    assert doc["priority"] == {"policy": "priority", "source": "config", "effective": True}
    assert doc["history"] == [
        {"ago": 5.0, "probe": "startup", "ok": True, "reason": "every kind passed"}
    ]
    assert doc["evidence"]["last_scrape_error"] is None
    assert doc["config"] == {"listen": ":8081"}
    assert json.loads(json.dumps(doc)) == document()  # JSON-able, and the same every time


def test_a_probe_answer_is_rendered_once_and_again_only_when_it_changes() -> None:
    bodies = AnswerBodies()
    live = ProbeAnswer(True, "no hang confirmed", 3.0)
    first = bodies.response("livez", live)
    again = bodies.response("livez", ProbeAnswer(True, "no hang confirmed", 3.0))  # equal, new
    assert again.body is first.body
    assert isinstance(first.body, bytes)
    assert json.loads(first.body) == {"status": "ok", "reason": "no hang confirmed", "since": 3.0}
    assert first.headers["Content-Type"] == "application/json; charset=utf-8"
    hung = bodies.response("livez", ProbeAnswer(False, "engine hang confirmed", 9.0))
    assert hung.status == 503
    assert isinstance(hung.body, bytes)
    assert json.loads(hung.body)["status"] == "fail"
    assert bodies.response("readyz", live).body is not first.body  # one memory per probe
