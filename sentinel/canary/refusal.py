"""Deliberate refusals: a fast answer with a body that says the server is alive and declining.

A server that answers in milliseconds with a 503 and a JSON error (or an HTTP
200 stream that carries an error event with its code) is there and refusing
on purpose; it is never an unanswered canary. Each body vLLM is known to send
maps to a state (the source of each text is in ``docs/compat-notes.md`` and
``../shared/VLLM_RELEASES.md``); one nobody taught sentinel is
:attr:`Refusal.UNKNOWN`: "cannot tell", quoted in ``/status``, never a silent
pass and never an engine hang. Matching is on each message's first sentence:
the admission and fault-tolerance 503s share their closing sentence and type.

Pure: bytes and strings in, a member of the closed :class:`Refusal` out.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Refusal(StrEnum):
    """Which deliberate refusal a fast error answer is (a closed set: metric labels)."""

    # vLLM's admission cap (--max-num-queued-reqs, --max-num-queued-tokens): load shedding.
    ADMISSION = "admission"
    # Generation paused (0.33+ /pause in abort or wait mode, 0.34 /checkpoint/prepare).
    PAUSED = "paused"
    # 0.34 fault tolerance: the frontend's cached engine status is not healthy.
    FAULTED = "faulted"
    # Elastic EP: the scaling middleware while a scale runs.
    SCALING = "scaling"
    # Elastic EP (0.33+, external LB): a scaled-down rank awaiting its shutdown.
    RETIRED = "retired"
    # A fast 503 (or a streamed error with code 503) whose body nobody taught sentinel.
    UNKNOWN = "unknown"


# First sentences of the bodies vLLM sends (0.32-0.34, Python front end), by state.
KNOWN_REFUSALS: tuple[tuple[str, Refusal], ...] = (
    # vllm/exceptions.py QueueOverflowError, MaxQueuedTokensError
    ("The engine is currently busy and cannot accept new requests", Refusal.ADMISSION),
    ("The engine has reached its prefill token backlog limit", Refusal.ADMISSION),
    # vllm/v1/engine/core.py _reject_add_while_paused (0.33+)
    ("Generation is paused", Refusal.PAUSED),
    # vllm/exceptions.py EngineFaultedError (0.34)
    ("The engine has faulted and cannot accept new requests", Refusal.FAULTED),
    # vllm/entrypoints/serve/elastic_ep/middleware.py (every release with elastic EP)
    ("The model is currently scaling", Refusal.SCALING),
    # the same middleware, 0.33+
    ("This data-parallel rank has been retired", Refusal.RETIRED),
)

# vLLM's EngineDeadError texts, a 500 (and a streamed error): the engine is gone.
ENGINE_DEAD_MESSAGES = (
    "EngineCore encountered an issue",  # 0.10-0.32
    "The server had an error while processing your request",  # 0.33+ CLIENT_MESSAGE
)

# Statuses a deliberate refusal comes with; anything else is not read as one.
REFUSAL_STATUSES = frozenset({503})


def known_refusal(message: str) -> Refusal | None:
    """The state a refusal's message names (None: not one sentinel knows)."""
    text = message.lstrip()
    for prefix, refusal in KNOWN_REFUSALS:
        if text.startswith(prefix):
            return refusal
    return None


def refusal_of(status: int | None, message: str) -> Refusal | None:
    """The deliberate refusal an error answer is (None: not a refusal at all).

    ``status`` is the HTTP status, or a streamed error event's ``code``. A known
    body names its state whatever the status it came with (vLLM has moved some
    between releases); an unknown body is a refusal only with a refusal status
    and some words (an empty 503 says nothing on purpose: it stays an HTTP failure).
    """
    known = known_refusal(message)
    if known is not None:
        return known
    if status in REFUSAL_STATUSES and message.strip():
        return Refusal.UNKNOWN
    return None


def engine_dead(message: str) -> bool:
    """Whether an error's message is vLLM's EngineDeadError, in any release's words."""
    return message.lstrip().startswith(ENGINE_DEAD_MESSAGES)


@dataclass(frozen=True, slots=True)
class RefusalSeen:
    """The latest run of one deliberate refusal, as the evidence carries it per state.

    ``since`` is when the run began: the send of the first canary refused so
    after the last one that succeeded (a success ends every run; another
    failure does not). ``at`` is when the latest one was answered, ``count``
    how many in the run, ``message`` the latest body's message (capped and
    scrubbed of the API key, as every canary detail), ``status`` its HTTP
    status or streamed ``code``, ``source`` where it was seen (a canary kind's
    name, or a path such as ``/metrics``), ``engine`` the data-parallel engine
    the canary was aimed at (None: unaimed).
    """

    refusal: Refusal
    since: float
    at: float
    count: int = 1
    status: int | None = None
    message: str = ""
    source: str = ""
    engine: int | None = None
