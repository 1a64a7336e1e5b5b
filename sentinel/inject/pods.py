"""One pod spec, injected or checked: the sidecar, its volumes, the probes, the pod's fields.

Each step leaves a pod that already has it as it is, which is what makes a second
``sentinel inject`` a no-op. What would silently change the meaning of the pod is
refused instead: a container named sentinel that is not sentinel's sidecar, a volume
of sentinel's name that holds something else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ruamel.yaml.comments import CommentedSeq

from sentinel.inject.sidecar import SIDECAR_NAME, Sidecar, fresh
from sentinel.inject.workloads import InjectError, PodSite, vllm_port

__all__ = ["Options", "has_sentinel", "inject_pod", "unwired_probes"]

# What sentinel's own patch names the account; a pod on the namespace's default one
# gets it, any other account is kept (see _service_account).
DEFAULT_ACCOUNTS = ("", "default")
PROBES = ("startupProbe", "livenessProbe", "readinessProbe")


@dataclass(frozen=True)
class Options:
    """What the user chose on the command line."""

    image: str | None
    enforce: bool
    container: str | None


def _plain(node: Any) -> Any:
    """A comparable copy: mappings and lists as dict and list, scalars as Python values."""
    if isinstance(node, Mapping):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    if isinstance(node, str):
        return str(node)
    return node


def has_sentinel(spec: Mapping[str, Any]) -> bool:
    """Whether the pod runs sentinel as a native sidecar (an init container that keeps running)."""
    for init in spec.get("initContainers") or ():
        if isinstance(init, Mapping) and init.get("name") == SIDECAR_NAME:
            return init.get("restartPolicy") == "Always"
    return False


def unwired_probes(vllm: Mapping[str, Any], sidecar: Sidecar) -> list[str]:
    """The vLLM container's probes that do not ask sentinel (HTTP or gRPC on its ports)."""
    unwired = []
    grpc_port = 8472  # the grpc-probes component's listener
    for field in PROBES:
        probe = vllm.get(field)
        handler = probe.get("httpGet") or probe.get("grpc") if isinstance(probe, Mapping) else None
        port = handler.get("port") if isinstance(handler, Mapping) else None
        if port not in sidecar.ports and port != grpc_port:
            unwired.append(field)
    return unwired


def _check_names(site: PodSite) -> bool:
    """Whether the pod already has sentinel's sidecar; refuses a stranger of that name."""
    spec = site.spec
    for ctr in spec.get("containers") or ():
        if isinstance(ctr, Mapping) and ctr.get("name") == SIDECAR_NAME:
            raise InjectError(
                f"{site.where}: has a container named {SIDECAR_NAME} that is not a native "
                "sidecar: rename it, or remove it to inject sentinel"
            )
    if not any(
        isinstance(i, Mapping) and i.get("name") == SIDECAR_NAME
        for i in spec.get("initContainers") or ()
    ):
        return False
    if not has_sentinel(spec):
        raise InjectError(
            f"{site.where}: has an init container named {SIDECAR_NAME} that is not a native "
            "sidecar (restartPolicy: Always): rename it, or remove it to inject sentinel"
        )
    return True


def _service_account(site: PodSite, sidecar: Sidecar, note: Callable[[str], None]) -> None:
    """sentinel's account for a pod on the default one; any other account is kept, and said.

    A pod that names its own account usually needs it (model storage credentials,
    workload identity): taking it away would break vLLM, so sentinel shares it and the
    user binds sentinel's Role to it. Either way stderr says so: never silently.
    """
    spec = site.spec
    account = str(spec.get("serviceAccountName") or "")
    wanted = str(sidecar.pod_fields["serviceAccountName"])
    if account in DEFAULT_ACCOUNTS:
        spec["serviceAccountName"] = wanted
        spec["automountServiceAccountToken"] = sidecar.pod_fields["automountServiceAccountToken"]
        note(
            f"{site.where}: runs as ServiceAccount {wanted} now "
            "(create it with manifests/base/rbac.yaml)"
        )
    elif account != wanted:
        note(
            f"{site.where}: keeps ServiceAccount {account}: bind sentinel's Role to it "
            "(manifests/base/rbac.yaml) so sentinel can post Events"
        )


def _add_volumes(site: PodSite, sidecar: Sidecar) -> None:
    volumes = site.spec.get("volumes")
    if volumes is None:
        volumes = site.spec["volumes"] = CommentedSeq()
    present = {v.get("name"): v for v in volumes if isinstance(v, Mapping)}
    for volume in sidecar.volumes:
        existing = present.get(volume["name"])
        if existing is None:
            volumes.append(fresh(volume))
        elif _plain(existing) != _plain(volume):
            raise InjectError(
                f"{site.where}: already has a volume named {volume['name']} holding "
                "something else than sentinel's: rename it"
            )


def inject_pod(
    site: PodSite,
    vllm: Any,
    make_sidecar: Callable[[int], Sidecar],
    note: Callable[[str], None],
) -> bool:
    """Add sentinel to one pod, in place; False when it already had it (left as it is)."""
    if _check_names(site):
        return False
    sidecar = make_sidecar(vllm_port(site, vllm))
    _add_volumes(site, sidecar)
    spec = site.spec
    _service_account(site, sidecar, note)
    for field, value in sidecar.pod_fields.items():
        if field not in ("serviceAccountName", "automountServiceAccountToken"):
            spec[field] = fresh(value)
    inits = spec.get("initContainers")
    if inits is None:
        inits = spec["initContainers"] = CommentedSeq()
    inits.append(fresh(sidecar.container))
    for field in PROBES:  # replaced whole: no field of the old /health probe is left merged
        vllm[field] = fresh(sidecar.probes[field])
    return True
