"""The generated references match the code: a setting or metric added without them fails."""

from __future__ import annotations

import pytest

from sentinel.config.reference import DOCS, HELP, REFERENCES, _field_comments
from sentinel.config.settings import Settings


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_reference_is_current(name: str) -> None:
    assert (DOCS / name).read_text(encoding="utf-8") == REFERENCES[name](), (
        "regenerate: .venv/bin/python -m sentinel.config.reference"
    )


def test_every_setting_says_what_it_is_for() -> None:
    comments = _field_comments(Settings)
    missing = [n for n in Settings.model_fields if not (comments.get(n) or HELP.get(n))]
    assert missing == []


def test_the_example_configuration_is_valid() -> None:
    from sentinel.config.loader import load_settings

    example = DOCS / "sentinel.example.yaml"
    settings = load_settings(example, env={}, flags={})
    assert settings.enforce is False  # the example rolls out observe-only
