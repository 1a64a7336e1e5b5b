"""``sentinel inject`` on the fixtures of tests/fixtures/inject (README.md there names them).

Each fixture, injected: every document valid against Kubernetes 1.30 (a
LeaderWorkerSet's templates and a KServe predictor as Pods, the InferenceService
also against the CRD subset in tests/schemas), every vLLM pod wired to sentinel as
manifests/base is, ``--check`` silent after and loud before, and a second inject
byte-equal. What inject cannot handle is refused in one line with nothing written.
"""

from __future__ import annotations

import argparse
import copy
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from sentinel.inject.arguments import add_inject_arguments
from sentinel.inject.command import inject_main
from tests.unit.inject.test_manifests import (
    COMPONENTS,
    KUBERNETES_VERSION,
    REPO,
    Obj,
    kustomize_build,
    load_docs,
    needs_kubectl,
)
from tests.unit.inject.test_way_in import (
    EXISTING,
    KSERVE_EXTENSION_FIELDS,
    SIDECAR,
    as_pod,
    check_sentinel_pod,
    kserve_schema,
    render_existing,
)

FIXTURES = REPO / "tests" / "fixtures" / "inject"
# fixture -> (workload, vLLM container, vLLM port) of every pod that must get sentinel.
EXPECTED: dict[str, list[tuple[str, str, int]]] = {
    "renamed-deployment.yaml": [("Deployment/qwen-chat", "server", 8000)],
    "statefulset.yaml": [("StatefulSet/llama", "server", 8080)],
    "leaderworkerset.yaml": [("LeaderWorkerSet/vllm", "vllm-leader", 8080)],
    "inferenceservice.yaml": [("InferenceService/qwen", "kserve-container", 8000)],
    "production-stack.yaml": [("Deployment/vllm-opt125m-deployment-vllm", "vllm", 8000)],
    # vLLM's own port, behind llm-d's routing proxy (:8000) on the decode pod.
    "llm-d-pd.yaml": [
        ("Deployment/pd-llm-d-modelservice-decode", "vllm", 8200),
        ("Deployment/pd-llm-d-modelservice-prefill", "vllm", 8000),
    ],
}


def run(
    argv: list[str], stdin: str = "", monkeypatch: pytest.MonkeyPatch | None = None
) -> tuple[int, str, str]:
    """``sentinel inject ARGV``: exit status, stdout, stderr."""
    parser = argparse.ArgumentParser()
    add_inject_arguments(parser)
    args = parser.parse_args(argv)
    out, err = io.StringIO(), io.StringIO()
    stdin_stream = io.TextIOWrapper(io.BytesIO(stdin.encode()), encoding="utf-8")
    saved = sys.stdout, sys.stderr, sys.stdin
    sys.stdout, sys.stderr, sys.stdin = out, err, stdin_stream
    try:
        code = inject_main(args)
    finally:
        sys.stdout, sys.stderr, sys.stdin = saved
    return int(code), out.getvalue(), err.getvalue()


def inject(path: Path, *flags: str) -> str:
    code, out, err = run([str(path), *flags])
    assert code == 0, err
    return out


def pod_specs(doc: Obj) -> dict[str, Obj]:
    """Each pod spec of a document by its place, as Kubernetes would make the pod."""
    if doc["kind"] == "LeaderWorkerSet":
        template = doc["spec"]["leaderWorkerTemplate"]
        return {role: template[f"{role}Template"]["spec"] for role in ("leader", "worker")}
    if doc["kind"] == "InferenceService":
        predictor = doc["spec"]["predictor"]
        return {
            "predictor": {k: v for k, v in predictor.items() if k not in KSERVE_EXTENSION_FIELDS}
        }
    if doc["kind"] in ("Deployment", "StatefulSet", "DaemonSet"):
        return {"template": doc["spec"]["template"]["spec"]}
    return {}


def validate(doc: Obj) -> None:
    if doc["kind"] == "InferenceService":
        jsonschema.Draft202012Validator(kserve_schema()).validate(doc)
    elif doc["kind"] != "LeaderWorkerSet":
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    for spec in pod_specs(doc).values():
        kubernetes_validate.validate(as_pod(spec), KUBERNETES_VERSION, strict=True)


def named(docs: list[Obj], where: str) -> Obj:
    return next(d for d in docs if f"{d['kind']}/{d['metadata']['name']}" == where)


@pytest.mark.parametrize("fixture", sorted(EXPECTED))
def test_fixture_is_injected_valid_wired_and_idempotent(fixture: str) -> None:
    path = FIXTURES / fixture
    before = load_docs(path)
    for doc in before:
        validate(doc)
    assert run(["--check", str(path)])[0] == 1, "the fixture must lack sentinel to begin with"
    out = inject(path)
    after = list(yaml.safe_load_all(out))
    assert [(d["kind"], d["metadata"]["name"]) for d in after] == [
        (d["kind"], d["metadata"]["name"]) for d in before
    ]
    for doc in after:
        validate(doc)
    for where, vllm_name, port in EXPECTED[fixture]:
        doc = named(after, where)
        spec = pod_specs(doc).get("leader") or next(iter(pod_specs(doc).values()))
        original = pod_specs(named(before, where))
        account = (spec.get("serviceAccountName"), spec.get("automountServiceAccountToken"))
        if original_account := next(iter(original.values())).get("serviceAccountName"):
            # A pod's own account is kept (stderr says to bind sentinel's Role to it).
            assert account == (original_account, None)
            spec = {**spec, "serviceAccountName": "sentinel", "automountServiceAccountToken": False}
        check_sentinel_pod(spec, vllm_name, port, target=f"http://127.0.0.1:{port}")
    # Workloads without vLLM (routers, Services) and LeaderWorkerSet workers are untouched.
    for old, new in zip(before, after, strict=True):
        if not any(
            f"{new['kind']}/{new['metadata']['name']}" == w for w, _, _ in EXPECTED[fixture]
        ):
            assert new == old
    if fixture == "leaderworkerset.yaml":
        assert pod_specs(after[0])["worker"] == pod_specs(before[0])["worker"]
    # A second inject changes nothing, and --check finds nothing to say.
    second = run(["-"], stdin=out)
    assert second[:2] == (0, out)
    assert run(["--check", "-"], stdin=out)[:2] == (0, "")


def test_helm_render_keeps_its_comments_and_the_chart_name(tmp_path: Path) -> None:
    path = FIXTURES / "production-stack.yaml"
    out = inject(path)
    sources = [line for line in out.splitlines() if line.startswith("# Source:")]
    assert sources == [
        line for line in path.read_text().splitlines() if line.startswith("# Source:")
    ]
    assert out.startswith("# vllm-project/production-stack")


def test_inject_adds_what_the_kustomize_component_adds() -> None:
    """Same input, same output: inject and the sidecar component (test_way_in's renderer)."""
    (component,) = render_existing()
    (injected,) = yaml.safe_load_all(inject(EXISTING / "vllm-deployment.yaml"))
    assert injected == component


def test_the_shipped_patch_is_the_components() -> None:
    shipped = REPO / "sentinel" / "inject" / "sidecar-patch.yaml"
    assert shipped.read_bytes() == (SIDECAR / "sidecar-patch.yaml").read_bytes()


def test_flags_set_the_image_the_enforce_switch_and_the_container() -> None:
    out = inject(
        FIXTURES / "renamed-deployment.yaml",
        "--image",
        "r.example/sentinel:1",
        "--enforce",
        "false",
    )
    spec = yaml.safe_load(out)["spec"]["template"]["spec"]
    (sidecar,) = spec["initContainers"]
    assert sidecar["image"] == "r.example/sentinel:1"
    assert {"name": "SENTINEL_ENFORCE", "value": "false"} in sidecar["env"]
    # --container picks a container no heuristic would: here the log shipper, on its port.
    out = inject(FIXTURES / "statefulset.yaml", "--container", "log-shipper")
    spec = yaml.safe_load(out)["spec"]["template"]["spec"]
    assert spec["containers"][1]["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert "livenessProbe" not in spec["containers"][0]


def refused(argv: list[str], stdin: str = "") -> str:
    code, out, err = run(argv, stdin)
    assert (code, out) == (2, ""), "a refusal writes nothing"
    assert err.count("\n") == 1, err
    assert err.startswith("sentinel inject: "), err
    return err


def test_a_workload_without_vllm_is_refused() -> None:
    err = refused([str(FIXTURES / "no-vllm.yaml")])
    assert "no vLLM container in Deployment/web: name it with --container" in err
    assert "no such container" in refused(
        [str(FIXTURES / "renamed-deployment.yaml"), "--container", "x"]
    )


def lws_without_leader() -> str:
    doc: Any = load_docs(FIXTURES / "leaderworkerset.yaml")[0]
    template = doc["spec"]["leaderWorkerTemplate"]
    template["workerTemplate"] = template.pop("leaderTemplate")
    return yaml.safe_dump(doc)


def kserve_model() -> str:
    doc = load_docs(FIXTURES / "inferenceservice.yaml")[0]
    predictor = doc["spec"]["predictor"]
    del predictor["containers"]
    predictor["model"] = {"modelFormat": {"name": "huggingface"}, "args": ["--model_name=qwen"]}
    return yaml.safe_dump(doc)


def two_vllm_containers() -> str:
    doc = load_docs(FIXTURES / "renamed-deployment.yaml")[0]
    containers = doc["spec"]["template"]["spec"]["containers"]
    containers.append({**copy.deepcopy(containers[0]), "name": "second"})
    return yaml.safe_dump(doc)


def with_foreign_sentinel() -> str:
    doc = load_docs(FIXTURES / "renamed-deployment.yaml")[0]
    doc["spec"]["template"]["spec"]["containers"].append({"name": "sentinel", "image": "x"})
    return yaml.safe_dump(doc)


def with_foreign_volume() -> str:
    doc = load_docs(FIXTURES / "renamed-deployment.yaml")[0]
    doc["spec"]["template"]["spec"]["volumes"].append({"name": "tmp", "hostPath": {"path": "/tmp"}})
    return yaml.safe_dump(doc)


@pytest.mark.parametrize(
    ("stdin", "says"),
    [
        ("kind: [unclosed\n", "<stdin>: not YAML (line 2)"),
        (lws_without_leader(), "LeaderWorkerSet/vllm: no leaderTemplate"),
        (two_vllm_containers(), "several containers run vLLM (server, second)"),
        (kserve_model(), "InferenceService/qwen: a predictor.model served by a ServingRuntime"),
        (with_foreign_sentinel(), "a container named sentinel that is not a native sidecar"),
        (with_foreign_volume(), "already has a volume named tmp"),
        (
            (FIXTURES / "statefulset.yaml").read_text().replace("--port 8080", "--port $(PORT)"),
            "listens on port '$(PORT)'",
        ),
    ],
    ids=[
        "malformed",
        "lws-no-leader",
        "two-vllm",
        "kserve-model",
        "foreign-sentinel",
        "foreign-volume",
        "port",
    ],
)
def test_what_inject_cannot_handle_is_refused(stdin: str, says: str) -> None:
    assert says in refused(["-"], stdin)


def test_unreadable_hostile_and_oversized_inputs_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "cannot read" in refused([str(tmp_path / "missing.yaml")])
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe")
    assert "not UTF-8" in refused([str(binary)])
    assert "nested too deeply" in refused(["-"], "[" * 5000)
    shapeless = "apiVersion: apps/v1\nkind: Deployment\nspec: {template: {spec: {containers: x}}}"
    assert "containers is not a list of objects" in refused(["-"], shapeless)
    monkeypatch.setattr("sentinel.inject.command.MAX_INPUT_BYTES", 10)
    assert "larger than 10 bytes" in refused(["-"], "kind: ConfigMap\n")


def test_other_kinds_and_lists_pass_through() -> None:
    deployment = load_docs(FIXTURES / "renamed-deployment.yaml")[0]
    stream = yaml.safe_dump_all(
        [
            {"apiVersion": "v1", "kind": "List", "items": [deployment]},
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "c"},
                "data": {"a": "off"},
            },
        ]
    )
    code, out, _ = run(["-"], stdin=stream)
    assert code == 0
    listed, configmap = yaml.safe_load_all(out)
    assert configmap["data"] == {"a": "off"}, "a YAML 1.1 reader must still see a string"
    check_sentinel_pod(listed["items"][0]["spec"]["template"]["spec"], "server", 8000)


def test_check_names_a_pod_whose_probes_bypass_sentinel() -> None:
    out = inject(FIXTURES / "renamed-deployment.yaml")
    doc = yaml.safe_load(out)
    doc["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["port"] = 8000
    code, said, _ = run(["--check", "-"], stdin=yaml.safe_dump(doc))
    assert code == 1
    assert said == "Deployment/qwen-chat: server's livenessProbe not on sentinel\n"


def test_the_command_is_registered(capsys: pytest.CaptureFixture[str]) -> None:
    from sentinel.cli import main

    assert main(["inject", "--check", str(EXISTING / "vllm-deployment.yaml")]) == 1
    assert "Deployment/vllm: runs vLLM (vllm) without sentinel" in capsys.readouterr().out


@needs_kubectl
@pytest.mark.parametrize("labelled", [True, False], ids=["labelled", "unlabelled"])
def test_components_select_by_label_and_check_catches_a_drop(
    tmp_path: Path, labelled: bool
) -> None:
    """A Deployment of any name gets sentinel from the components by one label; without
    it kustomize still exits 0, and ``inject --check`` on the render says so."""
    doc = load_docs(EXISTING / "vllm-deployment.yaml")[0]
    doc["metadata"]["name"] = "qwen-chat"
    if not labelled:
        del doc["metadata"]["labels"]["sentinel.io/inject"]
    (tmp_path / "deployment.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["deployment.yaml"],
        "components": [
            os.path.relpath(COMPONENTS / name, tmp_path) for name in ("sidecar", "observe-only")
        ],
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(kustomization), encoding="utf-8")
    (rendered,) = kustomize_build(tmp_path)
    code, said, _ = run(["--check", "-"], stdin=yaml.safe_dump(rendered))
    if labelled:
        assert (code, said) == (0, "")
        spec = rendered["spec"]["template"]["spec"]
        (sidecar,) = spec["initContainers"]
        assert {"name": "SENTINEL_ENFORCE", "value": "false"} in sidecar["env"]
    else:
        assert (code, said) == (1, "Deployment/qwen-chat: runs vLLM (vllm) without sentinel\n")


POST_RENDERER = REPO / "manifests" / "examples" / "helm-post-renderer"


@pytest.mark.parametrize("fixture", ["production-stack.yaml", "llm-d-pd.yaml"])
def test_helm_post_renderer_injects_a_chart_render(fixture: str) -> None:
    """The script as Helm runs it: the render on stdin, the flags as its arguments."""
    script = POST_RENDERER / "sentinel-inject.sh"
    render = (FIXTURES / fixture).read_text(encoding="utf-8")
    env = {**os.environ, "SENTINEL": str(Path(sys.executable).parent / "sentinel")}
    done = subprocess.run(
        [str(script), "--enforce", "false"],
        input=render,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == inject(FIXTURES / fixture, "--enforce", "false")
    # Helm 4: a postrenderer/v1 plugin whose command is that script.
    plugin = load_docs(POST_RENDERER / "plugin.yaml")[0]
    assert (plugin["apiVersion"], plugin["type"], plugin["runtime"]) == (
        "v1",
        "postrenderer/v1",
        "subprocess",
    )
    (command,) = plugin["runtimeConfig"]["platformCommand"]
    assert command["command"] == "${HELM_PLUGIN_DIR}/" + script.name
