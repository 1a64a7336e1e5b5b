"""Test support: the real Prometheus tools, and a live sentinel for them to look at.

Owns what tests/prometheus shares: where promtool, prometheus and
blackbox_exporter are (``make prometheus-tools`` installs them; without them the
tests skip and say so, or fail where the ``CI`` variable is set, so a CI run
cannot pass without running them), the rules extracted from the PrometheusRule
manifest, a ``sentinel run`` process against the simulated vLLM with shortened
timings, and subprocess servers on free loopback ports that are always stopped
on exit.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import yaml

from chaos.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "manifests" / "components" / "monitoring"
PROMETHEUS_RULE = MONITORING / "prometheusrule.yaml"
DASHBOARD = MONITORING / "sentinel-dashboard.json"
PODMONITOR = MONITORING / "podmonitor.yaml"
HERE = Path(__file__).resolve().parent

INSTALL_HINT = (
    "run `make prometheus-tools` (Debian: apt-get install prometheus prometheus-blackbox-exporter)"
)

# sentinel's timings shortened as in tests/loopback/sidecar.py, so a hang is
# confirmed within seconds; passed to `sentinel run` as a YAML settings file.
FAST_SETTINGS: dict[str, Any] = {
    "scrape_interval": 0.5,
    "scrape_timeout": 2.0,
    "health_interval": 0.5,
    "process_interval": 0.5,
    "eval_interval": 0.25,
    "idle_window": 2.0,
    "hang_window": 4.0,
    "no_evidence_window": 6.0,
    "dead_grace": 1.5,
    "diagnostics": False,
    "canaries": {
        "text": {"interval": 1.0, "deadline": 2.0, "jitter": 0.0},
        "structured": {"interval": 1.0, "deadline": 2.0},
        "multimodal": {"interval": 1.0, "deadline": 2.0},
        "correctness": {"interval": 2.0, "deadline": 2.0},
    },
}


def in_ci() -> bool:
    """Whether the ``CI`` variable says this is a CI run (set, and not "0" or "false")."""
    return os.environ.get("CI", "").strip().lower() not in {"", "0", "false", "no"}


def tool(name: str) -> str:
    """The path of a Prometheus tool; else skip the test naming what to install (fail in CI)."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed: {INSTALL_HINT}"
        if in_ci():
            pytest.fail(f"{message}; CI is set, so the Prometheus tests must run", pytrace=False)
        pytest.skip(message)
    return path


def rule_groups() -> list[dict[str, Any]]:
    """The PrometheusRule's ``.spec.groups``: the body of a plain Prometheus rules file."""
    document = yaml.safe_load(PROMETHEUS_RULE.read_text())
    groups: list[dict[str, Any]] = document["spec"]["groups"]
    return groups


def alert_rules() -> list[dict[str, Any]]:
    return [rule for group in rule_groups() for rule in group["rules"] if "alert" in rule]


def write_rules(path: Path, groups: list[dict[str, Any]] | None = None) -> Path:
    path.write_text(yaml.safe_dump({"groups": rule_groups() if groups is None else groups}))
    return path


T = TypeVar("T")


def poll(probe: Callable[[], T | None], deadline: float, what: str, interval: float = 0.2) -> T:
    """Call ``probe`` until it returns something other than None; fail after ``deadline`` s."""
    end = time.monotonic() + deadline
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"not within {deadline:.0f}s: {what}")
        time.sleep(interval)  # polling with a deadline


def log_tail(path: Path, limit: int = 3000) -> str:
    return path.read_text(errors="replace")[-limit:] if path.exists() else ""


class Server:
    """A subprocess serving HTTP on a loopback port, stopped (TERM, then KILL) on exit."""

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        port: int,
        log: Path,
        ready_path: str,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self._command = list(command)
        self._ready_path = ready_path
        self._env = {**os.environ, **(env or {})}
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Server:
        with self.log.open("ab") as out:
            self._proc = subprocess.Popen(
                self._command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self._env,
            )
        try:
            poll(self._ready, 60.0, f"{self.name} ready at {self.url}{self._ready_path}")
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _ready(self) -> bool | None:
        assert self._proc is not None
        if self._proc.poll() is not None:
            raise AssertionError(f"{self.name} exited early:\n{log_tail(self.log)}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(self.url + self._ready_path, timeout=2.0).status_code == 200:
                return True
        return None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def sentinel_server(target: str, workdir: Path) -> Server:
    """``sentinel run`` against ``target`` with short timings, as a real process."""
    config = workdir / "sentinel.yaml"
    config.write_text(yaml.safe_dump(FAST_SETTINGS))
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "sentinel",
        "run",
        "--config",
        str(config),
        "--target",
        target,
        "--listen",
        f"127.0.0.1:{port}",
        "--grpc-listen",
        f"127.0.0.1:{free_port()}",
        "--diagnostics-dir",
        str(workdir / "diagnostics"),
        "--log-format",
        "json",
    ]
    # The policy from config, so priority_effective is known whether or not
    # sentinel can see the simulator's processes from here.
    env = {"SENTINEL_SCHEDULING_POLICY": "priority"}
    return Server("sentinel", command, port, workdir / "sentinel.log", "/startupz", env)


def chat(base_url: str, client: httpx.Client, max_tokens: int = 4) -> None:
    """One real request: progress sentinel can see that is not its own canaries."""
    client.post(
        f"{base_url}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hello"}], "max_tokens": max_tokens},
    )


@contextlib.contextmanager
def prometheus_server(config: dict[str, Any], workdir: Path) -> Iterator[Server]:
    """A real Prometheus with a scratch data directory, on a free port."""
    binary = tool("prometheus")
    config_path = workdir / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config))
    port = free_port()
    command = [
        binary,
        f"--config.file={config_path}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    with Server("prometheus", command, port, workdir / "prometheus.log", "/-/ready") as server:
        yield server


def api(server: Server, path: str, **params: str) -> Any:
    """GET a Prometheus HTTP API path; its ``data`` on success, an assertion otherwise."""
    response = httpx.get(server.url + path, params=params, timeout=10.0)
    body = response.json()
    assert body.get("status") == "success", f"{path} {params}: {json.dumps(body)[:500]}"
    return body["data"]
