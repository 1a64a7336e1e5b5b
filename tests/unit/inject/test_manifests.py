"""The Kubernetes manifests, the alert rules, the dashboard and the Dockerfile.

Checks, all offline:

* every object validates against the Kubernetes 1.30 API schemas (kubernetes-validate),
  the PodMonitor and PrometheusRule against the CRD subsets in ``tests/schemas``;
* the Deployment's wiring: vLLM's probes reach what sentinel serves with its defaults,
  the sidecar is native, the process namespace is shared, RBAC is minimal;
* the hang-to-kill budget and the sentinel-outage tolerance, computed from the
  manifest's probe settings and sentinel's own defaults;
* every metric named by the dashboard and the rules is one sentinel exports;
* the canary ConfigMap carries the shipped catalog byte for byte;
* manifests/README.md's tables agree with the manifests and the budget;
* the Dockerfile's shape (pinned base, non-root, no build tools in the final stage)
  and constraints.txt's coverage of the runtime dependencies.

Two generated files are rebuilt from their sources by running this module::

    .venv/bin/python -m tests.unit.inject.test_manifests configmap    # base/probes-configmap.yaml
    .venv/bin/python -m tests.unit.inject.test_manifests constraints  # constraints.txt
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import promql_parser
import pytest
import yaml
from dockerfile_parse import DockerfileParser  # type: ignore[import-untyped]
from packaging.requirements import Requirement
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sentinel.config.loader import FIELDS, env_name, load_settings
from sentinel.config.settings import Settings, split_host_port
from tests.metric_contract import CONTRACT_METRICS

REPO = Path(__file__).resolve().parents[3]
MANIFESTS = REPO / "manifests"
BASE = MANIFESTS / "base"
COMPONENTS = MANIFESTS / "components"
OVERLAYS = MANIFESTS / "overlays"
FLEET = MANIFESTS / "fleet"
MONITORING = COMPONENTS / "monitoring"
SCHEMAS = REPO / "tests" / "schemas"
CATALOG = REPO / "sentinel" / "canary" / "specs"
KUBERNETES_VERSION = "1.30"

# docs/design.md, "Interfaces": what the kubelet may ask sentinel.
HTTP_PATHS = {"liveness": "/livez", "readiness": "/readyz", "startup": "/startupz"}
GRPC_SERVICES = {"liveness": "liveness", "readiness": "readiness", "startup": "startup"}
PROBE_FIELDS = {
    "liveness": "livenessProbe",
    "readiness": "readinessProbe",
    "startup": "startupProbe",
}
SIDECAR_HEALTH_PATH = "/healthz"
# What sentinel may do with the API server: nothing beyond these.
ALLOWED_RULES = {("", "events", "create"), ("", "pods", "get")}
# The Kubernetes client calls sentinel.telemetry.events may make, and the grant each needs.
CLIENT_CALLS = {
    "create_namespaced_event": ("", "events", "create"),
    "read_namespaced_pod": ("", "pods", "get"),
}
# The budget docs/design.md promises.
MAX_HANG_TO_KILL = 60.0
TOLERATED_SENTINEL_OUTAGE = 15.0

Obj = dict[str, Any]

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(
    KUBECTL is None, reason="kubectl (with its built-in kustomize) is not installed"
)


# --------------------------------------------------------------------------- loading


def load_docs(path: Path) -> list[Obj]:
    with path.open(encoding="utf-8") as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc]


def plain_files() -> list[Path]:
    """Every file that `kubectl apply -f` takes as it is (not the kustomization files)."""
    files = sorted(BASE.glob("*.yaml")) + sorted(MONITORING.glob("*.yaml"))
    return [path for path in files if path.name != "kustomization.yaml"]


@cache
def kustomize_build(root: Path) -> tuple[Obj, ...]:
    assert KUBECTL is not None
    done = subprocess.run(
        [KUBECTL, "kustomize", str(root)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, f"kubectl kustomize {root} failed:\n{done.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def build_with_components(tmp_path: Path, components: Sequence[str]) -> list[Obj]:
    """The base plus the named components, as an operator's own overlay would combine them."""
    root = tmp_path / ("overlay-" + "-".join(components or ["none"]))
    root.mkdir()
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        # kustomize takes relative paths only.
        "resources": [os.path.relpath(BASE, root)],
        "components": [os.path.relpath(COMPONENTS / name, root) for name in components],
    }
    (root / "kustomization.yaml").write_text(yaml.safe_dump(kustomization), encoding="utf-8")
    return list(kustomize_build(root))


def find(objs: Sequence[Obj], kind: str, name: str | None = None) -> Obj:
    found = [o for o in objs if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def base_objects() -> list[Obj]:
    return [doc for path in plain_files() if path.parent == BASE for doc in load_docs(path)]


def pod_spec(deployment: Obj) -> Obj:
    spec: Obj = deployment["spec"]["template"]["spec"]
    return spec


def container(deployment: Obj, name: str) -> Obj:
    spec = pod_spec(deployment)
    found: list[Obj] = [
        c for c in spec.get("containers", []) + spec.get("initContainers", []) if c["name"] == name
    ]
    assert len(found) == 1, f"expected one container {name}"
    return found[0]


def env_of(ctr: Obj) -> dict[str, str]:
    return {e["name"]: e["value"] for e in ctr.get("env", []) if "value" in e}


def sentinel_settings(deployment: Obj) -> Settings:
    """What `sentinel run` resolves from the sidecar's environment (its only settings here)."""
    sidecar = container(deployment, "sentinel")
    assert sidecar.get("args") == ["run"], "settings belong in SENTINEL_* env, not flags"
    return load_settings(env=env_of(sidecar))


# ------------------------------------------------------------------------- schemas


def validate(obj: Obj) -> None:
    """One object against Kubernetes 1.30, or against our CRD subset for monitoring kinds."""
    if obj["apiVersion"].startswith("monitoring.coreos.com/"):
        version = obj["apiVersion"].split("/")[1]
        schema_file = SCHEMAS / f"{obj['kind'].lower()}-monitoring-{version}.json"
        schema = json.loads(schema_file.read_text(encoding="utf-8"))
        jsonschema.Draft202012Validator(schema).validate(obj)
    else:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("path", plain_files(), ids=lambda p: str(p.relative_to(MANIFESTS)))
def test_plain_manifests_validate(path: Path) -> None:
    docs = load_docs(path)
    assert docs, f"{path} holds no object"
    for doc in docs:
        validate(doc)


@needs_kubectl
@pytest.mark.parametrize(
    "root",
    [BASE, *sorted(OVERLAYS.iterdir()), FLEET, FLEET / "prometheus"],
    ids=lambda p: str(p.relative_to(MANIFESTS)),
)
def test_kustomize_roots_build_and_validate(root: Path) -> None:
    objs = kustomize_build(root)
    assert objs
    for obj in objs:
        validate(obj)


VARIANTS = [[name.name] for name in sorted(COMPONENTS.iterdir())] + [
    sorted(name.name for name in COMPONENTS.iterdir())
]


@needs_kubectl
@pytest.mark.parametrize("components", VARIANTS, ids=lambda c: "+".join(c))
def test_every_component_builds_and_validates(tmp_path: Path, components: list[str]) -> None:
    for obj in build_with_components(tmp_path, components):
        validate(obj)


def test_validation_rejects_what_the_api_server_would() -> None:
    """The validators must be able to fail: an unknown field and a bad duration."""
    deployment = find(base_objects(), "Deployment")
    broken = json.loads(json.dumps(deployment))
    container(broken, "vllm")["livenessProbe"]["periodSecond"] = 5
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(broken)
    rule = load_docs(MONITORING / "prometheusrule.yaml")[0]
    rule["spec"]["groups"][0]["rules"][0]["for"] = "5 minutes"
    with pytest.raises(jsonschema.ValidationError):
        validate(rule)
    # The ScrapeConfig CRD spells its discovery roles capitalised.
    scrape = load_docs(FLEET / "prometheus" / "scrapeconfig.yaml")[0]
    scrape["spec"]["kubernetesSDConfigs"][0]["role"] = "pod"
    with pytest.raises(jsonschema.ValidationError):
        validate(scrape)


def test_kustomization_lists_every_base_file() -> None:
    listed = set(load_docs(BASE / "kustomization.yaml")[0]["resources"])
    on_disk = {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk


# -------------------------------------------------------------------------- wiring


def probe_target(probe: Obj) -> tuple[str, int, str]:
    """(handler, port, path or gRPC service) of a probe with exactly one handler."""
    handlers = [h for h in ("httpGet", "grpc", "tcpSocket", "exec") if h in probe]
    assert len(handlers) == 1, f"expected exactly one probe handler, found {handlers}"
    handler = handlers[0]
    if handler == "httpGet":
        return handler, probe["httpGet"]["port"], probe["httpGet"]["path"]
    if handler == "grpc":
        return handler, probe["grpc"]["port"], probe["grpc"].get("service", "")
    raise AssertionError(f"vllm's probes must ask sentinel, not use {handler}")


def check_wiring(deployment: Obj) -> None:
    settings = sentinel_settings(deployment)
    defaults = Settings()
    # The manifest spells out sentinel's defaults rather than changing them, except
    # that a gRPC listener exists only where the vllm probes use it.
    vllm = container(deployment, "vllm")
    uses_grpc = any("grpc" in vllm[field] for field in PROBE_FIELDS.values())
    assert settings.listen == defaults.listen
    assert settings.grpc_listen == (defaults.grpc_listen if uses_grpc else None)
    assert settings.target == defaults.target
    _, http_port = split_host_port(settings.listen)
    grpc_port = split_host_port(settings.grpc_listen)[1] if settings.grpc_listen else None
    sidecar = container(deployment, "sentinel")
    declared = {p["containerPort"] for p in sidecar["ports"]}
    assert declared == {http_port} | ({grpc_port} if grpc_port else set())
    for verdict, field in PROBE_FIELDS.items():
        handler, port, what = probe_target(vllm[field])
        # A named port would resolve among the vllm container's own ports.
        assert isinstance(port, int), f"{field}: use sentinel's port number, not a name"
        if handler == "httpGet":
            assert (port, what) == (http_port, HTTP_PATHS[verdict]), field
        else:
            assert (port, what) == (grpc_port, GRPC_SERVICES[verdict]), field
    # The inference server the probes guard is the one sentinel targets.
    vllm_port = next(p["containerPort"] for p in vllm["ports"] if p["name"] == "http")
    assert settings.target.endswith(f":{vllm_port}")


def test_vllm_probes_reach_sentinel_http_endpoints() -> None:
    check_wiring(find(base_objects(), "Deployment"))


@needs_kubectl
def test_vllm_probes_reach_sentinel_grpc_services(tmp_path: Path) -> None:
    deployment = find(build_with_components(tmp_path, ["grpc-probes"]), "Deployment")
    check_wiring(deployment)
    vllm = container(deployment, "vllm")
    assert all("grpc" in vllm[field] for field in PROBE_FIELDS.values())
    # Only the handler changed: the timing is the base's.
    base_vllm = container(find(base_objects(), "Deployment"), "vllm")
    for field in PROBE_FIELDS.values():
        strip = {k: v for k, v in vllm[field].items() if k != "grpc"}
        assert strip == {k: v for k, v in base_vllm[field].items() if k != "httpGet"}


def test_network_policy_admits_only_prometheus_to_sentinel() -> None:
    """Only Prometheus reaches sentinel from other pods (the node is always let in)."""
    objs = base_objects()
    policy = find(objs, "NetworkPolicy")
    deployment = find(objs, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    http_port = split_host_port(sentinel_settings(deployment).listen)[1]
    open_ports: set[int] = set()
    for rule in policy["spec"]["ingress"]:
        ports = {p["port"] for p in rule["ports"]}
        if http_port in ports or 8472 in ports:
            assert rule.get("from"), "sentinel's ports must not be open to every pod"
            for peer in rule["from"]:
                assert peer["podSelector"]["matchLabels"] == {
                    "app.kubernetes.io/name": "prometheus"
                }
                assert "namespaceSelector" in peer
        if not rule.get("from"):
            open_ports |= ports
    vllm = container(deployment, "vllm")
    assert open_ports == {p["containerPort"] for p in vllm["ports"]}


def test_sentinel_is_a_native_sidecar_in_a_shared_process_namespace() -> None:
    deployment = find(base_objects(), "Deployment")
    spec = pod_spec(deployment)
    assert spec["shareProcessNamespace"] is True
    assert [c["name"] for c in spec["initContainers"]] == ["sentinel"]
    assert spec["initContainers"][0]["restartPolicy"] == "Always"
    assert "sentinel" not in [c["name"] for c in spec["containers"]]
    sidecar = container(deployment, "sentinel")
    for field in ("livenessProbe", "startupProbe"):
        handler, port, path = probe_target(sidecar[field])
        assert (handler, path) == ("httpGet", SIDECAR_HEALTH_PATH)
        assert port in ("sentinel-http", split_host_port(Settings().listen)[1])
    # A readiness probe on the sidecar would gate the pod's readiness a second time.
    assert "readinessProbe" not in sidecar


def test_vllm_runs_with_priority_scheduling() -> None:
    args = container(find(base_objects(), "Deployment"), "vllm")["args"]
    joined = " ".join(args).replace("=", " ")
    assert re.search(r"--scheduling-policy priority\b", joined)


def test_sentinel_env_names_are_settings_and_settings_are_valid() -> None:
    deployment = find(base_objects(), "Deployment")
    sidecar = container(deployment, "sentinel")
    known = {env_name(field) for field in FIELDS} | {"SENTINEL_API_KEY", "SENTINEL_CONFIG"}
    names = {e["name"] for e in sidecar["env"] if e["name"].startswith("SENTINEL_")}
    assert names <= known, f"unknown settings: {sorted(names - known)}"
    settings = sentinel_settings(deployment)
    assert settings.enforce is True
    # Downward API: the pod's identity for Events.
    refs = {
        e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
        for e in sidecar["env"]
        if "valueFrom" in e
    }
    assert refs == {
        "POD_NAME": "metadata.name",
        "POD_NAMESPACE": "metadata.namespace",
        "POD_UID": "metadata.uid",
        "NODE_NAME": "spec.nodeName",
    }


def test_volumes_land_where_sentinel_reads_them() -> None:
    deployment = find(base_objects(), "Deployment")
    settings = sentinel_settings(deployment)
    sidecar = container(deployment, "sentinel")
    mounts = {m["mountPath"]: m for m in sidecar["volumeMounts"]}
    volumes = {v["name"]: v for v in pod_spec(deployment)["volumes"]}
    assert settings.catalog is not None
    probes = mounts[str(settings.catalog)]
    assert probes.get("readOnly") is True
    assert volumes[probes["name"]]["configMap"]["name"] == "sentinel-probes"
    diagnostics = mounts[str(settings.diagnostics_dir)]
    size = volumes[diagnostics["name"]]["emptyDir"]["sizeLimit"]
    # The bundle store's own cap must fit the volume, or the kubelet evicts the pod.
    assert settings.diagnostics_max_bytes < quantity_bytes(size)
    assert "/tmp" in mounts  # a writable /tmp under a read-only root filesystem


def test_only_sentinel_gets_an_api_token() -> None:
    deployment = find(base_objects(), "Deployment")
    spec = pod_spec(deployment)
    assert spec["automountServiceAccountToken"] is False
    token_dir = "/var/run/secrets/kubernetes.io/serviceaccount"
    assert token_dir in {m["mountPath"] for m in container(deployment, "sentinel")["volumeMounts"]}
    assert token_dir not in {
        m["mountPath"] for m in container(deployment, "vllm").get("volumeMounts", [])
    }


def test_rbac_grants_only_what_sentinel_calls() -> None:
    objs = base_objects()
    assert not [o for o in objs if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    role = find(objs, "Role")
    granted = set()
    for rule in role["rules"]:
        assert not rule.get("resourceNames") or "*" not in rule["resourceNames"]
        assert "nonResourceURLs" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    granted.add((group, resource, verb))
    assert granted <= ALLOWED_RULES
    # Exactly what sentinel's Kubernetes adapter calls: no unused grant, no missing one.
    source = (REPO / "sentinel" / "telemetry" / "events.py").read_text(encoding="utf-8")
    needed = {grant for call, grant in CLIENT_CALLS.items() if re.search(rf"\b{call}\b", source)}
    assert ("", "events", "create") in needed
    assert granted == needed
    binding = find(objs, "RoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    account = find(objs, "ServiceAccount")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"]}]
    assert pod_spec(find(objs, "Deployment"))["serviceAccountName"] == account["metadata"]["name"]


def quantity_bytes(quantity: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9}
    match = re.fullmatch(r"(\d+)([A-Za-z]*)", quantity)
    assert match, quantity
    return int(match[1]) * units.get(match[2], 1)


def quantity_cores(quantity: str | int) -> float:
    text = str(quantity)
    return int(text[:-1]) / 1000 if text.endswith("m") else float(text)


def test_sentinel_is_never_cpu_throttled_into_answering_late() -> None:
    resources = container(find(base_objects(), "Deployment"), "sentinel")["resources"]
    assert quantity_cores(resources["requests"]["cpu"]) > 0
    assert quantity_bytes(resources["requests"]["memory"]) > 0
    cpu_limit = resources.get("limits", {}).get("cpu")
    assert cpu_limit is None or quantity_cores(cpu_limit) >= 1.0
    assert quantity_bytes(resources["limits"]["memory"]) >= quantity_bytes(
        resources["requests"]["memory"]
    )


def test_sentinel_runs_unprivileged() -> None:
    security = container(find(base_objects(), "Deployment"), "sentinel")["securityContext"]
    assert security["runAsNonRoot"] is True
    assert security["runAsUser"] != 0
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}


@needs_kubectl
def test_stack_dump_variant_adds_only_ptrace(tmp_path: Path) -> None:
    deployment = find(build_with_components(tmp_path, ["stack-dumps"]), "Deployment")
    sidecar = container(deployment, "sentinel")
    security = sidecar["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"], "add": ["SYS_PTRACE"]}
    # File capabilities take effect only without no_new_privs.
    assert security["allowPrivilegeEscalation"] is True
    assert security["runAsNonRoot"] is True
    assert security["readOnlyRootFilesystem"] is True
    first_on_path = env_of(sidecar)["PATH"].split(":")[0]
    assert first_on_path == PTRACE_PY_SPY_DIR
    assert f"setcap cap_sys_ptrace+ep {PTRACE_PY_SPY_DIR}/py-spy" in final_stage_text()


@needs_kubectl
def test_observe_only_variant_never_enforces(tmp_path: Path) -> None:
    deployment = find(build_with_components(tmp_path, ["observe-only"]), "Deployment")
    assert sentinel_settings(deployment).enforce is False
    # Everything else stays as in the base.
    base = find(base_objects(), "Deployment")
    assert container(deployment, "vllm") == container(base, "vllm")


# -------------------------------------------------------------------------- budget


@dataclass(frozen=True, slots=True)
class HangBudget:
    """Worst-case seconds from a silent engine hang to SIGKILL of vLLM, step by step."""

    canary_sent: float  # until the next text canary leaves (idle gating, interval, jitter)
    confirmed: float  # the engine-hang window H, progress flat since the canary was sent
    published: float  # a scrape that shows the counters still flat, then one evaluation
    kubelet: float  # failureThreshold consecutive failed liveness probes
    grace: float  # the liveness probe's terminationGracePeriodSeconds, then SIGKILL

    @property
    def detected(self) -> float:
        return self.canary_sent + self.confirmed + self.published

    @property
    def total(self) -> float:
        return self.detected + self.kubelet + self.grace

    def steps(self) -> dict[str, float]:
        return {
            "canary sent": self.canary_sent,
            "hang confirmed": self.confirmed,
            "verdict published": self.published,
            "kubelet gives up": self.kubelet,
            "grace, then SIGKILL": self.grace,
            "hang to SIGKILL": self.total,
        }


def hang_budget(
    *,
    idle_window: float,
    canary_interval: float,
    canary_jitter: float,
    hang_window: float,
    scrape_interval: float,
    eval_interval: float,
    liveness_period: float,
    liveness_failure_threshold: int,
    liveness_grace: float,
    busy: bool = True,
) -> HangBudget:
    """The worst case, each step at its bound.

    On a busy server the last real completion may land just before the hang, so
    the text canary is skipped for one more tick (idle window) before it goes out
    at the longest jittered interval. sentinel answers 503 at once, so a failed
    probe costs its period, not its timeout; the first failure comes within one
    period of the flip and the kubelet acts on the failureThreshold-th.
    """
    longest_interval = canary_interval * (1 + canary_jitter)
    return HangBudget(
        canary_sent=(idle_window if busy else 0.0) + longest_interval,
        confirmed=hang_window,
        published=scrape_interval + eval_interval,
        kubelet=liveness_period * liveness_failure_threshold,
        grace=liveness_grace,
    )


def max_failed_probes(outage: float, period: float) -> int:
    """Most probes of a fixed period that can fall inside an outage of this length.

    The probe instants form a grid with step ``period``; an open interval of
    length L holds at most ceil(L / period) of its points, for the worst phase.
    """
    return math.ceil(outage / period) if outage > 0 else 0


def brute_force_failed_probes(outage: float, period: float, phases: int = 1000) -> int:
    """The same count by sweeping the outage's start across one period."""
    most = 0
    for step in range(phases):
        start = period * step / phases + 1e-9
        first = math.ceil(start / period)
        count = 0
        k = first
        while k * period < start + outage:
            if start < k * period:
                count += 1
            k += 1
        most = max(most, count)
    return most


def text_canary() -> Obj:
    spec: Obj = yaml.safe_load((CATALOG / "text.yaml").read_text(encoding="utf-8"))
    return spec


def manifest_budget(busy: bool = True) -> HangBudget:
    deployment = find(base_objects(), "Deployment")
    settings = sentinel_settings(deployment)
    liveness = container(deployment, "vllm")["livenessProbe"]
    canary = text_canary()
    override = settings.canaries.get(canary["name"])
    return hang_budget(
        idle_window=settings.idle_window,
        canary_interval=(override and override.interval) or canary["interval"],
        canary_jitter=(override and override.jitter) or canary.get("jitter", 0.0),
        hang_window=settings.hang_window,
        scrape_interval=settings.scrape_interval,
        eval_interval=settings.eval_interval,
        liveness_period=liveness["periodSeconds"],
        liveness_failure_threshold=liveness["failureThreshold"],
        liveness_grace=liveness["terminationGracePeriodSeconds"],
        busy=busy,
    )


def test_hang_to_kill_stays_under_a_minute() -> None:
    budget = manifest_budget()
    print("worst-case hang to SIGKILL:", budget.steps())
    assert budget.total <= MAX_HANG_TO_KILL
    assert manifest_budget(busy=False).detected <= 25.0  # docs/design.md: idle server, about 25 s
    # A SIGTERM-ignoring vLLM must not get the pod's long drain grace on a liveness kill.
    deployment = find(base_objects(), "Deployment")
    assert budget.grace < pod_spec(deployment)["terminationGracePeriodSeconds"]


def test_a_sentinel_outage_of_15s_cannot_restart_vllm() -> None:
    liveness = container(find(base_objects(), "Deployment"), "vllm")["livenessProbe"]
    period, threshold = liveness["periodSeconds"], liveness["failureThreshold"]
    failed = max_failed_probes(TOLERATED_SENTINEL_OUTAGE, period)
    assert failed < threshold, f"a {TOLERATED_SENTINEL_OUTAGE} s outage fails {failed} probes"
    # The bound is tight: a little longer and the kubelet restarts vLLM.
    assert max_failed_probes(TOLERATED_SENTINEL_OUTAGE + 0.5, period) >= threshold
    for outage in (0.5, 4.9, 5.0, 5.1, 14.9, 15.0, 15.1, 19.9, 20.0):
        assert max_failed_probes(outage, period) == brute_force_failed_probes(outage, period)


def test_startup_budget_is_the_model_load_time() -> None:
    startup = container(find(base_objects(), "Deployment"), "vllm")["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] == 30 * 60


# ------------------------------------------------------------------------- metrics


def rule_expressions() -> list[tuple[str, str]]:
    rule = load_docs(MONITORING / "prometheusrule.yaml")[0]
    return [
        (r.get("alert") or r["record"], str(r["expr"]))
        for group in rule["spec"]["groups"]
        for r in group["rules"]
    ]


def dashboard() -> Obj:
    board: Obj = json.loads((MONITORING / "sentinel-dashboard.json").read_text(encoding="utf-8"))
    return board


def dashboard_expressions() -> list[tuple[str, str]]:
    board = dashboard()
    found = [(p["title"], t["expr"]) for p in board["panels"] for t in p.get("targets", [])]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            query = (
                variable["query"]["query"]
                if isinstance(variable["query"], dict)
                else variable["query"]
            )
            match = re.fullmatch(r"label_values\((.+),\s*\w+\)", query)
            assert match, f"variable {variable['name']}: unexpected query {query}"
            found.append((f"variable {variable['name']}", match[1]))
    return found


GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "1m",
    "$__range": "1h",
}


def promql_metric_names(expr: str) -> set[str]:
    """Parse a PromQL expression (Grafana variables filled in) and list its metric names."""
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    expr = re.sub(r"\$\{?\w+\}?", "x", expr)  # template variables sit inside label matchers
    names: set[str] = set()

    def visit(node: object) -> None:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            names.add(node.name)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


def all_referenced_metrics() -> dict[str, set[str]]:
    referenced: dict[str, set[str]] = {}
    for where, expr in rule_expressions() + dashboard_expressions():
        names = promql_metric_names(expr)
        assert names, f"{where}: no metric in {expr!r}"
        for name in names:
            referenced.setdefault(name, set()).add(where)
    return referenced


def series_names(family_name: str, kind: str) -> set[str]:
    """The sample names a family of this type exposes in the text format."""
    if kind == "counter":
        return {family_name + "_total"}
    if kind == "histogram":
        return {family_name + suffix for suffix in ("_bucket", "_count", "_sum")}
    return {family_name}


def exposed_names(exposition: str) -> set[str]:
    names: set[str] = set()
    for family in text_string_to_metric_families(exposition):
        names |= series_names(family.name, family.type)
        names |= {sample.name for sample in family.samples}
    return names


def contract_series() -> set[str]:
    names: set[str] = set()
    for name, kind in CONTRACT_METRICS.items():
        names |= series_names(name.removesuffix("_total"), kind)
    return names


def test_every_expression_parses_and_uses_contract_metrics() -> None:
    referenced = all_referenced_metrics()
    unknown = {
        name: sorted(where) for name, where in referenced.items() if name not in contract_series()
    }
    assert not unknown, f"not in docs/design.md's metric contract: {unknown}"


def test_every_contract_metric_is_on_the_dashboard() -> None:
    shown = set(all_referenced_metrics())
    missing = [
        name
        for name, kind in CONTRACT_METRICS.items()
        if not series_names(name.removesuffix("_total"), kind) & shown
    ]
    assert not missing


def test_the_alerts_the_issue_asks_for_exist() -> None:
    alerts = {name for name, _ in rule_expressions()}
    assert {
        "SentinelHangDetected",
        "SentinelCanariesFailing",
        "SentinelPriorityNotEffective",
        "SentinelDiagnosticsFailing",
        "SentinelRestartLoopBrakeEngaged",
    } <= alerts


def test_dashboard_shape() -> None:
    board = dashboard()
    assert board["uid"]
    assert board["title"]
    assert board["schemaVersion"] >= 36
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        assert panel["targets"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24


def test_metric_names_exist_in_sentinel_exposition() -> None:
    """sentinel's own collector, with every optional state series present, renders them all."""
    import asyncio
    from dataclasses import replace

    from sentinel.evaluation.health import HealthState
    from sentinel.serve.state_metrics import daemon_metrics
    from sentinel.verdict.model import Ineffective

    state = HealthState()
    snapshot = replace(
        state.snapshot(),
        priority_effective=True,
        progress_at=0.0,
        process_evidence={"engine_state": True, "stacks": False},
        restart_ineffective=Ineffective("engine", 3, "gpu-node-7"),
    )
    asyncio.run(state.publish(snapshot))
    registry = CollectorRegistry()
    daemon_metrics(registry, state)
    exposed = exposed_names(generate_latest(registry).decode())
    missing = {
        name: sorted(where)
        for name, where in all_referenced_metrics().items()
        if name not in exposed
    }
    assert not missing, f"named by dashboard or rules but not exported: {missing}"


# ----------------------------------------------------------------------- configmap


CONFIGMAP_FILE = BASE / "probes-configmap.yaml"
CONFIGMAP_HEADER = """\
# The default canary catalog (sentinel/canary/specs/), mounted where SENTINEL_CATALOG
# points. Generated: .venv/bin/python -m tests.unit.inject.test_manifests configmap
# Edit the catalog, then regenerate; a test fails while the two differ.
# Replace or extend the canaries here to run your own (see manifests/README.md).
"""


def catalog_files() -> dict[str, bytes]:
    """Catalog path (relative to sentinel/canary/specs/) -> content, everything but Python files."""
    return {
        str(path.relative_to(CATALOG)): path.read_bytes()
        for path in sorted(CATALOG.rglob("*"))
        if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts
    }


def configmap_key(relative: str) -> str:
    """ConfigMaps are flat: a file's key is its name; the volume's items restore the tree."""
    return Path(relative).name


def render_configmap() -> str:
    data: dict[str, str] = {}
    binary: dict[str, str] = {}
    for relative, content in catalog_files().items():
        key = configmap_key(relative)
        assert key not in data, f"two catalog files named {key}"
        assert key not in binary, f"two catalog files named {key}"
        try:
            data[key] = content.decode("utf-8")
        except UnicodeDecodeError:
            binary[key] = base64.b64encode(content).decode("ascii")
    obj: Obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "sentinel-probes",
            "labels": {
                "app.kubernetes.io/name": "sentinel",
                "app.kubernetes.io/component": "canaries",
            },
        },
        "data": data,
    }
    if binary:
        obj["binaryData"] = binary
    return CONFIGMAP_HEADER + yaml.dump(obj, Dumper=_BlockDumper, sort_keys=False, width=100)


class _BlockDumper(yaml.SafeDumper):
    """Writes multi-line strings as literal blocks, so the ConfigMap reads like the files."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _represent_str)


def test_configmap_carries_the_shipped_catalog() -> None:
    assert CONFIGMAP_FILE.read_text(encoding="utf-8") == render_configmap(), (
        "regenerate: .venv/bin/python -m tests.unit.inject.test_manifests configmap"
    )


def test_probe_volume_restores_the_catalog_layout() -> None:
    configmap = load_docs(CONFIGMAP_FILE)[0]
    keys = set(configmap.get("data", {})) | set(configmap.get("binaryData", {}))
    volume = next(
        v for v in pod_spec(find(base_objects(), "Deployment"))["volumes"] if v["name"] == "probes"
    )
    items = {item["key"]: item["path"] for item in volume["configMap"]["items"]}
    assert set(items) == keys, "every ConfigMap key must be projected"
    assert set(items.values()) == set(catalog_files()), (
        "the mounted tree must equal sentinel/canary/specs/"
    )
    contents = {k: v.encode() for k, v in configmap.get("data", {}).items()}
    contents |= {k: base64.b64decode(v) for k, v in configmap.get("binaryData", {}).items()}
    for key, path in items.items():
        assert contents[key] == (CATALOG / path).read_bytes(), path


# -------------------------------------------------------------------------- README


README = MANIFESTS / "README.md"


def markdown_table(heading: str) -> list[list[str]]:
    """The rows (cells stripped of backticks) of the first table after a heading."""
    text = README.read_text(encoding="utf-8")
    start = text.index(heading)
    rows: list[list[str]] = []
    for line in text[start:].splitlines()[1:]:
        if line.startswith("|"):
            rows.append([cell.strip().strip("`") for cell in line.strip().strip("|").split("|")])
        elif rows:
            break
    assert len(rows) > 2, f"no table after {heading!r}"
    return rows[2:]  # past the header and the rule


def resolve(node: Any, dotted: str) -> Any:
    """Follow a dotted path; on a list of named entries a segment picks the entry by name."""
    for segment in dotted.split("."):
        if isinstance(node, list):
            node = next(entry for entry in node if entry.get("name") == segment)
        else:
            node = node[segment]
    return node


def render(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def test_readme_settings_table_matches_the_deployment() -> None:
    deployment = find(base_objects(), "Deployment")
    rows = markdown_table("## What each setting does")
    seen = set()
    for where, field, value, *_ in rows:
        node = pod_spec(deployment) if where == "(pod)" else container(deployment, where)
        assert render(resolve(node, field)) == value, f"README says {where} {field} = {value}"
        seen.add((where, field))
    for field in PROBE_FIELDS.values():
        for key in ("periodSeconds", "failureThreshold"):
            assert ("vllm", f"{field}.{key}") in seen, f"README must document vllm {field}.{key}"


def test_readme_budget_table_matches_the_arithmetic() -> None:
    expected = manifest_budget().steps()
    rows = markdown_table("## Hang to restart")
    table = {}
    for step, seconds, *_ in rows:
        match = re.fullmatch(r"\**(\d+(?:\.\d+)?) s\**", seconds)
        assert match, seconds
        table[step.strip("*")] = float(match[1])
    assert table == pytest.approx(expected)


# ----------------------------------------------------------------------- Dockerfile


DOCKERFILE = REPO / "Dockerfile"
CONSTRAINTS = REPO / "constraints.txt"
PTRACE_PY_SPY_DIR = "/opt/sentinel/ptrace"
BUILD_TOOLS = re.compile(r"\b(gcc|g\+\+|clang|make|build-essential|cargo|rustc|[\w.+-]+-dev)\b")


def stages() -> list[list[Obj]]:
    parser = DockerfileParser(path=str(DOCKERFILE))
    instructions: list[Obj] = parser.structure
    args = {
        i["value"].split("=", 1)[0]: i["value"].split("=", 1)[1]
        for i in instructions
        if i["instruction"] == "ARG" and "=" in i["value"]
    }
    split: list[list[Obj]] = []
    for instruction in instructions:
        if instruction["instruction"] == "FROM":
            value = instruction["value"]
            for name, default in args.items():
                value = value.replace("${" + name + "}", default)
            split.append([{**instruction, "value": value}])
        elif split:
            split[-1].append(instruction)
    return split


def final_stage_text() -> str:
    return "\n".join(i["value"] for i in stages()[-1])


def test_dockerfile_is_multi_stage_with_a_pinned_slim_base() -> None:
    all_stages = stages()
    assert len(all_stages) >= 2
    for stage in all_stages:
        image = stage[0]["value"].split()[0]
        if image == "builder":
            continue
        name, _, tag = image.partition(":")
        assert name == "python", image
        assert re.fullmatch(r"3\.11\.\d+-slim(-\w+)?", tag), image


def test_dockerfile_final_stage_is_non_root_and_tool_free() -> None:
    final = stages()[-1]
    users = [i["value"] for i in final if i["instruction"] == "USER"]
    assert users
    assert users[-1].split(":")[0] not in ("0", "root")
    for instruction in final:
        if instruction["instruction"] == "RUN":
            installs = re.findall(r"apt-get install[^&;]*", instruction["value"])
            for install in installs:
                assert not BUILD_TOOLS.search(install), install
            # setcap's package may be used only if it leaves in the same layer.
            if "libcap2-bin" in " ".join(installs):
                assert re.search(r"apt-get (purge|remove)[^&;]*libcap2-bin", instruction["value"])
    copies = [i["value"] for i in final if i["instruction"] == "COPY"]
    assert copies
    assert all(c.startswith("--from=builder") for c in copies)
    entrypoint = [i["value"] for i in final if i["instruction"] == "ENTRYPOINT"]
    assert entrypoint
    assert json.loads(entrypoint[-1]) == ["sentinel"]
    assert f"setcap cap_sys_ptrace+ep {PTRACE_PY_SPY_DIR}/py-spy" in final_stage_text()


def test_image_builds_only_what_the_sidecar_runs() -> None:
    """The builder copies sentinel/ and its build metadata, nothing else: the chaos
    harness and the simulated vLLM stay out of the build context and the wheel."""
    sources: set[str] = set()
    for stage in stages():
        for instruction in stage:
            if instruction["instruction"] == "COPY" and not instruction["value"].startswith("--"):
                sources.update(instruction["value"].split()[:-1])
    assert sources <= {"constraints.txt", "pyproject.toml", "README.md", "LICENSE", "sentinel"}, (
        sources
    )
    assert "sentinel" in sources
    ignored = {
        line.strip().rstrip("/")
        for line in (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {"chaos", "sentinel_sim", "tests"} <= ignored


def test_dockerfile_installs_with_the_constraints_and_names_no_index() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert "--constraint constraints.txt" in text
    assert not re.search(r"--(extra-)?index-url|https?://", text)


def runtime_closure() -> dict[str, str]:
    """Every runtime dependency of sentinel, transitively, -> the installed version."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    pending = [Requirement(r) for r in pyproject["project"]["dependencies"]]
    pinned: dict[str, str] = {}
    while pending:
        requirement = pending.pop()
        if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = canonical(requirement.name)
        if name in pinned:
            continue
        distribution = metadata.distribution(requirement.name)
        pinned[name] = distribution.version
        pending.extend(Requirement(r) for r in distribution.requires or [])
    return dict(sorted(pinned.items()))


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


CONSTRAINTS_HEADER = """\
# Pins for the container image (Dockerfile): every runtime dependency of sentinel,
# transitively, at the version installed where the tests ran. Generated:
#   .venv/bin/python -m tests.unit.inject.test_manifests constraints > constraints.txt
"""


def render_constraints() -> str:
    return CONSTRAINTS_HEADER + "".join(f"{n}=={v}\n" for n, v in runtime_closure().items())


def test_constraints_pin_every_runtime_dependency() -> None:
    pins: dict[str, str] = {}
    for line in CONSTRAINTS.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep, f"not an exact pin: {line}"
            assert re.fullmatch(r"[\w.!+]+", version), f"not an exact pin: {line}"
            pins[canonical(name)] = version
    missing = set(runtime_closure()) - set(pins)
    assert not missing, "regenerate constraints.txt (see its header): missing " + ", ".join(
        sorted(missing)
    )


# --------------------------------------------------------------------------- main


def _main(argv: Sequence[str]) -> int:
    """Regenerate a generated file: ``configmap`` writes it, ``constraints`` prints it."""
    if list(argv) == ["configmap"]:
        CONFIGMAP_FILE.write_text(render_configmap(), encoding="utf-8")
        return 0
    if list(argv) == ["constraints"]:
        sys.stdout.write(render_constraints())
        return 0
    sys.stderr.write("usage: python -m tests.unit.inject.test_manifests configmap|constraints\n")
    return 2


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
