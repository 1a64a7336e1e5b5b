"""One declaration per setting: its default, its range with a unit, and what it is for.

A setting is a typed field of a pydantic model declared with :func:`setting`,
so its default, range and description live in one place. The config loader
checks the range (:class:`Ranged`), ``docs/configuration.md`` prints it,
``sentinel doctor`` reads the defaults from it. Every number is finite; a
ranged one outside its range is refused naming the unit, so a typo such as
``hang_window: .inf`` (liveness that can never fail) or ``api_window: 0`` (a
hang confirmed at once) never reaches the verdict.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

DAY = 86_400.0
KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB


class Span(NamedTuple):
    """The values a setting may take: ``least`` to ``most``, in ``unit``."""

    least: float
    most: float
    unit: str

    def __str__(self) -> str:
        return f"{number(self.least)}-{number(self.most)} {self.unit}"


def number(value: float) -> str:
    """``value`` for a person: a cap is read to the byte, so whole numbers are written in full.

    ``:g`` alone would print 1 GiB as ``1.07374e+09``, which is not the cap.
    """
    if math.isfinite(value) and value == int(value) and abs(value) < 1e16:
        return str(int(value))
    return f"{value:g}"


def setting(
    default: Any, help: str, span: tuple[float, float, str] | None = None, **constraints: Any
) -> Any:
    """A field's declaration: default, description and (for numbers) the span it must lie in.

    Typed ``Any`` as :func:`pydantic.Field` is, so ``hang_window: float =
    setting(15.0, ...)`` type-checks as the float it declares. ``constraints``
    are :func:`pydantic.Field`'s own (``pattern=``, or ``gt=0`` where the
    least value itself is refused), for what a closed span cannot say.
    """
    extra: dict[str, Any] = {} if span is None else {"span": list(span)}
    return Field(default=default, description=help, json_schema_extra=extra or None, **constraints)


def seconds(default: float | None, help: str, least: float, most: float) -> Any:
    """A duration setting, in seconds."""
    return setting(default, help, (least, most, "s"))


def span_of(model: type[BaseModel], name: str) -> Span | None:
    """The declared span of ``model``'s field ``name`` (None: not ranged)."""
    field = model.model_fields.get(name)
    extra = None if field is None else field.json_schema_extra
    if not isinstance(extra, dict) or "span" not in extra:
        return None
    least, most, unit = cast("list[Any]", extra["span"])
    return Span(float(least), float(most), str(unit))


def help_of(model: type[BaseModel], name: str) -> str:
    """What ``model``'s field ``name`` is for (empty when undeclared)."""
    field = model.model_fields.get(name)
    return "" if field is None or field.description is None else field.description


def check_value(value: object, span: Span | None) -> object:
    """Refuse a non-finite number anywhere, and one outside ``span``, naming the unit."""
    if isinstance(value, bool) or not isinstance(value, float | int):
        return value
    if span is None:
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number, got {value}")
        return value
    if not math.isfinite(value) or not span.least <= value <= span.most:
        least, most, unit = number(span.least), number(span.most), span.unit
        raise ValueError(
            f"must be between {least} {unit} and {most} {unit}, got {number(value)} {unit}"
        )
    return value


class Ranged(BaseModel):
    """A frozen settings model refusing unknown keys and numbers outside their declared spans.

    A subclass's inherited fields are checked too: the verdict's thresholds are
    declared with spans on plain models and only checked where a person sets them.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="after")
    @classmethod
    def _in_span(cls, value: object, info: ValidationInfo) -> object:
        return check_value(
            value, None if info.field_name is None else span_of(cls, info.field_name)
        )
