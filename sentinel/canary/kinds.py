"""The one explicit registry of canary kinds.

The catalog rejects any kind not listed here and the runner dispatches through
it; adding a kind means adding a module and one line below.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from sentinel.canary import multimodal, structured, text
from sentinel.canary.protocol import CanaryKindProbe
from sentinel.canary.result import CanaryKind

KINDS: Mapping[CanaryKind, CanaryKindProbe] = MappingProxyType(
    {
        CanaryKind.TEXT: text.CANARY,
        CanaryKind.STRUCTURED: structured.CANARY,
        CanaryKind.MULTIMODAL: multimodal.CANARY,
    }
)
