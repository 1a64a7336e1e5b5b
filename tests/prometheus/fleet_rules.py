"""Test support for fleet monitoring: the shipped discovery and rules, loaded and reshaped.

Owns reading ``manifests/fleet/prometheus``: the rule groups of fleet-rules.yaml
(the one source; prometheusrule.yaml is rendered from it here), the scrape job of
scrape-config.yaml and its operator twin, and the test variants made from them
(durations scaled down, the pod discovery swapped for file_sd). Rebuild the
generated PrometheusRule with::

    .venv/bin/python -m tests.prometheus.fleet_rules
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
FLEET = ROOT / "manifests" / "fleet"
FLEET_PROMETHEUS = FLEET / "prometheus"
RULES = FLEET_PROMETHEUS / "fleet-rules.yaml"
PROMETHEUS_RULE = FLEET_PROMETHEUS / "prometheusrule.yaml"
SCRAPE_CONFIG = FLEET_PROMETHEUS / "scrape-config.yaml"
SCRAPECONFIG_CRD = FLEET_PROMETHEUS / "scrapeconfig.yaml"
EXPORTER_CONFIG = FLEET / "exporter.yaml"
HERE = Path(__file__).resolve().parent
RULE_TESTS = HERE / "fleet_rules_test.yml"

# The exporter's Service address, as the discovery rewrites __address__ to it.
EXPORTER_ADDRESS = "sentinel-exporter.monitoring.svc:9116"

_HEADER = """\
# GENERATED from fleet-rules.yaml by `.venv/bin/python -m tests.prometheus.fleet_rules`;
# edit that file, not this one. The fleet rules for clusters running the Prometheus
# Operator (docs/fleet.md lists them); tests/prometheus/test_fleet_rules.py checks
# that this file is current.
"""


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["groups"]
    return groups


def rules() -> list[dict[str, Any]]:
    return [rule for group in rule_groups() for rule in group["rules"]]


def render_prometheusrule() -> str:
    document = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "sentinel-fleet",
            "labels": {"app.kubernetes.io/name": "sentinel-exporter"},
        },
        "spec": {"groups": rule_groups()},
    }
    return _HEADER + yaml.dump(
        document, Dumper=_BlockDumper, sort_keys=False, width=100, allow_unicode=True
    )


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (the rule expressions) as ``|`` blocks, as in the source."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _represent_str)


_DURATION = re.compile(r"(\d+)([smhd])")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def scale_duration(duration: str, factor: float) -> str:
    """A simple Prometheus duration (``10m``) times ``factor``, in whole seconds (at least 1)."""
    match = _DURATION.fullmatch(duration)
    assert match is not None, f"not a simple duration: {duration!r}"
    seconds = int(match[1]) * _SECONDS[match[2]] * factor
    return f"{max(1, round(seconds))}s"


def scaled_groups(factor: float, interval: str) -> list[dict[str, Any]]:
    """The shipped groups with every ``for`` and range window times ``factor``, evaluated
    every ``interval``.

    Nothing else changes: thresholds, matchers and label handling stay as shipped.
    """
    groups = rule_groups()
    for group in groups:
        group["interval"] = interval
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = scale_duration(rule["for"], factor)
            windows = re.findall(r"\[[^\]]*\]", rule["expr"])
            assert all(re.fullmatch(r"\[\d+[smhd]:?\]", w) for w in windows), windows
            rule["expr"] = re.sub(
                r"\[(\d+[smhd])(:?)\]",
                lambda m: f"[{scale_duration(m[1], factor)}{m[2]}]",
                rule["expr"],
            )
    return groups


def scrape_job() -> dict[str, Any]:
    """The one job of scrape-config.yaml."""
    (job,) = yaml.safe_load(SCRAPE_CONFIG.read_text())["scrape_configs"]
    return dict(job)


def file_sd_job(sd_file: Path, exporter: str, interval: str, timeout: str) -> dict[str, Any]:
    """The shipped job with file_sd in place of pod discovery and ``exporter`` as its address.

    The relabelling is the shipped one; only the replacement naming the
    exporter's Service changes, so Prometheus connects to the test's exporter.
    """
    job = copy.deepcopy(scrape_job())
    del job["kubernetes_sd_configs"]
    job["file_sd_configs"] = [{"files": [str(sd_file)], "refresh_interval": "1s"}]
    job["scrape_interval"], job["scrape_timeout"] = interval, timeout
    rewritten = [r for r in job["relabel_configs"] if r.get("target_label") == "__address__"]
    assert [r.get("replacement") for r in rewritten] == [EXPORTER_ADDRESS], rewritten
    rewritten[0]["replacement"] = exporter
    return job


def pod_labels(pool: str, model: str, namespace: str, pod: str) -> dict[str, str]:
    """The meta labels Kubernetes pod discovery gives a running vLLM pod's API port."""
    return {
        "__meta_kubernetes_pod_label_app_kubernetes_io_name": "vllm",
        "__meta_kubernetes_pod_label_sentinel_dev_pool": pool,
        "__meta_kubernetes_pod_label_sentinel_dev_model": model,
        "__meta_kubernetes_pod_container_port_name": "http",
        "__meta_kubernetes_pod_phase": "Running",
        "__meta_kubernetes_namespace": namespace,
        "__meta_kubernetes_pod_name": pod,
    }


def _main(argv: list[str]) -> int:
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    PROMETHEUS_RULE.write_text(render_prometheusrule())
    print(f"wrote {PROMETHEUS_RULE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
