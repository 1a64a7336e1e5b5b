"""Every setting is a flag of ``sentinel run``, as docs/configuration.md says (issue 31, item 6)."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sentinel.cli import build_parser, settings_from_args
from sentinel.config.loader import ConfigError
from sentinel.config.settings import Settings

DOCS = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"


@pytest.fixture(autouse=True)
def no_sentinel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("SENTINEL_"):
            monkeypatch.delenv(name)


def run_settings(*argv: str) -> Settings:
    return settings_from_args(build_parser().parse_args(["run", *argv]))


def test_every_documented_flag_is_accepted() -> None:
    documented = re.findall(r"^\| `[a-z_]+` \| `(--[a-z-]+)` \|", DOCS.read_text(), re.MULTILINE)
    assert len(documented) == len(Settings.model_fields)
    (commands,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    run = commands.choices["run"]
    accepted = {option for action in run._actions for option in action.option_strings}
    assert [flag for flag in documented if flag not in accepted] == []


def test_generated_flags_reach_the_settings() -> None:
    settings = run_settings(
        "--hang-window",
        "20",
        "--broken-window",
        "90",
        "--diagnostics",
        "false",
        "--engine-policy",
        "alert",
        "--canaries",
        "{text: {interval: 3}}",
        "--restart-budget",
        "{enabled: true, slots: 2}",
    )
    assert settings.hang_window == 20.0
    assert settings.broken_window == 90.0
    assert settings.diagnostics is False
    assert settings.engine_policy.value == "alert"
    assert settings.canaries["text"].interval == 3.0
    assert (settings.restart_budget.enabled, settings.restart_budget.slots) == (True, 2)


def test_a_bad_generated_flag_is_blamed_by_name() -> None:
    with pytest.raises(ConfigError, match="flag --hang-window"):
        run_settings("--hang-window", "3")
    with pytest.raises(ConfigError, match="flag --canaries: expected a mapping"):
        run_settings("--canaries", "[1, 2]")


def test_the_daemon_parses_alike_without_keeping_the_other_commands_resident() -> None:
    argv = ["run", "--target", "http://127.0.0.1:8000", "--scrape-interval", "3", "--enforce", "no"]
    assert build_parser(only_run=True).parse_args(argv) == build_parser().parse_args(argv)
    # A fresh interpreter: `sentinel run` imports none of the other commands' modules.
    probe = (
        "import sys; from sentinel.cli import build_parser; build_parser(only_run=True); "
        "print(sorted(m for m in sys.modules if m.startswith(("
        "'sentinel.exporter', 'sentinel.commands.', 'sentinel.diagnostics.doctor'))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
