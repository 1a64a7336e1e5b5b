"""The structured-output canary: exercises grammar compilation with a schema no cache has seen.

vLLM caches compiled grammars by schema, so the schema carries a nonce (the
``{nonce}`` placeholder, e.g. an enum value ``ok-{nonce}``) and every run asks
for a grammar that must be compiled afresh. A top-level string enum keeps the
canary cheap and works on random-weight models: the only valid reply is the
nonce itself, which a model cannot produce by chance, so a valid reply also
proves the constraint was applied.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators

from sentinel.canary.protocol import (
    CHAT_ENDPOINT,
    COMPLETIONS_ENDPOINT,
    OK,
    CanaryRequest,
    Judgement,
    Reply,
    base_body,
)
from sentinel.canary.result import CanaryKind, Reason

if TYPE_CHECKING:
    from sentinel.catalog import CanarySpec

NONCE_PLACEHOLDER = "{nonce}"
RESPONSE_FORMAT_NAME = "sentinel_canary"


def fill_nonce(value: Any, nonce: str) -> Any:
    """Replace every ``{nonce}`` in the strings (keys and values) of a JSON document."""
    if isinstance(value, str):
        return value.replace(NONCE_PLACEHOLDER, nonce)
    if isinstance(value, Mapping):
        return {fill_nonce(k, nonce): fill_nonce(v, nonce) for k, v in value.items()}
    if isinstance(value, list):
        return [fill_nonce(v, nonce) for v in value]
    return value


def has_nonce(value: Any) -> bool:
    """Whether a JSON document mentions the placeholder anywhere."""
    if isinstance(value, str):
        return NONCE_PLACEHOLDER in value
    if isinstance(value, Mapping):
        return any(has_nonce(k) or has_nonce(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_nonce(v) for v in value)
    return False


class StructuredCanary:
    """Sends ``response_format: json_schema`` and validates the reply against the schema sent.

    ``response_format`` rather than vLLM's removed ``guided_json``: the old field
    is now accepted silently with unconstrained output, which would validate
    nothing.
    """

    kind = CanaryKind.STRUCTURED
    spec_fields = frozenset({"schema"})
    endpoints = frozenset({CHAT_ENDPOINT, COMPLETIONS_ENDPOINT})

    def build(self, spec: CanarySpec, *, model: str, nonce: str) -> CanaryRequest:
        assert spec.schema is not None, "the catalog requires a schema for structured canaries"
        schema: dict[str, Any] = fill_nonce(spec.schema, nonce)
        body = base_body(spec, model=model)
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": RESPONSE_FORMAT_NAME, "schema": schema},
        }
        return CanaryRequest(body=body, nonce=nonce, schema=schema)

    def judge(
        self, sent: CanaryRequest, reply: Reply, *, baseline_prompt_tokens: int | None
    ) -> Judgement:
        if not reply.text:
            finish = reply.finish_reason
            return Judgement(Reason.EMPTY, f"no generated text (finish_reason {finish!r})")
        try:
            value = json.loads(reply.text)
        except ValueError:
            return Judgement(
                Reason.SCHEMA,
                f"reply is not JSON (finish_reason {reply.finish_reason!r}): {reply.text[:80]!r}",
            )
        schema = sent.schema or {}
        validator = jsonschema.validators.validator_for(schema)(schema)
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
        if error is not None:
            problem = f"reply does not match the schema sent: {error.message}"
            return Judgement(Reason.SCHEMA, problem)
        return OK

    def rejection(self, status: int, message: str) -> Reason | None:
        return None


CANARY = StructuredCanary()
