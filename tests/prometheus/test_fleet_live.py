"""A real Prometheus watches five simulated vLLM replicas through `sentinel exporter`.

One pool of five replicas: three healthy, one five times slower per token
(``decode_tps``), one whose engine hangs (``engine_hang``: /health still 200,
no token ever). Prometheus discovers them through file_sd with the meta labels
Kubernetes pod discovery would give, relabelled by the job shipped in
manifests/fleet/prometheus/scrape-config.yaml (only the exporter's address is
swapped for the test's), and evaluates the shipped fleet rules with every
``for`` and window scaled down thirty-fold (10m becomes 20 s), scraping every
2 s.

Through Prometheus's HTTP API it checks what the rules promise: the targets
carry instance, pool and model as the relabelling says; probe_success is 0 for
the hung replica only; SentinelReplicaSlow fires for the slow one only and
SentinelProbeFailing for the hung one only; SentinelPoolWideFailure stays
quiet (one failing replica of five); every recording rule returns data and
every rule evaluates without error.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from chaos.ports import free_port
from sentinel_sim.launch import SimProcess
from tests.prometheus.fleet_rules import file_sd_job, pod_labels, rule_groups, scaled_groups
from tests.prometheus.servers import Server, api, poll, prometheus_server, tool

NAMESPACE, POOL, MODEL = "inference", "chat", "qwen"
DECODE_TPS = 40.0
SLOW_FACTOR = 5.0
SCALE = 1 / 30  # 10m -> 20 s, 5m -> 10 s
SCRAPE_INTERVAL = "2s"
JOB = "sentinel-exporter"


@dataclass(frozen=True)
class Fleet:
    prometheus: Server
    exporter: Server
    replicas: dict[str, str]  # pod name -> host:port (the instance label)

    def instance(self, pod: str) -> str:
        return self.replicas[pod]


def exporter_server(workdir: Path) -> Server:
    config = {
        "allow": {"cidrs": ["127.0.0.0/8"]},
        "modules": {"text": {"kinds": ["text"], "timeout": 10, "metrics": True}},
    }
    path = workdir / "exporter.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    command = [sys.executable, "-m", "sentinel", "exporter", "--config", str(path)]
    command += ["--listen", f"127.0.0.1:{port}", "--log-format", "json"]
    return Server("sentinel exporter", command, port, workdir / "exporter.log", "/-/healthy")


def prometheus_config(workdir: Path, exporter: Server, replicas: dict[str, str]) -> dict[str, Any]:
    sd_file = workdir / "targets.json"
    sd_file.write_text(
        json.dumps(
            [
                {"targets": [address], "labels": pod_labels(POOL, MODEL, NAMESPACE, pod)}
                for pod, address in replicas.items()
            ]
        )
    )
    (workdir / "rules.yml").write_text(yaml.safe_dump({"groups": scaled_groups(SCALE, "1s")}))
    job = file_sd_job(
        sd_file, exporter.url.removeprefix("http://"), SCRAPE_INTERVAL, SCRAPE_INTERVAL
    )
    return {
        "global": {"evaluation_interval": "1s"},
        "rule_files": ["rules.yml"],
        "scrape_configs": [job],
    }


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tool("prometheus")
    tmp_path = tmp_path_factory.mktemp("fleet")
    slow_tps = DECODE_TPS / SLOW_FACTOR
    speeds = {"vllm-0": DECODE_TPS, "vllm-1": DECODE_TPS, "vllm-2": DECODE_TPS}
    speeds |= {"vllm-slow": slow_tps, "vllm-hung": DECODE_TPS}
    with ExitStack() as stack:
        sims = {
            pod: stack.enter_context(SimProcess(decode_tps=tps, scheduling_policy="priority"))
            for pod, tps in speeds.items()
        }
        sims["vllm-hung"].control.set_fault("engine_hang")
        replicas = {pod: sim.base_url.removeprefix("http://") for pod, sim in sims.items()}
        exporter = stack.enter_context(exporter_server(tmp_path))
        config = prometheus_config(tmp_path, exporter, replicas)
        prometheus = stack.enter_context(prometheus_server(config, tmp_path))
        yield Fleet(prometheus, exporter, replicas)


def query(fleet: Fleet, expr: str) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = api(fleet.prometheus, "/api/v1/query", query=expr)["result"]
    return result


def alerting(fleet: Fleet, name: str, state: str = "firing") -> set[str]:
    """The instance (or pool) labels of ``name``'s alerts in ``state``."""
    alerts = api(fleet.prometheus, "/api/v1/alerts")["alerts"]
    return {
        a["labels"].get("instance", a["labels"].get("pool", ""))
        for a in alerts
        if a["labels"]["alertname"] == name and a["state"] == state
    }


def test_targets_carry_the_pod_labels_through_the_shipped_relabelling(fleet: Fleet) -> None:
    def active() -> list[dict[str, Any]] | None:
        targets = api(fleet.prometheus, "/api/v1/targets")["activeTargets"]
        return targets if len(targets) == len(fleet.replicas) else None

    targets = poll(active, 30.0, "every replica discovered")
    exporter = fleet.exporter.url.removeprefix("http://")
    for target in targets:
        labels = target["labels"]
        pod = labels["pod"]
        assert labels == {
            "instance": fleet.instance(pod),
            "job": JOB,
            "pool": POOL,
            "model": MODEL,
            "namespace": NAMESPACE,
            "pod": pod,
        }
        assert target["scrapeUrl"].startswith(f"http://{exporter}/probe?"), target["scrapeUrl"]
        assert f"target={fleet.instance(pod).replace(':', '%3A')}" in target["scrapeUrl"]


def test_the_slow_and_the_hung_replica_are_told_apart(fleet: Fleet) -> None:
    slow, hung = fleet.instance("vllm-slow"), fleet.instance("vllm-hung")

    def both_alerts_firing() -> bool | None:
        fired = alerting(fleet, "SentinelReplicaSlow") and alerting(fleet, "SentinelProbeFailing")
        return True if fired else None

    poll(both_alerts_firing, 90.0, "SentinelReplicaSlow and SentinelProbeFailing firing", 0.5)
    assert alerting(fleet, "SentinelReplicaSlow") == {slow}
    assert alerting(fleet, "SentinelProbeFailing") == {hung}
    failing = {s["metric"]["instance"] for s in query(fleet, "probe_success == 0")}
    succeeding = {s["metric"]["instance"] for s in query(fleet, "probe_success == 1")}
    assert failing == {hung}
    assert succeeding == set(fleet.replicas.values()) - {hung}

    # One failing replica of five is not a pool-wide failure, not even pending.
    assert alerting(fleet, "SentinelPoolWideFailure", "firing") == set()
    assert alerting(fleet, "SentinelPoolWideFailure", "pending") == set()
    (ratio,) = query(fleet, "pool:probe_failing:ratio")
    assert float(ratio["value"][1]) == pytest.approx(0.2)

    # Every recording rule has data, and every rule evaluated without an error.
    records = [r["record"] for r in (r for g in rule_groups() for r in g["rules"]) if "record" in r]
    empty = [record for record in records if not query(fleet, record)]
    assert empty == []
    evaluated = [r for g in api(fleet.prometheus, "/api/v1/rules")["groups"] for r in g["rules"]]
    assert len(evaluated) == sum(len(g["rules"]) for g in rule_groups())
    assert {r["name"]: r.get("lastError") for r in evaluated if r["health"] != "ok"} == {}
