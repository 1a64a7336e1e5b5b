"""Kubernetes: the only module that imports the ``kubernetes`` client.

Owns the pod's identity (from the downward API) and posting ``core/v1``
Events on the pod, so that ``kubectl describe pod`` and every event pipeline
show why sentinel failed liveness (or, in observe-only mode, would have), with
the diagnostics summary, before the restart wipes the evidence.

Identity comes from the downward API environment the manifests set::

    POD_NAME       metadata.name        (required)
    POD_NAMESPACE  metadata.namespace   (required; else the service account's namespace file)
    POD_UID        metadata.uid         (optional, pins the Event to this pod instance)
    NODE_NAME      spec.nodeName        (optional, the Event's source host)

Credentials are the pod's service account (in-cluster config); the role needs
``create`` on ``events`` in the pod's namespace. Outside a cluster (no
identity) sentinel logs one line and posts nothing. A failed post (RBAC, API
down) is logged and returned, never raised: an Event is a courtesy, the
verdict does not wait for it.

Every message is redacted before it is built into an Event: a cause line
quotes a process title, and an Event is readable by anyone who may list
events in the namespace.

The client is synchronous; :meth:`EventReporter.post` runs it in a worker
thread with a request timeout so the event loop is never blocked.

The client is imported on first use, not at start: it costs about 30 MB of
resident memory and 0.1 s of start-up, in every pod, for something needed
only when there is an Event to post. At start sentinel checks only that the
in-cluster credentials are there (the service-account files and the API
server's address), without the client; the first Event builds the client in
the worker thread that posts it.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from sentinel.telemetry.logging import get_logger
from sentinel.telemetry.redact import redact

log = get_logger(__name__)

COMPONENT = "sentinel"
MESSAGE_LIMIT = 1024  # bytes; the API server's limit for an Event note
NAME_LIMIT = 253
REQUEST_TIMEOUT_S = 5.0
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
SERVICE_ACCOUNT_NAMESPACE = SERVICE_ACCOUNT / "namespace"


class EventReason(StrEnum):
    """Event reasons (CamelCase, as Kubernetes convention asks)."""

    HANG_DETECTED = "SentinelHangDetected"  # liveness failed: the kubelet will restart vLLM
    WOULD_RESTART = "SentinelWouldRestart"  # observe-only mode: the same, not enforced
    RESTART_BRAKE = "SentinelRestartBrake"  # too many hang restarts: unready and alerting instead
    # The brake holds a hang that came back the same after each restart: look at the node.
    RESTART_INEFFECTIVE = "RestartIneffective"
    DIAGNOSTICS = "SentinelDiagnostics"  # a bundle was captured (suspected hang)
    CORRUPT_OUTPUT = "SentinelCorruptOutput"  # answers left the model's fingerprint
    # Every restart slot of the pool is held: unready, not restarting (sentinel.fleet.budget).
    RESTART_BUDGET = "RestartBudgetExhausted"
    # A canary kind this server cannot be judged on, set aside (or disabled as
    # unsupported) for its epoch: startup and readiness go on without it.
    CANARY_KIND_SET_ASIDE = "CanaryKindSetAside"
    # Canaries refused with a body sentinel does not know: "cannot tell", unready.
    UNKNOWN_REFUSAL = "SentinelUnknownRefusal"


@dataclass(frozen=True, slots=True)
class PodIdentity:
    name: str
    namespace: str
    uid: str | None = None
    node: str | None = None


def pod_identity(
    env: Mapping[str, str] | None = None, namespace_file: Path = SERVICE_ACCOUNT_NAMESPACE
) -> PodIdentity | None:
    """The pod sentinel runs in, from the downward API; None outside a cluster."""
    values = os.environ if env is None else env
    name = values.get("POD_NAME", "").strip()
    namespace = values.get("POD_NAMESPACE", "").strip()
    if not namespace:
        try:
            namespace = namespace_file.read_text().strip()
        except OSError:
            namespace = ""
    if not name or not namespace:
        return None
    return PodIdentity(
        name=name,
        namespace=namespace,
        uid=values.get("POD_UID", "").strip() or None,
        node=values.get("NODE_NAME", "").strip() or None,
    )


@dataclass(frozen=True, slots=True)
class EventOutcome:
    """What happened to one Event: posted (with its name) or why not."""

    posted: bool
    detail: str
    name: str | None = None


def build_event(
    pod: PodIdentity,
    reason: EventReason | str,
    message: str,
    *,
    now: datetime,
    first: datetime | None = None,
    count: int = 1,
    event_type: str = "Warning",
) -> Any:
    """The ``CoreV1Event`` for ``pod``, named like the kubelet names its own (``pod.<hex ns>``).

    The message is redacted here, the one place every Event body is made, and
    before it is cut, so a cut cannot leave the head of a secret behind.
    """
    from kubernetes import client

    stamp = f"{int(now.timestamp() * 1e9):x}"
    name = f"{pod.name[: NAME_LIMIT - len(stamp) - 1]}.{stamp}"
    return client.CoreV1Event(
        api_version="v1",
        kind="Event",
        metadata=client.V1ObjectMeta(name=name, namespace=pod.namespace),
        involved_object=client.V1ObjectReference(
            api_version="v1",
            kind="Pod",
            name=pod.name,
            namespace=pod.namespace,
            uid=pod.uid,
        ),
        reason=str(reason),
        message=truncate_message(redact(message)),
        type=event_type,
        source=client.V1EventSource(component=COMPONENT, host=pod.node),
        reporting_component=COMPONENT,
        reporting_instance=pod.name[:128],
        first_timestamp=first or now,
        last_timestamp=now,
        count=count,
    )


def truncate_message(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """Cut to ``limit`` UTF-8 bytes, marking the cut, without splitting a character."""
    data = message.encode("utf-8")
    if len(data) <= limit:
        return message
    marker = " [truncated]"
    cut = data[: limit - len(marker.encode())]
    return cut.decode("utf-8", "ignore") + marker


class EventRejected(Exception):
    """The API server answered and refused the Event (RBAC, validation, quota)."""


def in_cluster_credentials(
    env: Mapping[str, str] | None = None, account: Path = SERVICE_ACCOUNT
) -> str | None:
    """Why in-cluster credentials are missing, or None when they are all there.

    The same conditions the client's ``load_incluster_config`` checks first,
    read without importing it, so start-up says "events disabled" at once.
    """
    values = os.environ if env is None else env
    for name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        if not values.get(name):
            return f"{name} is not set"
    for file in ("token", "ca.crt"):
        if not (account / file).is_file():
            return f"no service account {file} at {account / file}"
    return None


Connect = Callable[[], Any]
"""Builds the client's ``ApiClient``; called once, in the worker thread of the first post."""


def _in_cluster() -> Any:
    from kubernetes import client, config

    configuration = client.Configuration()
    load_incluster: Any = config.load_incluster_config  # untyped in the client
    load_incluster(client_configuration=configuration)
    return client.ApiClient(configuration)


IN_CLUSTER: Connect = _in_cluster
"""The pod's service account against the in-cluster API server."""


def host_connect(
    host: str, *, token: str | None = None, verify_ssl: bool = True, ca_cert: str | None = None
) -> Connect:
    """An explicit API server (tests, or running outside the pod with a token)."""

    def connect() -> Any:
        from kubernetes import client

        configuration = client.Configuration(host=host)
        configuration.verify_ssl = verify_ssl
        if ca_cert:
            configuration.ssl_ca_cert = ca_cert
        if token:
            configuration.api_key = {"authorization": token}
            configuration.api_key_prefix = {"authorization": "Bearer"}
        return client.ApiClient(configuration)

    return connect


class EventReporter:
    """Posts Events on this pod; a no-op that logs once when there is no pod identity.

    ``connect`` (or an ``api_client`` already built) says how to reach the API
    server; the client behind it is made on the first post, in the worker
    thread, so a pod that never posts never loads it.
    """

    def __init__(
        self,
        pod: PodIdentity | None,
        api_client: Any | None = None,
        *,
        connect: Connect | None = None,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self.pod = pod
        self._api_client = api_client
        self._connect = connect
        self._api: Any | None = None
        self._lock = threading.Lock()
        self._timeout = request_timeout_s
        self._said_disabled = False

    @classmethod
    def from_environment(
        cls, env: Mapping[str, str] | None = None, account: Path = SERVICE_ACCOUNT
    ) -> EventReporter:
        """In a pod: the downward-API identity and the service account's credentials."""
        pod = pod_identity(env, namespace_file=account / "namespace")
        if pod is None:
            return cls(None)
        missing = in_cluster_credentials(env, account)
        if missing is not None:
            log.warning("k8s.events_disabled", reason=f"no in-cluster credentials: {missing}")
            return cls(None)
        return cls(pod, connect=_in_cluster)

    @classmethod
    def for_host(
        cls,
        pod: PodIdentity,
        host: str,
        *,
        token: str | None = None,
        verify_ssl: bool = True,
        ca_cert: str | None = None,
    ) -> EventReporter:
        """An explicit API server (tests, or running outside the pod with a token)."""
        return cls(
            pod, connect=host_connect(host, token=token, verify_ssl=verify_ssl, ca_cert=ca_cert)
        )

    @property
    def enabled(self) -> bool:
        return self.pod is not None and (self._api_client is not None or self._connect is not None)

    def _core_api(self) -> Any:
        """The ``CoreV1Api``, built on first use (blocking: runs in the worker thread)."""
        with self._lock:
            if self._api is None:
                from kubernetes import client

                if self._api_client is None:
                    assert self._connect is not None
                    self._api_client = self._connect()
                self._api = client.CoreV1Api(self._api_client)
            return self._api

    def _create(self, pod: PodIdentity, event_args: dict[str, Any]) -> tuple[Any, Any]:
        """Build and post one Event (blocking: runs in the worker thread).

        The API's refusal becomes :class:`EventRejected` here, where the
        client is loaded, so the caller needs none of its types.
        """
        api = self._core_api()
        from kubernetes.client.exceptions import ApiException

        event = build_event(pod, **event_args)
        try:
            created = api.create_namespaced_event(
                pod.namespace, event, _request_timeout=self._timeout
            )
        except ApiException as exc:
            raise EventRejected(f"API answered {exc.status} {exc.reason}") from None
        return event, created

    async def post(
        self,
        reason: EventReason | str,
        message: str,
        *,
        first: datetime | None = None,
        count: int = 1,
        event_type: str = "Warning",
        now: datetime | None = None,
    ) -> EventOutcome:
        """Post one Event on the pod. Never raises."""
        if self.pod is None or not self.enabled:
            if not self._said_disabled:
                self._said_disabled = True
                log.info(
                    "k8s.event_skipped",
                    reason=str(reason),
                    why="not in a pod (POD_NAME/POD_NAMESPACE unset): no Kubernetes Event",
                )
            return EventOutcome(False, "not in a pod")
        event_args: dict[str, Any] = {
            "reason": reason,
            "message": message,
            "now": now or datetime.now(UTC),
            "first": first,
            "count": count,
            "event_type": event_type,
        }
        try:
            event, created = await asyncio.to_thread(self._create, self.pod, event_args)
        except EventRejected as exc:
            detail = str(exc)
            log.warning("k8s.event_failed", reason=str(reason), detail=detail)
            return EventOutcome(False, detail)
        except Exception as exc:  # urllib3 connection errors, timeouts, bad config
            detail = f"{type(exc).__name__}: {exc}"
            log.warning("k8s.event_failed", reason=str(reason), detail=detail)
            return EventOutcome(False, detail)
        name = getattr(getattr(created, "metadata", None), "name", None) or event.metadata.name
        log.info("k8s.event_posted", reason=str(reason), event_name=name, pod=self.pod.name)
        return EventOutcome(True, "created", name)

    def close(self) -> None:
        with self._lock:
            if self._api_client is not None:
                self._api_client.close()
