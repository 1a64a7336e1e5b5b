"""What a server that cannot do a kind says: a capability refused in anyone's words, no endpoint.

Pure (strings in, a yes or no out), so the kinds read their refusals with it
and the catalog, which imports the kinds, stays free of I/O. Each kind names
its subject (an image, ``response_format``); these are the words around it.
"""

from __future__ import annotations

import re

# A server that cannot do what a canary asks says so in its own words; these
# are the words, in anyone's (vLLM, llama.cpp, Ollama, TGI, a gateway): the
# subject (an image, response_format) is the kind's to name. A message that
# also speaks of a broken input (a format, a failed decode, a size) is about
# the canary's bytes, not the server's capability: that stays a failure.
UNSUPPORTED_WORDS = re.compile(
    r"not supported|unsupported|(does|do|can)(n'?t| not)( yet)? (support|accept|take|handle)"
    r"|cannot (accept|take|handle|see)|not (enabled|available|allowed)"
    r"|only supports? text|text[- ]only|not an? (multimodal|multi-modal|vision)",
    re.IGNORECASE,
)
BROKEN_INPUT_WORDS = re.compile(
    r"\bformat\b|invalid|malformed|corrupt|failed to|could not|too (large|big|many)|exceed",
    re.IGNORECASE,
)
# Refusals of who asked or when, never of what: credentials, a proxy's request
# timeout, rate limits (:mod:`sentinel.record.set_aside` keeps them out too).
NOT_A_CAPABILITY = frozenset({401, 403, 407, 408, 429})
# Statuses a missing route answers with: nothing serves the path, or not that method.
NO_ROUTE_STATUSES = frozenset({404, 405})
MODEL_WORD = re.compile(r"\bmodel", re.IGNORECASE)


def refuses_capability(status: int, message: str, subject: re.Pattern[str]) -> bool:
    """A 4xx that says ``subject`` is something this server does not do.

    Not a 5xx (a server failing is no capability refused), not a 4xx about
    who asked or when (:data:`NOT_A_CAPABILITY`), and never a message that
    says nothing of the sort: both the subject and the refusal must be named.
    """
    if not 400 <= status < 500 or status in NOT_A_CAPABILITY:
        return False
    return (
        subject.search(message) is not None
        and UNSUPPORTED_WORDS.search(message) is not None
        and BROKEN_INPUT_WORDS.search(message) is None
    )


def missing_endpoint(status: int, message: str) -> bool:
    """A 404 or 405 for the path itself: the server has no such endpoint.

    A 404 that names a model is the model the canary asked for, missing
    (vLLM: "The model `x` does not exist."; Ollama: "model 'x' not found"):
    a misconfigured target, never a skip.
    """
    return status in NO_ROUTE_STATUSES and MODEL_WORD.search(message) is None
