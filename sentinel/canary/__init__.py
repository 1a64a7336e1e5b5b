"""Canaries: the kind registry, one module per kind, the catalog, the runner and its results.

The package owns everything about one canary request: its spec and kind
(:mod:`.spec`, :mod:`.kinds`, one module per kind behind :mod:`.protocol`), the
catalog that loads specs from ``specs/*.yaml`` (:mod:`.catalog`), the runner
that sends one over HTTP (:mod:`.runner`), reading its reply (:mod:`.replies`,
:mod:`.refusal`, :mod:`.capability`, :mod:`.degenerate`) and the frozen result
every other package reads (:mod:`.result`), with the work it can explain
(:mod:`.credit`) and its late answer (:mod:`.late`).

The names below are the ones other packages use, each with one home. The kind
registry, the catalog, the runner, :func:`~sentinel.canary.outcome.outcome`
and the late answer are left out and imported from their modules: they load
PIL, jsonschema, YAML, httpx or asyncio, and the verdict, which reads results
only, must not pay for them.
"""

from sentinel.canary.capability import NOT_A_CAPABILITY
from sentinel.canary.correctness import CORRECTNESS, CorrectnessEvidence, Fingerprint
from sentinel.canary.credit import Credit, discount, refund
from sentinel.canary.degenerate import DEGENERATE_PREFIX
from sentinel.canary.protocol import ServerFacts
from sentinel.canary.refusal import Refusal, RefusalSeen, engine_dead, refusal_of
from sentinel.canary.result import CanaryResult, Generation, Reason
from sentinel.canary.spec import (
    CHAT_ENDPOINT,
    COMPLETIONS_ENDPOINT,
    TEXT,
    CanaryKind,
    CanarySpec,
    OpenName,
)

__all__ = [
    "CHAT_ENDPOINT",
    "COMPLETIONS_ENDPOINT",
    "CORRECTNESS",
    "DEGENERATE_PREFIX",
    "NOT_A_CAPABILITY",
    "TEXT",
    "CanaryKind",
    "CanaryResult",
    "CanarySpec",
    "CorrectnessEvidence",
    "Credit",
    "Fingerprint",
    "Generation",
    "OpenName",
    "Reason",
    "Refusal",
    "RefusalSeen",
    "ServerFacts",
    "discount",
    "engine_dead",
    "refund",
    "refusal_of",
]
