"""What inject adds to a pod: read from the sidecar component's patch, shipped as package data.

``sidecar-patch.yaml`` here is byte-for-byte the file of ``manifests/components/sidecar``
(a unit test keeps them equal), so ``sentinel inject`` and ``kubectl kustomize`` add
the same native sidecar, volumes, probes and pod fields; only the image, the target
port and the enforce switch are filled in per run.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.scalarstring import DoubleQuotedScalarString

__all__ = ["SIDECAR_NAME", "Sidecar", "fresh", "load_sidecar"]

SIDECAR_NAME = "sentinel"
PATCH_FILE = "sidecar-patch.yaml"


@dataclass(frozen=True)
class Sidecar:
    """The parts of the patch, each copied afresh (comment-free) into every pod it goes into."""

    pod_fields: CommentedMap  # shareProcessNamespace, serviceAccountName, automount...
    container: CommentedMap  # the native sidecar, with this run's image, target and enforce
    probes: CommentedMap  # the vLLM container's startup, liveness and readiness probes
    volumes: CommentedSeq

    @property
    def ports(self) -> frozenset[int | str]:
        """What a vLLM probe that asks sentinel names as its port (a number or a name)."""
        named: set[int | str] = set()
        for port in self.container.get("ports", []):
            named.update((port["containerPort"], port.get("name", port["containerPort"])))
        return frozenset(named)


def fresh(node: Any) -> Any:
    """A deep copy without comments: a patch's comments describe the patch, not the pod."""
    if isinstance(node, dict):
        copied = CommentedMap()
        for key, value in node.items():
            copied[key] = fresh(value)
        return copied
    if isinstance(node, list):
        return CommentedSeq(fresh(item) for item in node)
    return node


def _set_env(container: CommentedMap, name: str, value: str) -> None:
    for entry in container["env"]:
        if entry["name"] == name:
            # Quoted: "false" or a URL must stay a string for YAML 1.1 readers too.
            entry["value"] = DoubleQuotedScalarString(value)
            return
    raise ValueError(f"{PATCH_FILE} has no {name} in the sidecar's env")


def load_sidecar(*, image: str | None, target_port: int, enforce: bool) -> Sidecar:
    """The sidecar for one pod: the patch's, with this run's image, target port and enforce."""
    text = resources.files(__package__).joinpath(PATCH_FILE).read_text(encoding="utf-8")
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    patch = yaml.load(text)
    spec = patch["spec"]["template"]["spec"]
    (container,) = (fresh(c) for c in spec["initContainers"])
    if image is not None:
        container["image"] = image
    _set_env(container, "SENTINEL_TARGET", f"http://127.0.0.1:{target_port}")
    _set_env(container, "SENTINEL_ENFORCE", "true" if enforce else "false")
    (vllm,) = spec["containers"]
    probes = CommentedMap()
    for field, probe in vllm.items():
        if field == "name":
            continue
        probes[field] = fresh({k: v for k, v in probe.items() if k != "$patch"})
    pod_fields = CommentedMap(
        (k, fresh(v))
        for k, v in spec.items()
        if k not in ("initContainers", "containers", "volumes")
    )
    return Sidecar(pod_fields, container, probes, fresh(spec["volumes"]))
