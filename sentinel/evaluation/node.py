"""The node the pod runs on, as evidence: where a fault that restarts do not fix is looked for.

sentinel never touches the node: it names it (readiness, ``/status``,
``sentinel_restart_ineffective{node}``, a ``RestartIneffective`` Event) so the
node remediation an operator already runs can act on it (docs/fleet.md).
The name comes from the downward API (``NODE_NAME`` from ``spec.nodeName``,
which the shipped sidecar patch sets); outside a pod it is ''.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from sentinel.verdict.cause import NODE_LIMIT, SECTION
from sentinel.verdict.sections import SectionKey


def node_name(env: Mapping[str, str] | None = None) -> str:
    """``NODE_NAME`` from the downward API, trimmed; '' when unset or no plausible name."""
    value = (os.environ if env is None else env).get("NODE_NAME", "").strip()
    return value if len(value) <= NODE_LIMIT and value.isprintable() else ""


class PodNode:
    """The provider of the ``node`` section (a str: the node's name, '' when not told).

    Fixed for the life of the process: a pod never moves between nodes.
    """

    key: SectionKey[str] = SECTION

    def __init__(self, node: str) -> None:
        self._node = node

    def section(self, now: float) -> str:
        return self._node

    def status(self, section: str, now: float) -> Mapping[str, Any] | None:
        return {"name": section or None}
