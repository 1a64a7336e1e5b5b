"""The alert rules, checked and unit-tested by promtool itself.

The PrometheusRule's groups are written to a plain rules file beside copies of
the promtool test files (their ``rule_files`` name it relative to themselves),
so promtool evaluates exactly what the manifest ships.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.prometheus.servers import HERE, alert_rules, tool, write_rules

# The sidecar's rule tests; fleet_rules_test.yml is test_fleet_rules.py's.
TEST_FILES = sorted(p for p in HERE.glob("*_test.yml") if not p.name.startswith("fleet_"))


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    write_rules(tmp_path / "rules.yml")
    for test_file in TEST_FILES:
        shutil.copy(test_file, tmp_path / test_file.name)
    return tmp_path


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("promtool"), *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_rules_pass_promtool_check(rules_dir: Path) -> None:
    done = promtool("check", "rules", str(rules_dir / "rules.yml"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in done.stdout


def _cases() -> list[dict[str, Any]]:
    return [
        case
        for test_file in TEST_FILES
        for test in yaml.safe_load(test_file.read_text())["tests"]
        for case in test["alert_rule_test"]
    ]


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    firing = {case["alertname"] for case in _cases() if case.get("exp_alerts")}
    quiet = {case["alertname"] for case in _cases() if not case.get("exp_alerts")}
    alerts = {rule["alert"] for rule in alert_rules()}
    assert alerts - firing == set(), "alerts without a case that fires"
    assert alerts - quiet == set(), "alerts without a case that stays quiet"
    assert (firing | quiet) - alerts == set(), "cases for alerts the manifest lacks"


def test_firing_cases_state_labels_and_annotations() -> None:
    for case in _cases():
        for alert in case.get("exp_alerts") or []:
            assert alert.get("exp_labels", {}).get("severity"), case["alertname"]
            assert set(alert.get("exp_annotations", {})) == {"summary", "description"}, case


def test_alert_rules_pass_their_promtool_unit_tests(rules_dir: Path) -> None:
    done = promtool("test", "rules", *(str(rules_dir / f.name) for f in TEST_FILES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("SUCCESS") == len(TEST_FILES), done.stdout
