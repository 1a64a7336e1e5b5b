"""The generated references match the code: a setting or metric added without them fails."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from sentinel.config.settings import CanaryOverride, RestartBudget, Settings
from sentinel.knob import help_of, span_of
from sentinel.reference import DOCS, REFERENCES

MODELS: tuple[type[BaseModel], ...] = (Settings, RestartBudget, CanaryOverride)


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_reference_is_current(name: str) -> None:
    assert (DOCS / name).read_text(encoding="utf-8") == REFERENCES[name](), (
        "regenerate: .venv/bin/python -m sentinel.reference"
    )


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_setting_says_what_it_is_for(model: type[BaseModel]) -> None:
    missing = [name for name in model.model_fields if not help_of(model, name).strip()]
    assert missing == []


def _numeric(annotation: object) -> bool:
    """A float or int field, optional or not (a bool is a switch, not a number)."""
    kinds = getattr(annotation, "__args__", (annotation,))
    return any(kind in (float, int) for kind in kinds)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_number_has_a_span(model: type[BaseModel]) -> None:
    unranged = [
        name
        for name, field in model.model_fields.items()
        if _numeric(field.annotation) and span_of(model, name) is None
    ]
    assert unranged == []


def test_the_example_configuration_is_valid() -> None:
    from sentinel.config.loader import load_settings

    example = DOCS / "sentinel.example.yaml"
    settings = load_settings(example, env={}, flags={})
    assert settings.enforce is False  # the example rolls out observe-only
