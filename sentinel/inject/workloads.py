"""Where a document's pods are, and which of their containers runs vLLM.

Pure reading, no YAML library: a workload kind maps to the path of its pod spec,
and a container runs vLLM by its command line (``vllm serve``, the OpenAI
entrypoint module), by its image, or by the name the user gave with ``--container``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["InjectError", "PodSite", "find_vllm", "pod_sites", "vllm_port"]

# vLLM's own default for `vllm serve --port`.
DEFAULT_PORT = 8000
# apiVersion group (without version) and kind -> the path from the document to its PodSpec.
POD_PATHS: Mapping[tuple[str, str], tuple[str, ...]] = {
    ("apps", "Deployment"): ("spec", "template", "spec"),
    ("apps", "StatefulSet"): ("spec", "template", "spec"),
    ("apps", "DaemonSet"): ("spec", "template", "spec"),
    ("apps", "ReplicaSet"): ("spec", "template", "spec"),
    ("", "Pod"): ("spec",),
    # The leader runs vLLM's API server; workers run engines only (see leader_only below).
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): (
        "spec",
        "leaderWorkerTemplate",
        "leaderTemplate",
        "spec",
    ),
    # A custom predictor inlines a PodSpec (containers, initContainers, volumes...).
    ("serving.kserve.io", "InferenceService"): ("spec", "predictor"),
}
ENTRYPOINT_MODULE = "vllm.entrypoints.openai.api_server"


class InjectError(Exception):
    """What inject cannot handle, said in one line naming the document."""


@dataclass(frozen=True)
class PodSite:
    """One pod spec inside a document, and the document's name for messages."""

    where: str  # "Deployment/foo"
    spec: Any  # the PodSpec mapping, edited in place by inject


def _get(node: Any, path: Sequence[str]) -> Any:
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def describe(doc: Mapping[str, Any]) -> str:
    """``Kind/name``, the way kubectl names an object."""
    name = _get(doc, ("metadata", "name")) or "(unnamed)"
    return f"{doc.get('kind', '(no kind)')}/{name}"


def pod_sites(doc: Any) -> Iterator[PodSite]:
    """Every pod spec of a document (a List's items included); other kinds yield nothing."""
    if not isinstance(doc, Mapping):
        return
    kind, api_version = doc.get("kind"), doc.get("apiVersion")
    if not isinstance(kind, str) or not isinstance(api_version, str):
        return
    if kind.endswith("List") and isinstance(doc.get("items"), list):
        for item in doc["items"]:
            yield from pod_sites(item)
        return
    group = api_version.rpartition("/")[0]
    path = POD_PATHS.get((group, kind))
    if path is None:
        return
    where = describe(doc)
    if kind == "LeaderWorkerSet":
        _leader_only(doc, where)
    if kind == "InferenceService" and "containers" not in (_get(doc, path) or {}):
        # The model's container, command and port come from a ServingRuntime not in sight.
        raise InjectError(
            f"{where}: a predictor.model served by a ServingRuntime is not handled: "
            "use a custom predictor (predictor.containers)"
        )
    spec = _get(doc, path)
    if isinstance(spec, Mapping):
        _check_shape(spec, where)
        yield PodSite(where, spec)


def _check_shape(spec: Mapping[str, Any], where: str) -> None:
    """Refuse the lists inject reads or extends when they are not lists of mappings.

    The API server would refuse them too; refusing here keeps every later step free
    of type checks and the command free of tracebacks on a hostile file.
    """
    for field in ("containers", "initContainers", "volumes"):
        entries = spec.get(field)
        if entries is not None and (
            not isinstance(entries, list) or not all(isinstance(e, Mapping) for e in entries)
        ):
            raise InjectError(f"{where}: {field} is not a list of objects")
    for entry in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
        for field in ("command", "args", "ports", "env"):
            if entry.get(field) is not None and not isinstance(entry[field], list):
                raise InjectError(
                    f"{where}: {field} of container {entry.get('name')} is not a list"
                )


def _leader_only(doc: Mapping[str, Any], where: str) -> None:
    """Refuse a LeaderWorkerSet whose leader shares the workers' template.

    Workers run engines (Ray or headless) and serve no API, so sentinel would find
    nothing to probe there and, enforcing, would restart healthy workers. Without a
    leaderTemplate the leader is made from the worker template, so sentinel cannot go
    on the leader alone.
    """
    template = _get(doc, ("spec", "leaderWorkerTemplate"))
    if isinstance(template, Mapping) and "leaderTemplate" not in template:
        raise InjectError(
            f"{where}: no leaderTemplate (the leader uses the worker template); "
            "sentinel goes on the leader only: give the leader its own template"
        )


def _words(container: Mapping[str, Any]) -> list[str]:
    """The container's command line as words, a shell string (``sh -c "..."``) split too."""
    words: list[str] = []
    for field in ("command", "args"):
        for item in container.get(field) or ():
            text = str(item)
            try:
                words.extend(shlex.split(text) if " " in text else [text])
            except ValueError:  # an unbalanced quote: split on blanks
                words.extend(text.split())
    return words


def _serves(words: Sequence[str]) -> int | None:
    """The index after vLLM's server in a command line, None when it runs no vLLM server."""
    for i, word in enumerate(words):
        if word == ENTRYPOINT_MODULE:
            return i + 1
        base = word.rsplit("/", 1)[-1]
        if base == "vllm" and i + 1 < len(words) and words[i + 1] == "serve":
            return i + 2
    return None


def _image_is_vllm(container: Mapping[str, Any]) -> bool:
    image = str(container.get("image") or "")
    repository = re.split(r"[:@]", image.rsplit("/", 1)[-1], maxsplit=1)[0]
    return "vllm" in repository.lower()


def find_vllm(site: PodSite, named: str | None) -> Any | None:
    """The pod's vLLM container, or None; two candidates are refused rather than guessed."""
    containers = [c for c in site.spec.get("containers") or () if isinstance(c, Mapping)]
    if named is not None:
        return next((c for c in containers if c.get("name") == named), None)
    by_command = [c for c in containers if _serves(_words(c)) is not None]
    candidates = by_command or [c for c in containers if _image_is_vllm(c)]
    if len(candidates) > 1:
        names = ", ".join(str(c.get("name")) for c in candidates)
        raise InjectError(
            f"{site.where}: several containers run vLLM ({names}): name one with --container"
        )
    return candidates[0] if candidates else None


def vllm_port(site: PodSite, container: Mapping[str, Any]) -> int:
    """The port vLLM listens on: ``--port`` on its command line, else its first containerPort."""
    words = _words(container)
    start = _serves(words) or 0
    given: str | None = None
    for i, word in enumerate(words[start:], start):
        if word == "--port" and i + 1 < len(words):
            given = words[i + 1]
        elif word.startswith("--port="):
            given = word.partition("=")[2]
    if given is None:
        ports = [p for p in container.get("ports") or () if isinstance(p, Mapping)]
        given = str(ports[0].get("containerPort")) if ports else str(DEFAULT_PORT)
    if not given.isdigit() or not 0 < int(given) < 65536:
        raise InjectError(
            f"{site.where}: container {container.get('name')} listens on port {given!r}, "
            "not a number inject can point sentinel at"
        )
    return int(given)
