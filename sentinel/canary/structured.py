"""The structured-output canary: exercises grammar compilation with a schema no cache has seen.

vLLM caches compiled grammars by schema, so the schema carries a nonce (the
``{nonce}`` placeholder, e.g. an enum value ``ok-{nonce}``) and every run asks
for a grammar that must be compiled afresh. A top-level string enum keeps the
canary cheap and works on random-weight models: the only valid reply is the
nonce itself, which a model cannot produce by chance, so a valid reply also
proves the constraint was applied.

Behind a reasoning parser (``--reasoning-parser``) vLLM applies the grammar
only after the model's reasoning ends. Every chat canary asks for no thinking
(``enable_thinking: false``), but not every chat template honours it, so on
such a server this kind cannot be validated: it disables itself with a warning
(:meth:`StructuredCanary.unvalidatable`) unless its spec says ``reasoning:
keep``. A kept canary whose reply is only reasoning is INCONCLUSIVE: the
grammar was never exercised.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from importlib.resources.abc import Traversable
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators

from sentinel.canary.capability import missing_endpoint, refuses_capability
from sentinel.canary.protocol import (
    OK,
    CanaryRequest,
    Judgement,
    KindDefaults,
    PathKind,
    Reply,
    ServerFacts,
    base_body,
    nothing_generated,
    thought_cut_short,
)
from sentinel.canary.result import Reason
from sentinel.canary.spec import (
    CHAT_ENDPOINT,
    COMPLETIONS_ENDPOINT,
    STRUCTURED,
    CanarySpec,
    SpecFieldError,
    fill_nonce,
    has_nonce,
)

RESPONSE_FORMAT_NAME = "sentinel_canary"
# What a server without structured outputs names when it refuses them.
FORMAT_SUBJECT = re.compile(r"response_format|json_schema|structured outputs?", re.IGNORECASE)


class StructuredCanary(PathKind):
    """Sends ``response_format: json_schema`` and validates the reply against the schema sent.

    ``response_format`` rather than vLLM's removed ``guided_json``: the old field
    is now accepted silently with unconstrained output, which would validate
    nothing. No traffic counter: vLLM counts no structured-output completions.
    """

    kind = STRUCTURED
    # A server that says it has no structured outputs is no broken server: skipped.
    unsupported_skipped = True
    defaults = KindDefaults(deadline=10.0, interval=10.0)
    spec_fields = frozenset({"schema"})
    endpoints = frozenset({CHAT_ENDPOINT, COMPLETIONS_ENDPOINT})

    def load_fields(self, given: Mapping[str, Any], assets: Traversable) -> Mapping[str, Any]:
        """The schema must carry the nonce and, filled in, be a valid JSON schema."""
        schema = given["schema"]
        if not has_nonce(schema):
            raise SpecFieldError(
                "schema",
                "must contain the {nonce} placeholder (e.g. an enum value 'ok-{nonce}'), "
                "or vLLM's grammar cache hides a compile hang",
            )
        filled = fill_nonce(schema, "0" * 8)
        try:
            jsonschema.validators.validator_for(filled).check_schema(filled)
        except jsonschema.exceptions.SchemaError as exc:
            raise SpecFieldError("schema", f"not a valid JSON schema: {exc.message}") from None
        return {"schema": schema}

    def build(self, spec: CanarySpec, *, model: str, nonce: str) -> CanaryRequest:
        assert spec.schema is not None, "the catalog requires a schema for structured canaries"
        schema: dict[str, Any] = fill_nonce(spec.schema, nonce)
        body = base_body(spec, model=model, nonce=nonce)
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": RESPONSE_FORMAT_NAME, "schema": schema},
        }
        return CanaryRequest(body=body, nonce=nonce, schema=schema)

    def judge(
        self, sent: CanaryRequest, reply: Reply, *, baseline_prompt_tokens: int | None
    ) -> Judgement:
        if not reply.text or reply.completion_tokens == 0:
            if reply.reasoning_only and reply.completion_tokens != 0:
                return thought_cut_short(reply) or Judgement(
                    Reason.INCONCLUSIVE,
                    f"only reasoning generated (finish_reason {reply.finish_reason!r}): "
                    "the grammar applies to the answer after reasoning, which never came",
                )
            return nothing_generated(reply) or Judgement(
                Reason.EMPTY, f"no generated text (finish_reason {reply.finish_reason!r})"
            )
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
        """UNSUPPORTED: ``response_format`` refused in so many words, or no such endpoint.

        Only the field's own names count: vLLM's "The provided JSON schema
        contains features not supported by xgrammar" is a server that does
        structured outputs and refuses this schema, a failure to see.
        """
        if refuses_capability(status, message, FORMAT_SUBJECT) or missing_endpoint(status, message):
            return Reason.UNSUPPORTED
        return None

    def unvalidatable(self, spec: CanarySpec, facts: ServerFacts) -> str | None:
        if facts.reasoning_parser is None or spec.reasoning == "keep":
            return None
        return (
            f"vLLM runs --reasoning-parser {facts.reasoning_parser}: the schema's grammar "
            "applies only after reasoning ends, which enable_thinking=false cannot guarantee "
            "for every chat template; set 'reasoning: keep' in the canary's spec to run it "
            "anyway"
        )


CANARY = StructuredCanary()
