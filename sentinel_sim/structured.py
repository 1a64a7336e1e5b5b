"""Structured outputs: find the constraint a request carries and build a reply that meets it.

vLLM 0.32 takes a JSON schema from ``response_format`` (``json_schema`` or
``json_object``) or from ``structured_outputs`` (``json``, ``json_object``,
``choice``); the ``guided_json`` family of fields was removed and is ignored,
leaving the output unconstrained. The simulated model does not sample: it
writes the simplest instance of the schema (the first ``enum`` value, the
``const``, every listed property). Constructs it cannot satisfy in general
(``pattern``, ``format``, ``not``) fall back to a plain value; the schema is
then best-effort, which the tests avoid.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema

JSON_OBJECT_REPLY: dict[str, Any] = {"answer": "ok"}


@dataclass(frozen=True, slots=True)
class Constraint:
    """What the reply must be: a JSON schema, any JSON object, or one of some strings."""

    kind: str  # "json_schema" | "json_object" | "choice"
    schema: Mapping[str, Any] | None = None
    choices: tuple[str, ...] = ()

    def reply(self) -> str:
        if self.kind == "choice":
            return self.choices[0] if self.choices else ""
        if self.kind == "json_object":
            return json.dumps(JSON_OBJECT_REPLY)
        return json.dumps(instance_for(self.schema or {}, self.schema or {}))

    def broken_reply(self) -> str:
        """A well-formed JSON reply that does not meet the constraint (the garbage fault)."""
        candidates: list[Any] = [12345, "garbage", None, [], {"garbage": True}, True, 0.5]
        if self.kind == "json_object":
            return json.dumps("garbage")
        if self.kind == "choice":
            return json.dumps({"garbage": True})
        for candidate in candidates:
            try:
                jsonschema.validate(candidate, dict(self.schema or {}))
            except jsonschema.ValidationError:
                return json.dumps(candidate)
            except jsonschema.SchemaError:
                break
        return json.dumps({"garbage": True})


class ConstraintError(ValueError):
    """A structured-output request vLLM would answer with 400."""


def constraint_of(body: Mapping[str, Any]) -> Constraint | None:
    """The constraint in a chat or completions body, or None for unconstrained output."""
    response_format = body.get("response_format")
    structured = body.get("structured_outputs")
    if isinstance(response_format, Mapping):
        kind = response_format.get("type")
        if kind == "json_schema":
            spec = response_format.get("json_schema")
            if not isinstance(spec, Mapping):
                raise ConstraintError("response_format.json_schema is required")
            schema = spec.get("schema", spec.get("json_schema", {}))
            return Constraint("json_schema", _schema(schema))
        if kind == "json_object":
            return Constraint("json_object")
        if kind not in (None, "text"):
            raise ConstraintError(f"unsupported response_format type {kind!r}")
    if isinstance(structured, Mapping):
        if structured.get("json") is not None:
            return Constraint("json_schema", _schema(structured["json"]))
        if structured.get("json_object"):
            return Constraint("json_object")
        choice = structured.get("choice")
        if isinstance(choice, list) and choice:
            return Constraint("choice", choices=tuple(str(c) for c in choice))
    return None


def _schema(value: Any) -> Mapping[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConstraintError(f"invalid JSON schema: {exc}") from None
    if not isinstance(value, Mapping):
        raise ConstraintError("the JSON schema must be an object")
    try:
        jsonschema.validators.validator_for(value).check_schema(dict(value))
    except jsonschema.SchemaError as exc:
        raise ConstraintError(f"invalid JSON schema: {exc.message}") from None
    return value


def _resolve(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return schema
    node: Any = root
    for part in ref[2:].split("/"):
        if not isinstance(node, Mapping) or part not in node:
            return {}
        node = node[part]
    return node if isinstance(node, Mapping) else {}


def instance_for(schema: Mapping[str, Any] | bool, root: Mapping[str, Any], depth: int = 0) -> Any:
    """The simplest value that validates against ``schema`` (best effort past ``depth`` 16)."""
    if isinstance(schema, bool) or depth > 16:
        return None
    schema = _resolve(schema, root)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return instance_for(options[0], root, depth + 1)
    if isinstance(schema.get("allOf"), list) and schema["allOf"]:
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            merged.update(_resolve(part, root) if isinstance(part, Mapping) else {})
        merged.update({k: v for k, v in schema.items() if k != "allOf"})
        return instance_for(merged, root, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), kind[0] if kind else None)
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    if kind == "object":
        properties = schema.get("properties") or {}
        return {
            name: instance_for(sub, root, depth + 1)
            for name, sub in properties.items()
            if isinstance(sub, Mapping | bool)
        }
    if kind == "array":
        count = max(int(schema.get("minItems", 1)), 1)
        if "maxItems" in schema:
            count = min(count, int(schema["maxItems"]))
        prefix = schema.get("prefixItems")
        if isinstance(prefix, list) and prefix:
            return [instance_for(item, root, depth + 1) for item in prefix]
        items = schema.get("items", {})
        return [instance_for(items, root, depth + 1) for _ in range(count)]
    if kind == "integer":
        return int(_number(schema, integer=True))
    if kind == "number":
        return _number(schema, integer=False)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return _string(schema)


def _number(schema: Mapping[str, Any], *, integer: bool) -> float:
    low = schema.get("minimum")
    exclusive_low = schema.get("exclusiveMinimum")
    high = schema.get("maximum")
    value = 1.0
    if isinstance(low, int | float):
        value = float(low)
    if isinstance(exclusive_low, int | float):
        value = float(exclusive_low) + 1.0
    if isinstance(high, int | float) and value > high:
        value = float(high)
    return float(int(value)) if integer else value


def _string(schema: Mapping[str, Any]) -> str:
    low = int(schema.get("minLength", 0))
    high = schema.get("maxLength")
    text = "sim"
    if len(text) < low:
        text = text + "x" * (low - len(text))
    if isinstance(high, int):
        text = text[:high]
    return text
