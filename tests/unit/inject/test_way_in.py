"""A way in for an existing deployment: the sidecar component, the KServe and llm-d examples.

Checks, all offline:

* manifests/components/sidecar applied to a plain vLLM Deployment (the vLLM docs'
  shape, manifests/examples/existing-vllm) validates against Kubernetes 1.30 and is
  wired like manifests/base: a native sidecar equal to the base's, a shared process
  namespace, sentinel's volumes, and the vllm probes of the base, nothing of the old
  /health probes left. The patch is rendered by a small strategic-merge renderer below
  (maps merge, containers, initContainers and volumes merge by name, ``$patch: replace``
  replaces a map) and, where kubectl is installed, also by kustomize itself, and the two
  must agree;
* the KServe InferenceService against the CRD subset in tests/schemas, its predictor's
  pod spec against Kubernetes 1.30, and the same wiring;
* the llm-d-modelservice values against the chart's values.schema.json, and the decode
  pod those values make (rendered below for the fields the chart copies) against
  Kubernetes 1.30, with the same wiring;
* the READMEs name the install line and the component.
"""

from __future__ import annotations

import copy
import json
import re
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from sentinel.config.loader import load_settings
from sentinel.config.settings import split_host_port
from tests.unit.inject.test_manifests import (
    BASE,
    COMPONENTS,
    KUBERNETES_VERSION,
    MANIFESTS,
    PROBE_FIELDS,
    REPO,
    SCHEMAS,
    Obj,
    container,
    env_of,
    find,
    kustomize_build,
    load_docs,
    needs_kubectl,
    pod_spec,
)

SIDECAR = COMPONENTS / "sidecar"
EXAMPLES = MANIFESTS / "examples"
EXISTING = EXAMPLES / "existing-vllm"
KSERVE_EXAMPLE = EXAMPLES / "kserve-inferenceservice.yaml"
KSERVE_SCHEMA = SCHEMAS / "inferenceservice-serving-kserve-v1beta1.json"
LLM_D_VALUES = EXAMPLES / "llm-d-values.yaml"
LLM_D_SCHEMA = SCHEMAS / "llm-d-modelservice-values.schema.json"
# The volumes sentinel brings: the canary catalog, diagnostics, /tmp, its API token.
SENTINEL_VOLUMES = ("probes", "diagnostics", "tmp", "sentinel-token")
# Strategic merge keys of the lists the sidecar patch touches (k8s.io/api/core/v1).
MERGE_BY_NAME = {"containers", "initContainers", "volumes", "env"}


# ------------------------------------------------------------------ the renderer


def strategic_merge(original: Any, patch: Any, field: str = "") -> Any:
    """Apply a strategic merge patch the way kustomize does, for the fields used here."""
    if isinstance(patch, dict):
        if patch.get("$patch") == "replace":
            return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
        assert "$patch" not in patch, f"unsupported directive {patch['$patch']}"
        merged = copy.deepcopy(original) if isinstance(original, dict) else {}
        for key, value in patch.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = strategic_merge(merged.get(key), value, key)
        return merged
    if isinstance(patch, list) and field in MERGE_BY_NAME:
        merged_list: list[Any] = copy.deepcopy(original) if isinstance(original, list) else []
        for entry in patch:
            index = next((i for i, e in enumerate(merged_list) if e["name"] == entry["name"]), None)
            if index is None:
                merged_list.append(strategic_merge(None, entry))
            else:
                merged_list[index] = strategic_merge(merged_list[index], entry)
        return merged_list
    return copy.deepcopy(patch)


def matches(target: Obj, obj: Obj) -> bool:
    group, _, version = obj["apiVersion"].rpartition("/")
    wanted = {"group": group, "version": version, "kind": obj["kind"]}
    wanted["name"] = obj["metadata"]["name"]
    return all(target[key] == value for key, value in wanted.items() if key in target)


def render_component(component: Path, objs: list[Obj]) -> list[Obj]:
    """The component's patches applied to objs (strategic merge patches with a target)."""
    kustomization = load_docs(component / "kustomization.yaml")[0]
    assert kustomization["kind"] == "Component"
    assert set(kustomization) == {"apiVersion", "kind", "patches"}, "renderer knows patches only"
    rendered = copy.deepcopy(objs)
    for entry in kustomization["patches"]:
        patch = load_docs(component / entry["path"])[0]
        assert {"apiVersion", "kind", "metadata"} <= set(patch), "a strategic merge patch"
        hits = [i for i, obj in enumerate(rendered) if matches(entry["target"], obj)]
        assert hits, f"{entry['path']}: no object matches {entry['target']}"
        for i in hits:
            name = rendered[i]["metadata"]["name"]
            rendered[i] = strategic_merge(rendered[i], patch)
            rendered[i]["metadata"]["name"] = name
    return rendered


def render_existing() -> list[Obj]:
    kustomization = load_docs(EXISTING / "kustomization.yaml")[0]
    objs = [doc for res in kustomization["resources"] for doc in load_docs(EXISTING / res)]
    for component in kustomization["components"]:
        objs = render_component((EXISTING / component).resolve(), objs)
    return objs


def by_name(node: Any) -> Any:
    """Lists of named entries as maps, so that two renderings compare regardless of order."""
    if isinstance(node, dict):
        return {k: by_name(v) for k, v in node.items()}
    if isinstance(node, list) and node and all(isinstance(e, dict) and "name" in e for e in node):
        return {e["name"]: by_name(e) for e in node}
    if isinstance(node, list):
        return [by_name(e) for e in node]
    return node


# --------------------------------------------------------------------- the wiring


@cache
def base_deployment() -> Obj:
    deployment: Obj = find(load_docs(BASE / "deployment.yaml"), "Deployment")
    return deployment


def base_sidecar() -> Obj:
    return container(base_deployment(), "sentinel")


def base_vllm_probes() -> dict[str, Obj]:
    vllm = container(base_deployment(), "vllm")
    return {field: vllm[field] for field in PROBE_FIELDS.values()}


def base_sentinel_volumes() -> dict[str, Obj]:
    volumes = pod_spec(base_deployment())["volumes"]
    return {v["name"]: v for v in volumes if v["name"] in SENTINEL_VOLUMES}


def check_sentinel_pod(
    spec: Obj, vllm_name: str, vllm_port: int, target: str | None = None
) -> None:
    """The pod runs sentinel as manifests/base does, beside the vLLM container vllm_name."""
    assert spec["shareProcessNamespace"] is True
    assert spec["automountServiceAccountToken"] is False
    assert spec["serviceAccountName"] == "sentinel"
    sidecars = [c for c in spec["initContainers"] if c["name"] == "sentinel"]
    assert len(sidecars) == 1
    sidecar = sidecars[0]
    assert sidecar["restartPolicy"] == "Always", "a native sidecar"
    assert "sentinel" not in [c["name"] for c in spec["containers"]]
    expected = copy.deepcopy(base_sidecar())
    if target is not None:
        next(e for e in expected["env"] if e["name"] == "SENTINEL_TARGET")["value"] = target
    assert sidecar == expected, "the sidecar must equal manifests/base's (but for its target)"
    # sentinel probes the vLLM server of this pod, over the loopback.
    settings = load_settings(env=env_of(sidecar))
    assert settings.target == f"http://127.0.0.1:{vllm_port}"
    _, http_port = split_host_port(settings.listen)
    vllm = next(c for c in spec["containers"] if c["name"] == vllm_name)
    assert vllm_port in {p["containerPort"] for p in vllm["ports"]}
    probes = {field: vllm.get(field) for field in PROBE_FIELDS.values()}
    assert probes == base_vllm_probes(), "the vllm probes must be sentinel's, as in the base"
    assert all(p["httpGet"]["port"] == http_port for p in probes.values() if p)
    volumes = {v["name"]: v for v in spec["volumes"]}
    for mount in sidecar["volumeMounts"]:
        assert volumes.get(mount["name"]) == base_sentinel_volumes()[mount["name"]], mount["name"]


def as_pod(spec: Obj) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "vllm"}, "spec": spec}


# ---------------------------------------------------------------- the component


def test_component_patch_carries_the_base_sidecar_volumes_and_probes() -> None:
    patch = load_docs(SIDECAR / "sidecar-patch.yaml")[0]
    spec = patch["spec"]["template"]["spec"]
    assert spec["initContainers"] == [base_sidecar()]
    assert {v["name"]: v for v in spec["volumes"]} == base_sentinel_volumes()
    (vllm,) = spec["containers"]
    probes = {
        field: {k: v for k, v in vllm[field].items() if k != "$patch"}
        for field in PROBE_FIELDS.values()
    }
    assert probes == base_vllm_probes()
    assert all(vllm[field]["$patch"] == "replace" for field in PROBE_FIELDS.values())


def test_plain_vllm_deployment_is_the_docs_shape() -> None:
    (deployment,) = load_docs(EXISTING / "vllm-deployment.yaml")
    kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
    spec = pod_spec(deployment)
    assert [c["name"] for c in spec["containers"]] == ["vllm"]
    assert "initContainers" not in spec
    vllm = spec["containers"][0]
    assert vllm["command"] == ["vllm", "serve"]
    assert vllm["livenessProbe"]["httpGet"] == {"path": "/health", "port": 8000}


def test_component_on_a_plain_vllm_deployment_validates_and_is_wired() -> None:
    (deployment,) = render_existing()
    kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
    spec = pod_spec(deployment)
    check_sentinel_pod(spec, "vllm", 8000)
    # Everything else of the user's Deployment stays as it was.
    (plain,) = load_docs(EXISTING / "vllm-deployment.yaml")
    vllm = container(deployment, "vllm")
    plain_vllm = container(plain, "vllm")
    for key in set(plain_vllm) | set(vllm):
        if key not in PROBE_FIELDS.values():
            assert vllm.get(key) == plain_vllm.get(key), key
    assert {"cache-volume", "shm"} <= {v["name"] for v in spec["volumes"]}
    assert deployment["spec"]["selector"] == plain["spec"]["selector"]


def test_component_with_another_container_name_is_caught() -> None:
    """The patch merges by container name: under another name the wiring check fails."""
    (plain,) = load_docs(EXISTING / "vllm-deployment.yaml")
    pod_spec(plain)["containers"][0]["name"] = "server"
    (deployment,) = render_component(SIDECAR, [plain])
    assert [c["name"] for c in pod_spec(deployment)["containers"]] == ["server", "vllm"]
    with pytest.raises(AssertionError):
        check_sentinel_pod(pod_spec(deployment), "server", 8000)


@needs_kubectl
def test_kustomize_renders_the_component_as_the_test_renderer_does() -> None:
    objs = list(kustomize_build(EXISTING))
    (deployment,) = objs
    kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
    check_sentinel_pod(pod_spec(deployment), "vllm", 8000)
    assert by_name(objs) == by_name(render_existing())


# ------------------------------------------------------------------------- KServe


def kserve_schema() -> Obj:
    schema: Obj = json.loads(KSERVE_SCHEMA.read_text(encoding="utf-8"))
    return schema


# ComponentExtensionSpec: KServe's own predictor fields beside the inlined PodSpec.
KSERVE_EXTENSION_FIELDS = {"minReplicas", "maxReplicas", "scaleTarget", "scaleMetric", "timeout"}


def test_kserve_example_validates_against_the_crd() -> None:
    (isvc,) = load_docs(KSERVE_EXAMPLE)
    jsonschema.Draft202012Validator(kserve_schema()).validate(isvc)
    annotations = isvc["metadata"]["annotations"]
    assert annotations["serving.kserve.io/deploymentMode"] in ("RawDeployment", "Standard")


def test_kserve_predictor_pod_validates_and_is_wired() -> None:
    (isvc,) = load_docs(KSERVE_EXAMPLE)
    predictor = isvc["spec"]["predictor"]
    spec = {k: v for k, v in predictor.items() if k not in KSERVE_EXTENSION_FIELDS}
    kubernetes_validate.validate(as_pod(spec), KUBERNETES_VERSION, strict=True)
    # With more than one container KServe takes the one named kserve-container.
    check_sentinel_pod(spec, "kserve-container", 8000)


def test_kserve_schema_rejects_what_the_api_server_would_prune() -> None:
    (isvc,) = load_docs(KSERVE_EXAMPLE)
    validator = jsonschema.Draft202012Validator(kserve_schema())
    broken = copy.deepcopy(isvc)
    broken["spec"]["predictor"]["initContainers"][0]["restartPolicyy"] = "Always"
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(broken)
    broken = copy.deepcopy(isvc)
    broken["spec"]["predictor"]["containers"][0]["livenessProbe"]["periodSeconds"] = "5"
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(broken)


# -------------------------------------------------------------------------- llm-d


def llm_d_schema() -> Obj:
    schema: Obj = json.loads(LLM_D_SCHEMA.read_text(encoding="utf-8"))
    return schema


def render_llm_d_decode_pod(values: Obj) -> Obj:
    """The decode pod spec of the llm-d-modelservice chart, for the fields these values set.

    As templates/decode-deployment.yaml and _helpers.tpl (modelPod, container) write it:
    the routing proxy first among the init containers, then decode.initContainers as
    given; decode.extraConfig into the pod spec; serviceAccountOverride as the account;
    decode.volumes as given; each container's name, image, ports and extraConfig (with
    `vllm serve ... --port <vLLM's port>` for modelCommand vllmServe).
    """
    decode = values["decode"]
    routing = values["routing"]
    proxy_on = routing["proxy"].get("enabled", True) is not False
    vllm_port = routing["proxy"]["targetPort"] if proxy_on else routing["servicePort"]
    init = []
    if proxy_on:
        init.append(
            {
                "name": "routing-proxy",
                "image": "ghcr.io/llm-d/llm-d-routing-sidecar:latest",
                "args": [f"--port={routing['servicePort']}", f"--vllm-port={vllm_port}"],
                "ports": [{"containerPort": routing["servicePort"], "protocol": "TCP"}],
                "restartPolicy": "Always",
            }
        )
    init += decode.get("initContainers", [])
    containers = []
    for ctr in decode["containers"]:
        rendered: Obj = {"name": ctr.get("name", "vllm"), "image": ctr["image"]}
        if ctr.get("modelCommand") == "vllmServe":
            rendered["command"] = ["vllm", "serve"]
            model = values["modelArtifacts"]["uri"].split("://", 1)[1]
            rendered["args"] = [model, "--port", str(vllm_port), *ctr.get("args", [])]
        rendered["ports"] = ctr.get("ports", [])
        rendered["resources"] = ctr.get("resources", {})
        rendered |= ctr.get("extraConfig", {})
        containers.append(rendered)
    spec: Obj = dict(decode.get("extraConfig", {}))
    spec["serviceAccountName"] = values.get("serviceAccountOverride") or "llm-d-modelservice"
    spec["initContainers"] = init
    spec["containers"] = containers
    spec["volumes"] = decode.get("volumes", [])
    return spec


def test_llm_d_values_validate_against_the_chart_schema() -> None:
    values = load_docs(LLM_D_VALUES)[0]
    jsonschema.Draft7Validator(llm_d_schema()).validate(values)


def test_llm_d_decode_pod_validates_and_is_wired() -> None:
    values = load_docs(LLM_D_VALUES)[0]
    spec = render_llm_d_decode_pod(values)
    kubernetes_validate.validate(as_pod(spec), KUBERNETES_VERSION, strict=True)
    # The routing proxy owns :8000; sentinel probes vLLM itself, on the proxy's target.
    vllm_port = values["routing"]["proxy"]["targetPort"]
    check_sentinel_pod(spec, "vllm", vllm_port, target=f"http://127.0.0.1:{vllm_port}")
    args = " ".join(spec["containers"][0]["args"]).replace("=", " ")
    assert re.search(r"--scheduling-policy priority\b", args)


def test_llm_d_schema_checks_init_containers() -> None:
    """decode.initContainers are checked as Kubernetes Containers by the chart's schema."""
    values = load_docs(LLM_D_VALUES)[0]
    broken = copy.deepcopy(values)
    broken["decode"]["initContainers"][0]["ports"][0]["containerPort"] = "8471"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(llm_d_schema()).validate(broken)


# ------------------------------------------------------------------------ READMEs


def readme_section(path: Path, heading: str) -> str:
    text = path.read_text(encoding="utf-8")
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end != -1 else None]


def test_readmes_give_the_install_line_and_the_component() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    section = readme_section(REPO / "README.md", "## Running against your own vLLM")
    assert f"pip install {project['name']}" in section
    assert "manifests/components/sidecar" in section
    way_in = readme_section(MANIFESTS / "README.md", "## Add sentinel to an existing deployment")
    for name in ("components/sidecar", KSERVE_EXAMPLE.name, LLM_D_VALUES.name, "production-stack"):
        assert name in way_in, name
