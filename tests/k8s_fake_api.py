"""A local API server answering the Lease and Event calls sentinel makes, as Kubernetes would.

Leases are pre-created (as the manifests ship them): ``GET`` and ``PUT``
(update) on a name that exists, with the resourceVersion bumped on every
write and ``409 Conflict`` for a write carrying a stale one; ``404`` for an
unknown name; ``403`` for ``create`` (the Role grants get and update on
named Leases only). Events are created. Every body written is validated
against the Kubernetes 1.30 schema with ``kubernetes_validate``; a body the
real API server would refuse is answered ``422`` and kept in
:attr:`FakeApiServer.invalid`, so a test can assert there was none. Like
Kubernetes, the server never expires a Lease: that is the clients' judgement.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import kubernetes_validate
from aiohttp import web

KUBERNETES_VERSION = "1.30"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
EVENTS = "/api/v1/namespaces/{namespace}/events"


def status(code: int, reason: str, message: str) -> web.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return web.json_response(body, status=code)


def lease_object(namespace: str, name: str, version: int) -> dict[str, Any]:
    """A Lease as the manifests create it: no holder yet."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": str(uuid.uuid4()),
            "resourceVersion": str(version),
            "labels": {"app.kubernetes.io/name": "sentinel"},
        },
        "spec": {},
    }


@dataclass
class FakeApiServer:
    namespace: str
    base_url: str = ""
    leases: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    writes: list[dict[str, Any]] = field(default_factory=list)  # every accepted Lease PUT body
    conflicts: int = 0
    invalid: list[str] = field(default_factory=list)
    forbidden: bool = False  # every call answered 403 (RBAC refused)
    down: bool = False  # every call answered 503 (an API server outage)
    _version: int = 100

    def add_leases(self, names: Iterable[str]) -> None:
        for name in names:
            self._version += 1
            self.leases[name] = lease_object(self.namespace, name, self._version)

    def holders(self) -> dict[str, str | None]:
        return {n: lease["spec"].get("holderIdentity") for n, lease in self.leases.items()}

    def _refused(self) -> web.Response | None:
        if self.down:
            return status(503, "ServiceUnavailable", "the server is currently unable to handle it")
        if self.forbidden:
            return status(403, "Forbidden", "forbidden by RBAC")
        return None

    def _valid(self, body: Any) -> bool:
        try:
            kubernetes_validate.validate(body, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            self.invalid.append(str(exc))
            return False
        return True

    async def get_lease(self, request: web.Request) -> web.Response:
        refused = self._refused()
        if refused is not None:
            return refused
        lease = self.leases.get(request.match_info["name"])
        if lease is None or request.match_info["namespace"] != self.namespace:
            return status(404, "NotFound", f'leases "{request.match_info["name"]}" not found')
        return web.json_response(lease)

    async def put_lease(self, request: web.Request) -> web.Response:
        refused = self._refused()
        if refused is not None:
            return refused
        name = request.match_info["name"]
        current = self.leases.get(name)
        if current is None or request.match_info["namespace"] != self.namespace:
            return status(404, "NotFound", f'leases "{name}" not found')
        body = await request.json()
        if not self._valid(body) or body["metadata"].get("name") != name:
            return status(422, "Invalid", "Lease is invalid")
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            self.conflicts += 1
            return status(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on leases.coordination.k8s.io "{name}": '
                "the object has been modified; please apply your changes to the latest version "
                "and try again",
            )
        self._version += 1
        self.writes.append(body)
        stored = dict(body)
        # An update replaces labels and annotations as written (the brake memory's annotation).
        meta = body["metadata"]
        written = {k: meta[k] for k in ("labels", "annotations") if meta.get(k) is not None}
        stored["metadata"] = current["metadata"] | written | {"resourceVersion": str(self._version)}
        stored["spec"] = {k: v for k, v in (body.get("spec") or {}).items() if v is not None}
        self.leases[name] = stored
        return web.json_response(stored)

    async def create_lease(self, request: web.Request) -> web.Response:
        return status(403, "Forbidden", "leases.coordination.k8s.io is forbidden: create")

    async def create_event(self, request: web.Request) -> web.Response:
        refused = self._refused()
        if refused is not None:
            return refused
        body = await request.json()
        if not self._valid(body):
            return status(422, "Invalid", "Event is invalid")
        self.events.append(body)
        created = dict(body)
        self._version += 1
        created["metadata"] = dict(body["metadata"]) | {
            "uid": str(uuid.uuid4()),
            "resourceVersion": str(self._version),
        }
        return web.json_response(created, status=201)

    def reasons(self) -> list[str]:
        return [str(event["reason"]) for event in self.events]


@asynccontextmanager
async def fake_api_server(
    namespace: str, leases: Iterable[str] = ()
) -> AsyncIterator[FakeApiServer]:
    """The fake on ``127.0.0.1:0`` with ``leases`` pre-created; stopped on exit."""
    api = FakeApiServer(namespace)
    api.add_leases(leases)
    app = web.Application()
    app.router.add_get(LEASES + "/{name}", api.get_lease)
    app.router.add_put(LEASES + "/{name}", api.put_lease)
    app.router.add_post(LEASES, api.create_lease)
    app.router.add_post(EVENTS, api.create_event)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    api.base_url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield api
    finally:
        await runner.cleanup()
