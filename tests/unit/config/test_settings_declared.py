"""One declaration per setting: its span holds, and a refusal names where the value came from."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from sentinel.canary.catalog import apply_overrides, load_catalog
from sentinel.config.loader import ConfigError, load_settings
from sentinel.config.settings import CanaryOverride, RestartBudget, Settings
from sentinel.diagnostics.doctor import ProbeTimings, Severity, check_probe_timings
from sentinel.knob import Span, check_value, span_of
from sentinel.verdict import Policy

MODELS: tuple[type[BaseModel], ...] = (Settings, RestartBudget, CanaryOverride)
RANGED = [
    (model, name, span)
    for model in MODELS
    for name in model.model_fields
    if (span := span_of(model, name)) is not None
]
# Durations whose 0 means "off", not "at once": a zero idle window never skips a
# canary, a zero late wait never awaits a late answer.
OFF_AT_ZERO = {"idle_window", "late_wait"}


def _ids(case: tuple[type[BaseModel], str, Span]) -> str:
    return f"{case[0].__name__}.{case[1]}"


@pytest.mark.parametrize("case", RANGED, ids=_ids)
def test_a_value_outside_its_span_is_refused_naming_the_field(
    case: tuple[type[BaseModel], str, Span],
) -> None:
    model, name, span = case
    for value in (span.least - 1, span.most * 2 + 1, float("inf"), float("nan")):
        with pytest.raises(ValidationError) as info:
            model.model_validate({name: value})
        (error,) = info.value.errors()
        assert error["loc"] == (name,)


@pytest.mark.parametrize("case", RANGED, ids=_ids)
def test_the_ends_of_a_span_are_in_it(case: tuple[type[BaseModel], str, Span]) -> None:
    _, _, span = case
    assert check_value(span.least, span) == span.least
    assert check_value(span.most, span) == span.most


@pytest.mark.parametrize(
    "name",
    sorted(
        name
        for name in Settings.model_fields
        if name.endswith(("_window", "_interval", "_timeout")) and name not in OFF_AT_ZERO
    ),
)
def test_no_window_or_interval_may_be_zero(name: str) -> None:
    span = span_of(Settings, name)
    assert span is not None, f"{name} has no span"
    assert span.least > 0
    with pytest.raises(ValidationError, match=rf"{name}\n.*must be between"):
        Settings.model_validate({name: 0})


@pytest.mark.parametrize("value", [0, -1, -60.0])
def test_api_window_is_never_zero_or_negative(value: float) -> None:
    with pytest.raises(ValidationError, match=r"api_window\n.*must be between 1 s and 86400 s"):
        Settings(api_window=value)


def test_the_settings_check_spans_the_policy_does_not() -> None:
    assert Policy(hang_window=0).hang_window == 0  # the verdict's unit tests build any policy
    with pytest.raises(ValidationError, match="must be between 1 s and 86400 s, got 0 s"):
        Settings(hang_window=0)


def test_the_message_keeps_its_words_and_caps_read_in_full() -> None:
    with pytest.raises(ValueError, match=r"^must be between 1 s and 86400 s, got 0 s$"):
        check_value(0, Span(1, 86_400, "s"))
    with pytest.raises(ValueError, match=r"^must be a finite number, got inf$"):
        check_value(float("inf"), None)
    with pytest.raises(ValueError, match="and 1073741824 bytes, got 0 bytes"):
        Settings.model_validate({"metrics_max_bytes": 0})
    assert str(span_of(Settings, "metrics_max_bytes")) == "65536-1073741824 bytes"


@pytest.mark.parametrize(
    ("source", "named"),
    [("flag", "flag --hang-window"), ("env", "environment variable SENTINEL_HANG_WINDOW")],
)
def test_a_bad_value_names_its_flag_or_variable(source: str, named: str) -> None:
    env, flags = (
        ({}, {"hang_window": 0}) if source == "flag" else ({"SENTINEL_HANG_WINDOW": "0"}, {})
    )
    with pytest.raises(ConfigError) as info:
        load_settings(None, env, flags)
    assert str(info.value) == f"{named}: hang_window: Value error, " + (
        "must be between 1 s and 86400 s, got 0 s"
    )


def test_a_bad_value_names_its_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "sentinel.yaml"
    path.write_text("hang_window: 0\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_settings(path, {}, {})
    assert str(info.value) == (
        f"{path}: hang_window: Value error, must be between 1 s and 86400 s, got 0 s"
    )


def test_a_nested_value_names_its_variable_and_path() -> None:
    env = {"SENTINEL_CANARIES": "{text: {deadline: 0}}"}
    with pytest.raises(ConfigError, match=r"^environment variable SENTINEL_CANARIES: canaries"):
        load_settings(None, env, {})
    with pytest.raises(ConfigError, match=r"canaries\.text\.deadline: .*between 0\.1 s"):
        load_settings(None, env, {})


def test_a_cross_field_error_names_the_source_of_the_setting_it_is_about(tmp_path: Path) -> None:
    path = tmp_path / "sentinel.yaml"
    path.write_text("idle_window: 7\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_settings(path, {}, {"hang_window": 3})
    message = str(info.value)
    assert message.startswith("flag --hang-window: ")
    assert "hang_window must exceed two scrape intervals" in message


def test_a_window_below_a_catalog_deadline_names_its_own_source() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(None, {"SENTINEL_BROKEN_WINDOW": "5"}, {})
    assert str(info.value).startswith(
        "environment variable SENTINEL_BROKEN_WINDOW: broken_window must be at least"
    )


def test_doctor_defaults_are_the_settings_and_the_shipped_catalog() -> None:
    timings, specs = ProbeTimings(), load_catalog().enabled()
    assert timings.hang_window_s == Settings().hang_window
    assert timings.scrape_interval_s == Settings().scrape_interval
    assert timings.idle_window_s == Settings().idle_window
    assert timings.text_deadline_s == max(s.deadline for s in specs if s.kind == "text")
    assert timings.path_deadline_s == max(s.deadline for s in specs if s.kind != "text")
    assert timings.text_interval_s == max(s.interval for s in specs if s.kind == "text")
    assert timings == ProbeTimings.of(Settings(), specs)


def test_doctor_judges_the_configured_deadlines_against_the_configured_window() -> None:
    settings = Settings(hang_window=12, canaries={"structured": CanaryOverride(deadline=12)})
    specs = apply_overrides(load_catalog().enabled(), settings.canaries)
    timings = ProbeTimings.of(settings, specs)
    assert (timings.path_deadline_s, timings.hang_window_s) == (12.0, 12.0)
    bad = [c for c in check_probe_timings(timings) if c.severity is Severity.PROBLEM]
    assert [c.summary for c in bad] == ["canary deadlines (8 s, 12 s) < hang window 12 s"]
    disabled = {"structured": CanaryOverride(enabled=False), "multimodal": CanaryOverride()}
    specs = apply_overrides(load_catalog().enabled(), disabled)
    assert ProbeTimings.of(settings, specs).path_deadline_s == 10.0  # multimodal's
