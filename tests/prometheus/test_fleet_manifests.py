"""manifests/fleet: the exporter's Deployment, Service, NetworkPolicy and config agree.

Offline checks of what the schemas cannot say (tests/unit/inject/test_manifests.py
validates every object of the kustomize builds against the Kubernetes and CRD
schemas): the exporter runs unprivileged with no API token, its probes, ports
and Service line up with the config and the discovery's address rewrite, the
NetworkPolicy admits only Prometheus in and only vLLM and DNS out, and the
shipped config passes ``sentinel exporter --check-config``.
"""

from __future__ import annotations

import ipaddress
import subprocess
import sys
from typing import Any

import pytest
import yaml

from tests.prometheus.fleet_rules import EXPORTER_ADDRESS, EXPORTER_CONFIG, FLEET, scrape_job
from tests.unit.inject.test_manifests import validate

Obj = dict[str, Any]
PORT = 9116
VLLM_PORT = 8000


def load(name: str) -> Obj:
    document: Obj = yaml.safe_load((FLEET / name).read_text())
    return document


def exporter_container() -> Obj:
    (container,) = load("deployment.yaml")["spec"]["template"]["spec"]["containers"]
    return dict(container)


@pytest.mark.parametrize(
    "path",
    [
        "deployment.yaml",
        "service.yaml",
        "networkpolicy.yaml",
        "prometheus/scrapeconfig.yaml",
        "prometheus/prometheusrule.yaml",
    ],
)
def test_plain_files_validate(path: str) -> None:
    validate(load(path))


def test_kustomization_lists_every_object_file() -> None:
    listed = set(load("kustomization.yaml")["resources"])
    on_disk = {p.name for p in FLEET.glob("*.yaml")} - {"kustomization.yaml", "exporter.yaml"}
    assert listed == on_disk
    generated = load("kustomization.yaml")["configMapGenerator"]
    assert [g["files"] for g in generated] == [["exporter.yaml"]]


def test_exporter_runs_unprivileged_without_an_api_token() -> None:
    pod = load("deployment.yaml")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in pod
    context = exporter_container()["securityContext"]
    assert context["runAsNonRoot"] is True
    assert (context["runAsUser"], context["runAsGroup"]) == (10001, 10001)
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    resources = exporter_container()["resources"]
    assert resources["requests"]["cpu"]
    assert resources["limits"]["memory"]
    kinds = {
        doc.get("kind")
        for path in FLEET.rglob("*.yaml")
        for doc in yaml.safe_load_all(path.read_text())
        if isinstance(doc, dict)
    }
    assert not kinds & {"ServiceAccount", "Role", "RoleBinding", "ClusterRole"}, kinds


def test_probes_ports_service_and_discovery_agree() -> None:
    container = exporter_container()
    (port,) = container["ports"]
    assert (port["name"], port["containerPort"]) == ("http", PORT)
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/-/healthy", "port": "http"}
    (service_port,) = load("service.yaml")["spec"]["ports"]
    assert (service_port["port"], service_port["targetPort"]) == (PORT, "http")
    config = yaml.safe_load(EXPORTER_CONFIG.read_text())
    assert config["listen"] == f"0.0.0.0:{PORT}"
    assert "/etc/sentinel-exporter/exporter.yaml" in container["args"]
    service = load("service.yaml")["metadata"]["name"]
    namespace = load("kustomization.yaml")["namespace"]
    assert f"{service}.{namespace}.svc:{PORT}" == EXPORTER_ADDRESS
    rewrite = [r for r in scrape_job()["relabel_configs"] if r.get("target_label") == "__address__"]
    assert [r["replacement"] for r in rewrite] == [EXPORTER_ADDRESS]


def test_network_policy_admits_prometheus_in_and_vllm_and_dns_out() -> None:
    spec = load("networkpolicy.yaml")["spec"]
    assert spec["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "sentinel-exporter"}
    assert sorted(spec["policyTypes"]) == ["Egress", "Ingress"]
    (ingress,) = spec["ingress"]
    assert ingress["ports"] == [{"port": PORT, "protocol": "TCP"}]
    (source,) = ingress["from"]
    assert source["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
    vllm, dns = spec["egress"]
    (to_vllm,) = vllm["to"]
    assert to_vllm["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "vllm"}
    namespaces = scrape_job()["kubernetes_sd_configs"][0]["namespaces"]["names"]
    assert to_vllm["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": namespaces[0]
    }
    assert vllm["ports"] == [{"port": VLLM_PORT, "protocol": "TCP"}]
    assert {(p["port"], p["protocol"]) for p in dns["ports"]} == {(53, "UDP"), (53, "TCP")}
    assert "ipBlock" not in str(spec), "no address range may be opened wholesale"


def test_allowlist_names_only_the_inference_namespace() -> None:
    allow = yaml.safe_load(EXPORTER_CONFIG.read_text())["allow"]
    (namespace,) = scrape_job()["kubernetes_sd_configs"][0]["namespaces"]["names"]
    assert all(h.startswith("*.") and f".{namespace}.svc" in h for h in allow["hosts"])
    for cidr in allow["cidrs"]:
        network = ipaddress.ip_network(cidr)
        assert network.is_private, cidr
        assert network.prefixlen >= 8, cidr


def test_shipped_config_passes_the_exporters_own_check() -> None:
    command = [sys.executable, "-m", "sentinel", "exporter", "--check-config"]
    done = subprocess.run(
        [*command, "--config", str(EXPORTER_CONFIG)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "modules: text (text), full (" in done.stdout, done.stdout


def test_modules_are_text_and_full() -> None:
    modules = yaml.safe_load(EXPORTER_CONFIG.read_text())["modules"]
    assert modules["text"]["kinds"] == ["text"]
    assert set(modules["full"]["kinds"]) == {"text", "structured", "multimodal"}
    assert scrape_job()["params"] == {"module": ["text"]}
