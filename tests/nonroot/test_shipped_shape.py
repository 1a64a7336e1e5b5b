"""sentinel as uid 10001 with no capabilities beside a root server: the pod as shipped.

The simulator runs as root (as vLLM images do) with its port on its command
line; ``sentinel run`` runs as uid 10001 (tests/nonroot/shape.py) with
shortened settings (``SETTINGS`` there: dead grace 1.5 s, process sampling
0.5 s, evaluation 0.25 s, listener-down grace 3 s; the defaults are 5 s, 1 s,
0.5 s and 30 s). The kernel refuses it the server's ``/proc/<pid>/fd``,
``environ``, ``exe`` and ptrace, so the server is attributed by its command
line and the socket's uid, and everything that needs the refused reads says
so.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from chaos.ports import free_port
from sentinel_sim.launch import SimProcess
from sentinel_sim.satellite import SERVER_HEADER
from tests.nonroot.conftest import report
from tests.nonroot.shape import SETTINGS, NonRootSentinel, nonroot_sentinel, poll

RULE_EVIDENCE = ("engine_state", "api_alive", "command_line", "compilers")
REFUSED = ("descriptors", "environment", "wait_channel", "stacks")
# "within the dead grace plus the sampling intervals plus 1 s" (issue 25)
DEAD_BOUND = SETTINGS["dead_grace"] + SETTINGS["process_interval"] + SETTINGS["eval_interval"] + 1
LISTENER_BOUND = SETTINGS["listener_grace"] + 15.0
API_WINDOW = 10.0


def attributed(sidecar: NonRootSentinel, sim: SimProcess) -> dict[str, Any]:
    """Wait until the server and its engine are attributed; the /status document then."""

    def ready() -> bool:
        status = sidecar.status()
        processes = (status.get("evidence") or {}).get("processes") or {}
        engines = [p["pid"] for p in processes.get("engines") or []]
        return (processes.get("api") or {}).get("pid") == sim.api_pid and sim.engine_pid in engines

    poll(ready, 20.0, lambda: f"attribution of {sim.api_pid}; last: {sidecar.attribution()}")
    return sidecar.status()


def process_evidence_metric(sidecar: NonRootSentinel) -> dict[str, float]:
    families = text_string_to_metric_families(sidecar.get("/metrics").text)
    return {
        s.labels["evidence"]: s.value
        for f in families
        if f.name == "sentinel_process_evidence"
        for s in f.samples
    }


def test_attribution_sigstop_and_bundle(
    other_uid: int, read_only_root: bool, writable: list[Path], sim: SimProcess
) -> None:
    with nonroot_sentinel(
        sim.base_url, read_only=read_only_root, writable=writable, port=free_port()
    ) as sidecar:
        status = attributed(sidecar, sim)
        attribution = status["evidence"]["process_attribution"]
        assert attribution["by"] == "command_line", attribution
        assert f"--port {sim.port}" in attribution["detail"]
        assert any("/proc/<pid>/fd" in what for what in attribution["unreadable"])
        evidence = attribution["evidence"]
        assert [n for n in RULE_EVIDENCE if not evidence[n]["on"]] == []
        for name in REFUSED:
            assert not evidence[name]["on"], name
            assert evidence[name]["needs"], name
        assert evidence["stacks"]["granted_by"] == "manifests/components/stack-dumps"
        assert status["priority"]["policy"] == "priority"  # read from its command line
        metric = process_evidence_metric(sidecar)
        assert {n: metric.get(n) for n in (*RULE_EVIDENCE, *REFUSED)} == {
            **dict.fromkeys(RULE_EVIDENCE, 1.0),
            **dict.fromkeys(REFUSED, 0.0),
        }
        said = sidecar.log_events("process_evidence")
        assert said, "no process_evidence log line"
        assert said[-1]["attribution"] == "command_line"
        assert set(said[-1]["off"]) == set(REFUSED)

        assert sidecar.get("/livez").status_code == 200
        os.kill(sim.engine_pid, signal.SIGSTOP)
        try:
            took = poll(
                lambda: sidecar.get("/livez").status_code == 503, DEAD_BOUND + 10, "/livez red"
            )
            report(f"SIGSTOP of the engine to /livez red: {took:.2f} s (bound {DEAD_BOUND:g} s)")
            kinds = {h["kind"] for h in sidecar.status()["verdict"]["hangs"]}
            assert "dead" in kinds
            assert took <= DEAD_BOUND
            poll(lambda: bool(sidecar.bundles()), 20.0, "a diagnostics bundle")
        finally:
            os.kill(sim.engine_pid, signal.SIGCONT)
        bundle = sidecar.bundles()[0]
        found = {p["pid"]: p for p in bundle["processes"]}
        assert found[sim.engine_pid]["status"] == "stopped"
        assert found[sim.api_pid]["cmdline"]
        lacks = bundle["lacks"]
        assert "CAP_DAC_READ_SEARCH" in lacks["environ"]
        assert "CAP_DAC_READ_SEARCH" in lacks["open_files"]
        assert "manifests/components/stack-dumps" in lacks["stacks"]
        assert "hidden" in lacks["wchan"]
        report("bundle lacks: " + ", ".join(sorted(lacks)))
        sidecar.stop()
        assert sidecar.writes_outside() == []


def test_a_stopped_api_server(
    other_uid: int, read_only_root: bool, writable: list[Path], sim: SimProcess
) -> None:
    with nonroot_sentinel(
        sim.base_url, read_only=read_only_root, writable=writable, port=free_port()
    ) as sidecar:
        attributed(sidecar, sim)
        os.kill(sim.api_pid, signal.SIGSTOP)
        try:
            poll(
                lambda: (
                    (sidecar.status()["evidence"]["processes"]["api"] or {}).get("state")
                    == "stopped"
                ),
                5.0,
                "the API server shown stopped",
            )
            took = poll(lambda: sidecar.get("/livez").status_code == 503, 40.0, "/livez red")
            hangs = sidecar.status()["verdict"]["hangs"]
        finally:
            os.kill(sim.api_pid, signal.SIGCONT)
        report(
            f"SIGSTOP of the API server to /livez red: {took:.2f} s "
            f"({', '.join(h['kind'] for h in hangs)})"
        )
        assert hangs
        sidecar.stop()
        assert sidecar.writes_outside() == []


def test_the_listener_closing_for_good(
    other_uid: int, read_only_root: bool, writable: list[Path], sim: SimProcess
) -> None:
    with nonroot_sentinel(
        sim.base_url, read_only=read_only_root, writable=writable, port=free_port()
    ) as sidecar:
        attributed(sidecar, sim)
        sim.control.set_fault("listener_closed")
        took = poll(
            lambda: sidecar.get("/livez").status_code == 503, LISTENER_BOUND + 10, "/livez red"
        )
        report(f"listener closed for good to /livez red: {took:.2f} s (bound {LISTENER_BOUND:g} s)")
        status = sidecar.status()
        assert "listener_down" in {h["kind"] for h in status["verdict"]["hangs"]}
        attribution = status["evidence"]["process_attribution"]
        assert attribution["by"] == "command_line"
        assert "closed" in attribution["detail"]
        assert took <= LISTENER_BOUND
        sidecar.stop()
        assert sidecar.writes_outside() == []


def test_a_wedged_api_server_among_two_is_seen_though_not_named(
    other_uid: int, read_only_root: bool, writable: list[Path]
) -> None:
    """As uid 10001 the socket table still shows the unread connection; its holder cannot
    be named (another user's descriptors), and the hang says so."""
    port = free_port()
    with SimProcess(api_server_count=2, extra_args=["--port", str(port)]) as two:
        pooled = []
        for _ in range(40):  # a router's keep-alive connection held by API server 1
            client = httpx.Client(base_url=two.base_url, limits=httpx.Limits(max_connections=1))
            body = {"model": two.model, "prompt": "hi", "max_tokens": 2}
            if client.post("/v1/completions", json=body).headers.get(SERVER_HEADER) == "1":
                pooled.append(client)
                break
            client.close()
        assert pooled, "no connection landed on API server 1"
        with nonroot_sentinel(
            two.base_url,
            read_only=read_only_root,
            writable=writable,
            port=free_port(),
            api_window=API_WINDOW,
        ) as sidecar:
            attributed(sidecar, two)
            two.control.set_fault("api_wedge", server=1, duration=120)
            with contextlib.suppress(httpx.TimeoutException):
                pooled[0].post("/v1/completions", json=body, timeout=1.0)
            took = poll(
                lambda: sidecar.get("/livez").status_code == 503, API_WINDOW + 20, "/livez red"
            )
            hangs = sidecar.status()["verdict"]["hangs"]
            report(f"wedged API server 1 of 2 to /livez red as uid 10001: {took:.2f} s")
            reason = next(h["reason"] for h in hangs if h["kind"] == "api_server")
            assert "unread" in reason
            assert "cannot name" in reason
            sidecar.stop()
            assert sidecar.writes_outside() == []
        pooled[0].close()
