"""A real Prometheus scrapes a live sentinel through a simulated hang.

Prometheus runs with a scratch data directory and a scrape config equivalent to
the PodMonitor's (same path, the namespace/pod/container labels the operator
adds), scraping and evaluating every second. The rules are the PrometheusRule's
in a copy with time shortened: every ``for`` becomes a few seconds and every
range window a quarter minute, so "fires during the hang, resolves after it"
happens within the test instead of five minutes later.

It checks what an operator relies on: every Grafana panel's query returns at
least one series, every rule evaluates without error, and SentinelHangDetected
goes firing while the simulator's engine hangs and resolves after it recovers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sentinel_sim.control import SimControl
from sentinel_sim.launch import SimProcess
from tests.prometheus.servers import (
    DASHBOARD,
    PODMONITOR,
    Server,
    api,
    chat,
    poll,
    prometheus_server,
    rule_groups,
    sentinel_server,
    tool,
    write_rules,
)

NAMESPACE, POD = "llm", "vllm-0"
SHORT_FOR = "2s"
SHORT_RANGE = "[15s]"
# What Grafana substitutes for the dashboard's variables: every namespace and
# pod, and a rate window of four 1 s scrapes (Grafana's $__rate_interval floor).
GRAFANA_VARIABLES = {"$namespace": ".*", "$pod": ".*", "$__rate_interval": "5s"}
HANG_ALERT = "SentinelHangDetected"


def shortened_rules() -> list[dict[str, Any]]:
    groups = rule_groups()
    for group in groups:
        group["interval"] = "1s"
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = SHORT_FOR
            rule["expr"] = re.sub(r"\[\d+[smhd]\]", SHORT_RANGE, rule["expr"])
    return groups


def scrape_config(sentinel: Server) -> dict[str, Any]:
    """A static scrape equivalent to the PodMonitor's endpoint, at a 1 s interval."""
    endpoint = yaml.safe_load(PODMONITOR.read_text())["spec"]["podMetricsEndpoints"][0]
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": ["rules.yml"],
        "scrape_configs": [
            {
                "job_name": f"{NAMESPACE}/sentinel",
                "metrics_path": endpoint["path"],
                "static_configs": [
                    {
                        "targets": [sentinel.url.removeprefix("http://")],
                        "labels": {
                            "namespace": NAMESPACE,
                            "pod": POD,
                            "container": "sentinel",
                            "endpoint": endpoint["port"],
                        },
                    }
                ],
            }
        ],
    }


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target of every panel, Grafana variables filled in."""

    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in items:
            yield panel
            yield from panels(panel.get("panels", []))

    queries = []
    for panel in panels(json.loads(DASHBOARD.read_text())["panels"]):
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            queries.append((panel["title"], expr))
    return queries


def firing(prometheus: Server, name: str) -> bool:
    alerts = api(prometheus, "/api/v1/alerts")["alerts"]
    return any(a["labels"]["alertname"] == name and a["state"] == "firing" for a in alerts)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[SimProcess, Server, Server]]:
    tool("prometheus")
    with (
        SimProcess(scheduling_policy="priority") as sim,
        sentinel_server(sim.base_url, tmp_path) as sentinel,
    ):
        write_rules(tmp_path / "rules.yml", shortened_rules())
        with prometheus_server(scrape_config(sentinel), tmp_path) as prometheus:
            yield sim, sentinel, prometheus


def test_panels_return_data_and_the_hang_alert_fires_and_resolves(
    stack: tuple[SimProcess, Server, Server],
) -> None:
    sim, sentinel, prometheus = stack
    queries = panel_queries()
    assert queries, "the dashboard has no queries"

    def empty_panels() -> list[str]:
        return [
            title for title, q in queries if not api(prometheus, "/api/v1/query", query=q)["result"]
        ]

    with httpx.Client(timeout=5.0) as client:
        # Real traffic while healthy, so sentinel sees progress that is not its own.
        def all_panels_have_data() -> bool | None:
            chat(sim.base_url, client)
            return True if not empty_panels() else None

        try:
            poll(all_panels_have_data, 60.0, "every dashboard panel returns a series", 0.5)
        except AssertionError as error:
            raise AssertionError(f"{error}; empty: {empty_panels()}") from None

    # The dashboard's variables list what the scrape labels say.
    namespaces = api(
        prometheus, "/api/v1/label/namespace/values", **{"match[]": "sentinel_enforce"}
    )
    assert namespaces == [NAMESPACE]
    assert not firing(prometheus, HANG_ALERT), "a hang alert on a healthy server"

    with SimControl(sim.control_url) as control:
        control.set_fault("engine_hang")
        poll(lambda: firing(prometheus, HANG_ALERT) or None, 60.0, f"{HANG_ALERT} firing")
        hangs = api(prometheus, "/api/v1/query", query="sentinel_hang_detections_total > 0")
        assert {s["metric"]["kind"] for s in hangs["result"]} >= {"engine"}
        assert sentinel.alive()
        control.clear_all()

    poll(lambda: (not firing(prometheus, HANG_ALERT)) or None, 60.0, f"{HANG_ALERT} resolved")

    # Every rule was evaluated against the live series without an error.
    rules = [r for g in api(prometheus, "/api/v1/rules")["groups"] for r in g["rules"]]
    assert len(rules) == sum(len(g["rules"]) for g in rule_groups())
    broken = {r["name"]: r.get("lastError") for r in rules if r["health"] != "ok"}
    assert broken == {}
