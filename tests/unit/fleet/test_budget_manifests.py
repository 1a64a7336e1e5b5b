"""The restart-budget component: valid objects, Leases by name, and the least RBAC for them.

Built on the base as an operator's overlay would (tests/unit/inject/test_manifests.py's
helpers), validated against the Kubernetes schema; the Role may get and update
exactly the Leases the component creates and the slot count the sidecar
resolves from its environment, and sentinel's Lease adapter calls nothing else.
"""

from __future__ import annotations

import re
from pathlib import Path

from sentinel.fleet.budget import slot_count, slot_names
from sentinel.fleet.lease import POOL_ENV
from tests.unit.inject.test_manifests import (
    REPO,
    build_with_components,
    container,
    find,
    needs_kubectl,
    sentinel_settings,
    validate,
)

# The client calls sentinel.fleet.lease makes, and the grant each needs.
LEASE_CALLS = {
    "read_namespaced_lease": ("coordination.k8s.io", "leases", "get"),
    "replace_namespaced_lease": ("coordination.k8s.io", "leases", "update"),
    "create_namespaced_lease": ("coordination.k8s.io", "leases", "create"),
}


@needs_kubectl
def test_the_component_validates_and_grants_get_update_on_its_leases_only(
    tmp_path: Path,
) -> None:
    objs = build_with_components(tmp_path, ["restart-budget"])
    for obj in objs:
        validate(obj)
    leases = sorted(o["metadata"]["name"] for o in objs if o["kind"] == "Lease")
    role = find(objs, "Role", "sentinel-restart-budget")
    assert len(role["rules"]) == 1
    rule = role["rules"][0]
    assert rule["apiGroups"] == ["coordination.k8s.io"]
    assert rule["resources"] == ["leases"]
    assert sorted(rule["resourceNames"]) == leases
    granted = {("coordination.k8s.io", "leases", verb) for verb in rule["verbs"]}
    source = (REPO / "sentinel" / "fleet" / "lease.py").read_text(encoding="utf-8")
    needed = {grant for call, grant in LEASE_CALLS.items() if re.search(rf"\b{call}\b", source)}
    assert (
        granted
        == needed
        == {
            ("coordination.k8s.io", "leases", "get"),
            ("coordination.k8s.io", "leases", "update"),
        }
    )
    binding = find(objs, "RoleBinding", "sentinel-restart-budget")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "sentinel"}]


@needs_kubectl
def test_the_sidecar_resolves_a_budget_matching_the_shipped_leases(tmp_path: Path) -> None:
    objs = build_with_components(tmp_path, ["restart-budget"])
    deployment = find(objs, "Deployment")
    budget = sentinel_settings(deployment).restart_budget
    assert budget.enabled
    env = {e["name"]: e for e in container(deployment, "sentinel")["env"]}
    label = env[POOL_ENV]["valueFrom"]["fieldRef"]["fieldPath"]
    key = re.fullmatch(r"metadata\.labels\['(.+)'\]", label)
    assert key is not None
    pool = deployment["spec"]["template"]["metadata"]["labels"][key[1]]
    names = slot_names(pool, slot_count(budget.slots, budget.share, budget.pool_size))
    leases = {o["metadata"]["name"] for o in objs if o["kind"] == "Lease"}
    assert set(names) == leases
