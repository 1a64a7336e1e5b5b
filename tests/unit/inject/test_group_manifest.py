"""The LeaderWorkerSet example (manifests/examples/leaderworkerset): a multi-node vLLM group.

The committed ``leaderworkerset.yaml`` is exactly ``sentinel inject plain.yaml``
(so the example cannot drift from what inject writes), the LeaderWorkerSet
validates against the LWS CRD's schema vendored in tests/schemas (LWS v0.10.0),
its two pod templates and the leader's Service against Kubernetes 1.30, and the
group restarts whole: ``RecreateGroupOnPodRestart``, sentinel on the leader only.
The schema is held to reject what the API server would prune or refuse (both
directions), so a typo in the restart policy cannot pass as valid.
"""

from __future__ import annotations

import copy
import json
from functools import cache

import jsonschema
import kubernetes_validate
import pytest

from tests.unit.inject.test_inject import inject, pod_specs, run
from tests.unit.inject.test_manifests import KUBERNETES_VERSION, MANIFESTS, SCHEMAS, Obj, load_docs
from tests.unit.inject.test_way_in import as_pod, check_sentinel_pod

EXAMPLE = MANIFESTS / "examples" / "leaderworkerset"
LWS_SCHEMA = SCHEMAS / "leaderworkerset-x-k8s-io-v1.json"


@cache
def lws_validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(LWS_SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def example() -> tuple[Obj, Obj]:
    lws, service = load_docs(EXAMPLE / "leaderworkerset.yaml")
    return lws, service


def test_the_example_is_what_inject_writes_of_the_plain_group() -> None:
    written = (EXAMPLE / "leaderworkerset.yaml").read_text(encoding="utf-8")
    assert inject(EXAMPLE / "plain.yaml") == written
    assert run(["--check", str(EXAMPLE / "plain.yaml")])[0] == 1  # the input lacks sentinel
    assert run(["--check", str(EXAMPLE / "leaderworkerset.yaml")])[:2] == (0, "")


def test_the_group_validates_against_the_lws_crd_and_kubernetes() -> None:
    lws, service = example()
    lws_validator().validate(lws)
    for spec in pod_specs(lws).values():
        kubernetes_validate.validate(as_pod(spec), KUBERNETES_VERSION, strict=True)
    kubernetes_validate.validate(service, KUBERNETES_VERSION, strict=True)
    assert service["spec"]["selector"] == {
        "leaderworkerset.sigs.k8s.io/name": lws["metadata"]["name"],
        "role": lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"]["labels"]["role"],
    }


def test_a_restart_of_the_leader_recreates_the_whole_group_and_sentinel_is_on_the_leader_only() -> (
    None
):
    lws, _ = example()
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert template["size"] >= 2
    specs = pod_specs(lws)
    check_sentinel_pod(specs["leader"], "vllm-leader", 8080, target="http://127.0.0.1:8080")
    worker = specs["worker"]
    assert "initContainers" not in worker
    assert "shareProcessNamespace" not in worker
    assert all("Probe" not in key for c in worker["containers"] for key in c)
    # Ray's head on the leader, `ray start --block` on the workers (LWS's vLLM example).
    (leader_vllm,) = specs["leader"]["containers"]
    assert "multi-node-serving.sh leader" in leader_vllm["command"][-1]
    assert "vllm serve" in leader_vllm["command"][-1]
    assert "multi-node-serving.sh worker" in worker["containers"][0]["command"][-1]


def _mutated(path: tuple[str, ...], value: object) -> Obj:
    lws = copy.deepcopy(example()[0])
    node = lws
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return lws


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "leaderWorkerTemplate", "restartPolicy"), "RecreateGroupOnRestart"),
        (("spec", "leaderWorkerTemplate", "restartPolicyy"), "RecreateGroupOnPodRestart"),
        (("spec", "leaderWorkerTemplate", "size"), "2"),
        (("spec", "startupPolicy"), "WorkersFirst"),
    ],
)
def test_the_schema_rejects_a_misspelt_group(path: tuple[str, ...], value: object) -> None:
    with pytest.raises(jsonschema.ValidationError):
        lws_validator().validate(_mutated(path, value))


def test_the_schema_knows_every_restart_policy_of_lws_v0_10() -> None:
    for policy in ("RecreateGroupOnPodRestart", "RecreateGroupAfterStart", "None", "Default"):
        lws_validator().validate(
            _mutated(("spec", "leaderWorkerTemplate", "restartPolicy"), policy)
        )
