"""Kubernetes Events against a local server that answers like the real API server.

The posted body is validated offline against the Kubernetes 1.30 Event schema,
so a field the API server would reject fails here rather than in a cluster.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kubernetes_validate
import pytest
import structlog
from aiohttp import web

from sentinel.telemetry.events import (
    MESSAGE_LIMIT,
    EventReason,
    EventReporter,
    PodIdentity,
    pod_identity,
    truncate_message,
)

POD = PodIdentity(
    name="vllm-7c9f8d-abcde", namespace="inference", uid=str(uuid.uuid4()), node="gpu-node-3"
)


@dataclass
class FakeApiServer:
    base_url: str
    posted: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    status: int = 201


@pytest.fixture
async def api_server() -> AsyncIterator[FakeApiServer]:
    state = FakeApiServer(base_url="")

    async def create_event(request: web.Request) -> web.Response:
        body = await request.json()
        state.posted.append(body)
        state.headers.append(dict(request.headers))
        if state.status != 201:
            status = {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": 'events is forbidden: User "system:serviceaccount:inference:default" '
                'cannot create resource "events" in API group "" in the namespace "inference"',
                "reason": "Forbidden",
                "details": {"kind": "events"},
                "code": 403,
            }
            return web.json_response(status, status=state.status)
        namespace = request.match_info["namespace"]
        created = dict(body)
        created["metadata"] = dict(body["metadata"]) | {
            "namespace": namespace,
            "uid": str(uuid.uuid4()),
            "resourceVersion": "123456",
            "creationTimestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "managedFields": [
                {
                    "manager": "sentinel",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:count": {}, "f:message": {}, "f:reason": {}},
                }
            ],
        }
        created.setdefault("eventTime", None)
        created.setdefault("reportingComponent", "")
        created.setdefault("reportingInstance", "")
        return web.json_response(created, status=201)

    app = web.Application()
    app.router.add_post("/api/v1/namespaces/{namespace}/events", create_event)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    state.base_url = f"http://127.0.0.1:{port}"
    try:
        yield state
    finally:
        await runner.cleanup()


async def test_posts_a_schema_valid_event_on_the_pod(api_server: FakeApiServer) -> None:
    reporter = EventReporter.for_host(POD, api_server.base_url, token="sa-token-value")
    first = datetime(2026, 11, 29, 10, 15, 0, tzinfo=UTC)
    now = datetime(2026, 11, 29, 10, 15, 2, tzinfo=UTC)
    try:
        outcome = await reporter.post(
            EventReason.HANG_DETECTED,
            "engine blocked: VLLM::EngineCore (pid 42) is sleeping at 0% CPU",
            first=first,
            now=now,
            count=2,
        )
    finally:
        reporter.close()

    assert outcome.posted, outcome.detail
    assert len(api_server.posted) == 1
    body = api_server.posted[0]
    kubernetes_validate.validate(body, "1.30", strict=True)
    assert body["kind"] == "Event"
    assert body["apiVersion"] == "v1"
    assert body["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": POD.name,
        "namespace": POD.namespace,
        "uid": POD.uid,
    }
    assert body["reason"] == "SentinelHangDetected"
    assert body["type"] == "Warning"
    assert body["source"] == {"component": "sentinel", "host": "gpu-node-3"}
    assert body["count"] == 2
    assert body["firstTimestamp"] == "2026-11-29T10:15:00+00:00"
    assert body["lastTimestamp"] == "2026-11-29T10:15:02+00:00"
    assert body["metadata"]["name"].startswith(POD.name + ".")
    assert body["metadata"]["namespace"] == POD.namespace
    assert outcome.name == body["metadata"]["name"]
    assert api_server.headers[0]["Authorization"] == "Bearer sa-token-value"


async def test_observe_only_reason_and_long_summary_truncated(api_server: FakeApiServer) -> None:
    reporter = EventReporter.for_host(POD, api_server.base_url)
    summary = "engine spinning: " + "é" * 2000
    try:
        outcome = await reporter.post(EventReason.WOULD_RESTART, summary)
    finally:
        reporter.close()
    assert outcome.posted
    body = api_server.posted[0]
    kubernetes_validate.validate(body, "1.30", strict=True)
    assert body["reason"] == "SentinelWouldRestart"
    assert len(body["message"].encode("utf-8")) <= MESSAGE_LIMIT
    assert body["message"].endswith("[truncated]")


async def test_forbidden_is_reported_not_raised(api_server: FakeApiServer) -> None:
    api_server.status = 403
    reporter = EventReporter.for_host(POD, api_server.base_url)
    try:
        outcome = await reporter.post(EventReason.HANG_DETECTED, "engine blocked")
    finally:
        reporter.close()
    assert not outcome.posted
    assert "403" in outcome.detail


async def test_outside_a_cluster_one_log_line_and_no_event() -> None:
    reporter = EventReporter.from_environment(env={})
    assert not reporter.enabled
    with structlog.testing.capture_logs() as logs:
        first = await reporter.post(EventReason.HANG_DETECTED, "engine blocked")
        second = await reporter.post(EventReason.HANG_DETECTED, "engine blocked")
    assert not first.posted
    assert not second.posted
    assert [entry["event"] for entry in logs] == ["k8s.event_skipped"]


def test_identity_from_the_downward_api(tmp_path: Any) -> None:
    ns_file = tmp_path / "namespace"
    ns_file.write_text("from-service-account\n")
    env = {"POD_NAME": "vllm-0", "POD_UID": "u-1"}
    identity = pod_identity(env, namespace_file=ns_file)
    assert identity == PodIdentity("vllm-0", "from-service-account", "u-1", None)
    assert pod_identity({}, namespace_file=ns_file) is None
    assert pod_identity({"POD_NAME": "x", "POD_NAMESPACE": "ns"}, namespace_file=ns_file) == (
        PodIdentity("x", "ns")
    )


def test_truncation_keeps_characters_whole() -> None:
    text = "€" * 600  # 3 bytes each
    cut = truncate_message(text, 100)
    assert len(cut.encode("utf-8")) <= 100
    json.dumps(cut)  # valid text, no split character
