"""The fleet rules and discovery, checked by promtool itself.

``promtool check rules`` and ``promtool test rules`` run on the shipped
manifests/fleet/prometheus/fleet-rules.yaml (fleet_rules_test.yml names it), and
``promtool check config`` on the shipped scrape-config.yaml. The Prometheus
Operator twins (prometheusrule.yaml, scrapeconfig.yaml) must say the same.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.prometheus.fleet_rules import (
    PROMETHEUS_RULE,
    RULE_TESTS,
    RULES,
    SCRAPE_CONFIG,
    SCRAPECONFIG_CRD,
    render_prometheusrule,
    rules,
    scrape_job,
)
from tests.prometheus.servers import tool

# A promtool built without Kubernetes discovery (Debian's package is) reports this
# for the shipped job; the rest of the file is then checked with file_sd in its place.
NO_KUBERNETES_SD = "field kubernetes_sd_configs not found"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("promtool"), *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_rules_pass_promtool_check() -> None:
    done = promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


def test_rules_pass_their_promtool_unit_tests() -> None:
    done = promtool("test", "rules", str(RULE_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_scrape_config_passes_promtool_check(tmp_path: Path) -> None:
    done = promtool("check", "config", str(SCRAPE_CONFIG))
    if done.returncode != 0 and NO_KUBERNETES_SD in done.stdout + done.stderr:
        job = scrape_job()
        job["file_sd_configs"] = [{"files": [str(tmp_path / "targets.json")]}]
        del job["kubernetes_sd_configs"]
        substitute = tmp_path / "scrape-config.yaml"
        substitute.write_text(yaml.safe_dump({"scrape_configs": [job]}))
        done = promtool("check", "config", str(substitute))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def _tests() -> list[dict[str, Any]]:
    tests: list[dict[str, Any]] = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    return tests


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    cases = [case for test in _tests() for case in test.get("alert_rule_test", [])]
    firing = {case["alertname"] for case in cases if case.get("exp_alerts")}
    quiet = {case["alertname"] for case in cases if not case.get("exp_alerts")}
    alerts = {rule["alert"] for rule in rules() if "alert" in rule}
    assert alerts - firing == set(), "alerts without a case that fires"
    assert alerts - quiet == set(), "alerts without a case that stays quiet"
    assert (firing | quiet) - alerts == set(), "cases for alerts the file lacks"
    for case in cases:
        for alert in case.get("exp_alerts") or []:
            assert alert.get("exp_labels", {}).get("severity"), case["alertname"]
            assert set(alert.get("exp_annotations", {})) == {"summary", "description"}, case


def test_every_recording_rule_has_a_value_check() -> None:
    checked = {
        name
        for test in _tests()
        for case in test.get("promql_expr_test", [])
        if case.get("exp_samples")
        for name in re.findall(r"[a-z_]+:[a-z_]+:[a-z_]+", case["expr"])
    }
    records = {rule["record"] for rule in rules() if "record" in rule}
    assert records - checked == set()


def test_the_prometheusrule_is_generated_from_the_rules_file() -> None:
    assert PROMETHEUS_RULE.read_text() == render_prometheusrule(), (
        "stale: run .venv/bin/python -m tests.prometheus.fleet_rules"
    )


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def test_the_scrapeconfig_resource_is_the_plain_job() -> None:
    job = scrape_job()
    spec = yaml.safe_load(SCRAPECONFIG_CRD.read_text())["spec"]
    relabelings = [{_snake(k): v for k, v in r.items()} for r in spec["relabelings"]]
    assert relabelings == job["relabel_configs"]
    assert spec["jobName"] == job["job_name"]
    assert spec["metricsPath"] == job["metrics_path"]
    assert spec["params"] == job["params"]
    assert (spec["scrapeInterval"], spec["scrapeTimeout"]) == (
        job["scrape_interval"],
        job["scrape_timeout"],
    )
    sd = [{**c, "role": c["role"].lower()} for c in spec["kubernetesSDConfigs"]]
    assert sd == job["kubernetes_sd_configs"]


@pytest.mark.parametrize("ci", ["true", ""])
def test_a_missing_tool_fails_in_ci_and_skips_elsewhere(
    ci: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", ci)
    expected = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(expected, match="make prometheus-tools"):
        tool("promtool-that-is-not-installed")
