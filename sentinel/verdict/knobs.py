"""The verdict's knobs: each hang rule declares the settings it reads, typed, with its own model.

A rule's judge takes its knobs model, so it can read nothing else;
:class:`~sentinel.verdict.policy.Policy` inherits every built-in rule's
knobs, which is how each knob becomes a setting under its own name (a YAML
key, a ``SENTINEL_*`` variable, a flag) with its default, span and
description declared once (:func:`sentinel.knob.setting`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from sentinel.knob import DAY, seconds


class Knobs(BaseModel):
    """The base of every rule's knobs: frozen, strict. Spans are checked by the settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class HangWindow(Knobs):
    """The window the engine-side rules share."""

    hang_window: float = seconds(
        15.0, "Engine hang: a canary unanswered this long with no progress.", 1.0, DAY
    )
