"""Benchmark: a pool of simulated vLLM replicas held at their admission cap, each with its
own sentinel, behind the shipped fleet rules: how many replicas are unready at once.

Run: ``make bench-fleet-admission`` or ``python -m tests.bench.bench_fleet_admission
[--replicas 8] [--duration 300] [--clients 10] [--rate 20] [--no-prometheus] [--json PATH]``.

Why (issue 30): past ``--max-num-queued-reqs`` vLLM refuses a request with HTTP 503 ("The
engine is currently busy and cannot accept new requests ...") before the engine. sentinel
counts a canary refused so as reason ``admission``, neither good nor bad for readiness, so
a replica at its cap stays ready: if a whole pool at peak turned unready together, the
router would lose every endpoint at once.

Every piece runs as its own process:

- ``--replicas`` simulators, each ``--max-num-seqs 2 --max-num-queued-reqs 4`` with
  priority scheduling (two requests run, two wait, the rest are refused);
- one ``sentinel run`` per simulator with the shipped defaults: only the listen port (a
  free one), the diagnostics folder and the JSON log are set, and gRPC is off, as the base
  manifests run it (``tests.bench.bench_footprint.start_sidecar``);
- one ``python -m chaos.load`` per replica for ``--duration`` seconds: at most
  ``--clients`` requests in flight, a new one every 1/``--rate`` s, 32 tokens each, so the
  replica sits at its cap (a slot freed is taken within 50 ms) and most arrivals are
  refused. The arrivals are paced rather than strictly closed-loop on purpose: a
  closed-loop client resending a refused request at once spins (about 6,000 refusals a
  second against one simulator here), which on two cores would measure CPU starvation
  rather than admission control;
- the fleet (unless ``--no-prometheus`` or Prometheus is not installed; ``make
  prometheus-tools``): ``sentinel exporter`` with the shipped exporter.yaml (its allowlist
  swapped for 127.0.0.0/8) and a real Prometheus scraping it with the shipped job
  (scrape-config.yaml with file_sd in place of pod discovery, every 30 s as shipped), and
  the sidecars' ``/metrics`` as the shipped PodMonitor does (15 s). It evaluates
  fleet-rules.yaml unchanged, plus ``SentinelPoolWideFailure`` in the sidecar-only form the
  rules file's header documents (``sentinel_verdict{probe="readiness"}`` for
  ``probe_success``), every 15 s.

Every second it polls each sidecar's ``/readyz`` and ``/livez``; when a replica turns
unready or fails liveness it keeps ``/status``'s reason. Printed: per replica the seconds
unready, liveness failures, the load's completions and refusals, the server's own counts,
sentinel's canaries by reason and, with Prometheus, the exporter's probes; then the
unready count over time and the headline "most replicas unready at once: N of M", the
pool-wide rule's verdicts and the load average. Progress goes to stderr. It reports and
exits 0; 1 only when something could not be measured (a sidecar never green, a process
gone). Every process it started is stopped on exit, on Ctrl-C and SIGTERM too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml
from rich.console import Console
from rich.table import Table

from sentinel_sim.launch import SimProcess
from tests.bench.bench_footprint import Sidecar, start_sidecar, stop_process, stop_sidecar
from tests.bench.bench_footprint import time_to_answer as wait_green
from tests.bench.bench_sentinel import BenchError, _loadavg, _metric
from tests.exporter_process import ExporterProcess
from tests.prometheus.fleet_rules import (
    EXPORTER_CONFIG,
    ROOT,
    file_sd_job,
    pod_labels,
    rule_groups,
    rules,
    scrape_job,
)
from tests.prometheus.servers import Server, api, prometheus_server

CAP = 4  # --max-num-queued-reqs: unfinished requests admitted
MAX_NUM_SEQS = 2
MAX_TOKENS = 32
CLIENTS = 10
RATE = 20.0  # new requests per second per replica
POLL_S = 1.0
PROGRESS_S = 30.0
BUCKET_S = 10
NAMESPACE, POOL, MODEL = "inference", "chat", "sim-model"
SIDECAR_JOB = "sentinel"
# As the shipped PodMonitor (manifests/components/monitoring/podmonitor.yaml).
SIDECAR_SCRAPE = {"scrape_interval": "15s", "scrape_timeout": "5s"}
EVALUATION_INTERVAL = "15s"
SIDECAR_ALERT = "SentinelPoolWideFailureSidecars"
DEPLOYMENT = ROOT / "manifests" / "base" / "deployment.yaml"


def _say(message: str) -> None:
    print(f"[bench-fleet-admission {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr)


@dataclass
class Replica:
    name: str
    sim: SimProcess
    sidecar: Sidecar

    @property
    def address(self) -> str:
        return self.sim.base_url.removeprefix("http://")


@dataclass
class Watch:
    """One row per poll: seconds since the load started, and each replica's two answers."""

    ticks: list[float] = field(default_factory=list)
    readyz: list[list[int]] = field(default_factory=list)
    livez: list[list[int]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    load_average: list[list[float]] = field(default_factory=list)

    def unready(self) -> list[int]:
        return [sum(code != 200 for code in row) for row in self.readyz]


# -- processes ------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def pool(count: int, workdir: Path) -> AsyncIterator[list[Replica]]:
    """``count`` simulators, each with a ``sentinel run`` beside it, all stopped on exit."""
    async with contextlib.AsyncExitStack() as stack:
        replicas: list[Replica] = []
        for index in range(count):
            folder = workdir / f"vllm-{index}"
            folder.mkdir()
            sim = SimProcess(
                max_num_seqs=MAX_NUM_SEQS,
                scheduling_policy="priority",
                extra_args=("--max-num-queued-reqs", str(CAP)),
                log_path=folder / "sim.log",
            )
            await stack.enter_async_context(sim)
            sidecar = start_sidecar(sim.base_url, folder)
            stack.callback(stop_sidecar, sidecar)
            replicas.append(Replica(f"vllm-{index}", sim, sidecar))
        yield replicas


@contextlib.asynccontextmanager
async def loads(
    replicas: Sequence[Replica], seconds: float, clients: int, rate: float
) -> AsyncIterator[list[asyncio.subprocess.Process]]:
    """One ``python -m chaos.load`` per replica for ``seconds``; stopped on exit if running."""
    procs: list[asyncio.subprocess.Process] = []
    try:
        for replica in replicas:
            procs.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "chaos.load",
                    *("--target", replica.sim.base_url, "--concurrency", str(clients)),
                    *("--rate", str(rate), "--duration", str(seconds)),
                    *("--max-tokens", str(MAX_TOKENS), "--timeout", "120", "--json"),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.DEVNULL,
                )
            )
        yield procs
    finally:
        for proc in procs:
            await stop_process(proc)


async def load_summary(proc: asyncio.subprocess.Process) -> dict[str, Any]:
    """The load's own JSON summary once it ended by itself (it runs ``--duration``)."""
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 120)
    except TimeoutError:
        return {"error": "the load did not end within 120 s of its duration"}
    try:
        summary: dict[str, Any] = json.loads(out)
    except ValueError:
        return {"error": f"the load exited with {proc.returncode} and no summary"}
    return summary


# -- the fleet: exporter and Prometheus -------------------------------------------------


def exporter_config() -> dict[str, Any]:
    """The shipped exporter.yaml with loopback in place of the cluster's names and pod CIDR."""
    config: dict[str, Any] = yaml.safe_load(EXPORTER_CONFIG.read_text())
    config["allow"] = {"cidrs": ["127.0.0.0/8"]}
    return config


def sidecar_rules() -> dict[str, Any]:
    """SentinelPoolWideFailure over the sidecars' own series, as fleet-rules.yaml's header
    says: ``sentinel_verdict{probe="readiness"}`` for ``probe_success``,
    ``sentinel_server_phase`` for the exporter's phase, pool label ``sentinel_dev_pool``.
    Threshold, floor and ``for`` are the shipped alert's."""
    (shipped,) = [r for r in rules() if r.get("alert") == "SentinelPoolWideFailure"]
    awake = (
        'sentinel_verdict{probe="readiness"} unless on (namespace, pod) '
        '(sentinel_server_phase{phase=~"asleep|paused"} == 1)'
    )
    return {
        "name": "sentinel-fleet-sidecar-only",
        "rules": [
            {"record": "instance:sentinel_readiness:awake", "expr": awake},
            {
                "record": "pool:sentinel_readiness_failing:ratio",
                "expr": "1 - avg by (sentinel_dev_pool) (instance:sentinel_readiness:awake)",
            },
            {
                "record": "pool:sentinel_awake:count",
                "expr": "count by (sentinel_dev_pool) (instance:sentinel_readiness:awake)",
            },
            {
                "alert": SIDECAR_ALERT,
                "expr": "pool:sentinel_readiness_failing:ratio >= 0.5 and on "
                "(sentinel_dev_pool) (pool:sentinel_awake:count >= 2)",
                "for": shipped["for"],
            },
        ],
    }


def prometheus_config(workdir: Path, exporter: str, replicas: Sequence[Replica]) -> dict[str, Any]:
    probes = workdir / "exporter-targets.json"
    probes.write_text(
        json.dumps(
            [
                {"targets": [r.address], "labels": pod_labels(POOL, MODEL, NAMESPACE, r.name)}
                for r in replicas
            ]
        )
    )
    shipped = scrape_job()
    job = file_sd_job(probes, exporter, shipped["scrape_interval"], shipped["scrape_timeout"])
    sidecars = {
        "job_name": SIDECAR_JOB,
        **SIDECAR_SCRAPE,
        "static_configs": [
            {
                "targets": [r.sidecar.url.removeprefix("http://")],
                "labels": {"namespace": NAMESPACE, "pod": r.name, "sentinel_dev_pool": POOL},
            }
            for r in replicas
        ],
    }
    groups = [*rule_groups(), sidecar_rules()]
    (workdir / "rules.yml").write_text(yaml.safe_dump({"groups": groups}))
    return {
        "global": {"evaluation_interval": EVALUATION_INTERVAL},
        "rule_files": ["rules.yml"],
        "scrape_configs": [job, sidecars],
    }


@contextlib.contextmanager
def fleet(workdir: Path, replicas: Sequence[Replica]) -> Iterator[Server]:
    folder = workdir / "prometheus"
    folder.mkdir()
    with ExporterProcess(exporter_config()) as exporter:
        config = prometheus_config(folder, exporter.url.removeprefix("http://"), replicas)
        with prometheus_server(config, folder) as server:
            yield server


def _query(server: Server, expr: str, at: float) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = api(server, "/api/v1/query", query=expr, time=f"{at:.3f}")[
        "result"
    ]
    return result


async def scraped(server: Server, count: int, deadline: float) -> float:
    """Seconds until Prometheus holds a probe and a sidecar sample of every replica."""
    started = time.monotonic()
    expr = 'count(probe_success) + count(sentinel_verdict{probe="readiness"})'
    while time.monotonic() - started < deadline:
        found = await asyncio.to_thread(_query, server, expr, time.time())
        if found and float(found[0]["value"][1]) >= 2 * count:
            return time.monotonic() - started
        await asyncio.sleep(1.0)  # polling Prometheus with a deadline
    raise BenchError(f"Prometheus did not scrape every replica within {deadline:.0f} s")


def fleet_figures(server: Server, began: float, ended: float) -> dict[str, Any]:
    """What Prometheus made of the window [began, ended] (unix seconds)."""
    window = f"{max(1, round(ended - began))}s"

    def values(expr: str, label: str) -> dict[str, float]:
        return {
            s["metric"].get(label, ""): float(s["value"][1]) for s in _query(server, expr, ended)
        }

    probes = values(f"count_over_time(probe_success[{window}])", "instance")
    passed = values(f"sum_over_time(probe_success[{window}])", "instance")
    reasons = values(
        f"sum by (reason) (count_over_time(probe_sentinel_failure[{window}]))", "reason"
    )
    ratios = {
        name: values(f"max_over_time({name}[{window}])", label).get(POOL)
        for name, label in (
            ("pool:probe_failing:ratio", "pool"),
            ("pool:sentinel_readiness_failing:ratio", "sentinel_dev_pool"),
        )
    }
    seen: dict[str, dict[str, float]] = {}
    for s in _query(server, f"count_over_time(ALERTS[{window}])", ended):
        labels = s["metric"]
        key = labels["alertname"]
        if "instance" in labels:
            key += f" {labels['instance']}"
        seen.setdefault(key, {})[labels["alertstate"]] = float(s["value"][1])
    asked = time.time()  # a second or two past the window: the alerts as they stand now
    active = [
        {
            "alert": a["labels"]["alertname"],
            "instance": a["labels"].get("instance"),
            "state": a["state"],
            "active_for_s": round(asked - _unix(a["activeAt"]), 1),
        }
        for a in api(server, "/api/v1/alerts")["alerts"]
    ]
    return {
        "for": {
            r["alert"]: r["for"] for r in [*rules(), *sidecar_rules()["rules"]] if "alert" in r
        },
        "window": window,
        "exporter_probes": {
            i: {"probes": n, "passed": passed.get(i, 0.0)} for i, n in probes.items()
        },
        "exporter_failure_reasons": reasons,
        "max_failing_ratio": ratios,
        "alert_evaluations": seen,
        "alerts_at_end": active,
    }


def _unix(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


# -- the watch --------------------------------------------------------------------------


async def _code(client: httpx.AsyncClient, url: str) -> int:
    try:
        return (await client.get(url)).status_code
    except httpx.HTTPError:
        return 0  # no answer counts as a failure, as the kubelet counts it


async def _reason(client: httpx.AsyncClient, replica: Replica, probe: str) -> str:
    try:
        summary = (await client.get(replica.sidecar.url + "/status")).json()["summary"]
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        return f"/status unreadable: {type(exc).__name__}"
    return str(summary[probe].get("reason"))


async def watch(
    replicas: Sequence[Replica], seconds: float, started: float, client: httpx.AsyncClient
) -> Watch:
    """Poll every sidecar's /readyz and /livez once a second from ``started`` for ``seconds``."""
    seen = Watch()
    count = len(replicas)
    previous = [[200, 200] for _ in replicas]
    most = 0
    next_progress = PROGRESS_S
    tick = 0
    while (moment := started + tick * POLL_S) < started + seconds:
        await asyncio.sleep(max(0.0, moment - time.monotonic()))  # the polling cadence
        tick += 1
        for replica in replicas:
            if replica.sidecar.proc.poll() is not None:
                raise BenchError(
                    f"{replica.name}'s sentinel exited with {replica.sidecar.proc.returncode}"
                )
        answers = await asyncio.gather(
            *(
                _code(client, r.sidecar.url + path)
                for r in replicas
                for path in ("/readyz", "/livez")
            )
        )
        at = round(time.monotonic() - started, 2)
        seen.ticks.append(at)
        seen.readyz.append(list(answers[0::2]))
        seen.livez.append(list(answers[1::2]))
        for index, replica in enumerate(replicas):
            for slot, probe in ((0, "readiness"), (1, "liveness")):
                code = answers[2 * index + slot]
                if code != 200 and previous[index][slot] == 200:
                    reason = await _reason(client, replica, probe)
                    seen.events.append(
                        {"t": at, "replica": replica.name, probe: code, "reason": reason}
                    )
                    _say(f"t={at:.0f} s: {replica.name} {probe} {code}: {reason}")
                elif code == 200 and previous[index][slot] != 200:
                    seen.events.append({"t": at, "replica": replica.name, probe: 200})
                previous[index][slot] = code
        unready = sum(code != 200 for code in seen.readyz[-1])
        most = max(most, unready)
        if at >= next_progress:
            next_progress += PROGRESS_S
            seen.load_average.append(_loadavg())
            dead = sum(code != 200 for code in seen.livez[-1])
            _say(
                f"t={at:.0f}/{seconds:.0f} s: unready now {unready} of {count}, most at once "
                f"{most}; /livez failing now {dead}; load average {seen.load_average[-1]}"
            )
    return seen


async def counters(client: httpx.AsyncClient, replica: Replica) -> dict[str, float]:
    """The server's refusals and completions, and sentinel's canaries, as counted so far."""
    server = (await client.get(replica.sim.base_url + "/metrics")).text
    sentinel = (await client.get(replica.sidecar.url + "/metrics")).text
    return {
        "refused": _metric(server, "vllm:admission_rejections_total"),
        "completed": _metric(server, "vllm:request_success_total"),
        "canaries": _metric(sentinel, "sentinel_canary_total"),
        "canaries_ok": _metric(sentinel, "sentinel_canary_total", reason="ok"),
        "canaries_admission": _metric(sentinel, "sentinel_canary_total", reason="admission"),
        "canaries_skipped_busy": _metric(
            sentinel, "sentinel_canaries_skipped_total", reason="busy"
        ),
    }


# -- the run ----------------------------------------------------------------------------


def _longest(flags: Sequence[bool], ticks: Sequence[float]) -> float:
    """Longest run of consecutive polls with the flag set, in seconds (poll to poll)."""
    runs = stretches([0 if flag else 200 for flag in flags], ticks)
    return max((seconds for _, seconds in runs), default=0.0)


def stretches(codes: Sequence[int], ticks: Sequence[float]) -> list[list[float]]:
    """Each run of consecutive non-200 polls as [start, seconds] (poll to poll)."""
    found: list[list[float]] = []
    since: float | None = None
    for code, at in zip(codes, ticks, strict=True):
        if code != 200:
            if since is None:
                since = at
                found.append([at, POLL_S])
            else:
                found[-1][1] = round(at - since + POLL_S, 2)
        else:
            since = None
    return found


def kubelet_liveness() -> dict[str, int]:
    """The vLLM container's /livez probe in the base manifest: its period and threshold."""
    for document in yaml.safe_load_all(DEPLOYMENT.read_text()):
        if not document or document.get("kind") != "Deployment":
            continue
        for container in document["spec"]["template"]["spec"]["containers"]:
            probe = container.get("livenessProbe") or {}
            if probe.get("httpGet", {}).get("path") == "/livez":
                return {
                    "period_s": int(probe.get("periodSeconds", 10)),
                    "failure_threshold": int(probe.get("failureThreshold", 3)),
                }
    raise BenchError(f"no /livez liveness probe in {DEPLOYMENT}")


def _busy_cpu_seconds() -> float:
    t = psutil.cpu_times()
    return float(t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0))


def cpu_sample(replicas: Sequence[Replica]) -> dict[str, float]:
    """CPU seconds so far, by who spent them, with the whole machine's and the clock.

    Live descendants are read with psutil (their own reaped children included);
    this process's reaped children are the load generators, which run and are
    reaped between two samples taken around the load.
    """
    sims = {pid for r in replicas for pid in (r.sim.api_pid, *r.sim.engine_pids)}
    sidecars = {r.sidecar.proc.pid for r in replicas}
    spent = {"simulators": 0.0, "sidecars": 0.0, "exporter_and_prometheus": 0.0}
    me = psutil.Process()
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            t = child.cpu_times()
            group = (
                "simulators"
                if child.pid in sims
                else "sidecars"
                if child.pid in sidecars
                else "exporter_and_prometheus"
            )
            spent[group] += t.user + t.system + t.children_user + t.children_system
    own = me.cpu_times()
    spent["this_process"] = own.user + own.system
    spent["load_generators"] = own.children_user + own.children_system
    spent["machine"] = _busy_cpu_seconds()
    spent["wall"] = time.monotonic()
    return spent


async def bench(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    report: dict[str, Any] = {
        "replicas": args.replicas,
        "duration_s": args.duration,
        "cap": CAP,
        "max_num_seqs": MAX_NUM_SEQS,
        "clients": args.clients,
        "rate_per_s": args.rate,
        "max_tokens": MAX_TOKENS,
        "cpus": os.cpu_count(),
        "load_average_start": _loadavg(),
        "workdir": str(workdir),
    }
    prometheus = not args.no_prometheus and shutil.which("prometheus") is not None
    if not args.no_prometheus and not prometheus:
        report["prometheus"] = "not installed (make prometheus-tools): fleet rules not evaluated"
        _say(report["prometheus"])
    async with (
        pool(args.replicas, workdir) as replicas,
        httpx.AsyncClient(timeout=3.0) as client,
    ):
        _say(f"{len(replicas)} simulators and sidecars started; waiting for every sidecar green")
        greens = await asyncio.gather(*(wait_green(r.sidecar) for r in replicas))
        report["green_after_s"] = [round(g, 1) for _, g in greens]
        _say(f"all green (slowest {max(g for _, g in greens):.1f} s after its start)")
        with contextlib.ExitStack() as stack:
            server = stack.enter_context(fleet(workdir, replicas)) if prometheus else None
            if server is not None:
                took = await scraped(server, len(replicas), 90.0)
                _say(
                    f"Prometheus holds every replica's probe and sidecar series after {took:.0f} s"
                )
            before = await asyncio.gather(*(counters(client, r) for r in replicas))
            report["load_average_at_load_start"] = _loadavg()
            cpu_before = cpu_sample(replicas)
            began_unix, began = time.time(), time.monotonic()
            _say(
                f"load: {args.clients} clients and {args.rate:g} requests/s per replica for "
                f"{args.duration:.0f} s; polling /readyz and /livez every {POLL_S:.0f} s"
            )
            async with loads(replicas, args.duration, args.clients, args.rate) as procs:
                seen = await watch(replicas, args.duration, began, client)
                summaries = await asyncio.gather(*(load_summary(p) for p in procs))
            cpu_after = cpu_sample(replicas)
            report["cpu_seconds"] = {k: round(cpu_after[k] - cpu_before[k], 1) for k in cpu_after}
            report["load_average_end"] = _loadavg()
            ended_unix = began_unix + args.duration
            after = await asyncio.gather(*(counters(client, r) for r in replicas))
            status = await asyncio.gather(
                *(client.get(r.sidecar.url + "/status") for r in replicas)
            )
            if server is not None:
                await asyncio.sleep(1.0)  # one more evaluation lands past the window's end
                report["fleet"] = await asyncio.to_thread(
                    fleet_figures, server, began_unix, ended_unix
                )
    unready = seen.unready()
    report["per_replica"] = [
        {
            "replica": r.name,
            "address": r.address,
            "unready_polls": sum(row[i] != 200 for row in seen.readyz),
            "livez_failures": sum(row[i] != 200 for row in seen.livez),
            "unready_stretches": stretches([row[i] for row in seen.readyz], seen.ticks),
            "livez_stretches": stretches([row[i] for row in seen.livez], seen.ticks),
            "polls": len(seen.ticks),
            "load": {k: summaries[i].get(k) for k in ("requests", "completed", "errors", "error")},
            "server": {k: after[i][k] - before[i][k] for k in after[i]},
            "hangs_at_end": status[i].json()["verdict"]["hangs"],
            "readiness_at_end": status[i].json()["summary"]["readiness"]["reason"],
        }
        for i, r in enumerate(replicas)
    ]
    most = max(unready, default=0)
    report["unready_at_once"] = {
        "max": most,
        "first_at_s": seen.ticks[unready.index(most)] if unready and most else None,
        "per_bucket_max": [
            max(unready[i : i + BUCKET_S]) for i in range(0, len(unready), BUCKET_S)
        ],
        "half_or_more_longest_s": _longest([2 * n >= len(replicas) for n in unready], seen.ticks),
    }
    report["kubelet_liveness"] = kubelet_liveness()
    report["events"] = seen.events
    report["load_average_during"] = seen.load_average
    return report


# -- output ---------------------------------------------------------------------------


def render(report: dict[str, Any], console: Console) -> None:
    count = report["replicas"]
    fleet_probes = report.get("fleet", {}).get("exporter_probes", {})
    table = Table(
        title=f"{count} simulated replicas at their admission cap for {report['duration_s']:.0f} s "
        f"(--max-num-queued-reqs {report['cap']}, --max-num-seqs {report['max_num_seqs']}, "
        f"{report['clients']} clients and {report['rate_per_s']:g} requests/s each), "
        "sentinel with shipped defaults"
    )
    for column in (
        "replica",
        "unready s",
        "/livez failures",
        "load completed",
        "load refused (503)",
        "server refusals",
        "server completions",
        "canaries ok / admission / other",
        "text skipped (busy)",
        "exporter probes passed",
    ):
        table.add_column(column, justify="left" if column == "replica" else "right")
    for row in report["per_replica"]:
        load, server = row["load"], row["server"]
        errors = load.get("errors") or {}
        other = server["canaries"] - server["canaries_ok"] - server["canaries_admission"]
        probes = fleet_probes.get(row["address"])
        table.add_row(
            row["replica"],
            f"{row['unready_polls']} of {row['polls']}",
            str(row["livez_failures"]),
            str(load.get("completed", load.get("error", "-"))),
            str(errors.get("http_503", 0)),
            f"{server['refused']:.0f}",
            f"{server['completed']:.0f}",
            f"{server['canaries_ok']:.0f} / {server['canaries_admission']:.0f} / {other:.0f}",
            f"{server['canaries_skipped_busy']:.0f}",
            "-" if probes is None else f"{probes['passed']:.0f} of {probes['probes']:.0f}",
        )
    console.print(table)
    at_once = report["unready_at_once"]
    console.print(
        "unready replicas at once, the most in each 10 s: "
        + " ".join(str(n) for n in at_once["per_bucket_max"])
    )
    where = "" if at_once["first_at_s"] is None else f" (first at t={at_once['first_at_s']:.0f} s)"
    console.print(f"most replicas unready at once: {at_once['max']} of {count}{where}")
    console.print(
        f"pool-wide condition from the polls (half or more unready): longest "
        f"{at_once['half_or_more_longest_s']:.0f} s in a row"
    )
    render_stretches(report, console)
    render_fleet(report, console)
    cpu = report["cpu_seconds"]
    ours = sum(v for k, v in cpu.items() if k not in ("machine", "wall"))
    console.print(
        f"CPU seconds over the load ({cpu['wall']:.0f} s, {report['cpus']} cpus: "
        f"{cpu['wall'] * report['cpus']:.0f} s): simulators {cpu['simulators']:.0f}, sidecars "
        f"{cpu['sidecars']:.0f} ({cpu['sidecars'] / cpu['wall'] / count * 100:.1f} % of a core "
        f"each), load generators {cpu['load_generators']:.0f}, exporter and Prometheus "
        f"{cpu['exporter_and_prometheus']:.0f}, this process {cpu['this_process']:.0f}; the "
        f"machine busy {cpu['machine']:.0f}, of which {max(0.0, cpu['machine'] - ours):.0f} "
        f"not this benchmark's processes"
    )
    console.print(
        f"load average at start {report['load_average_start']}, at the load's start "
        f"{report['load_average_at_load_start']}, every 30 s {report['load_average_during']}, "
        f"at the end {report['load_average_end']}; logs in {report['workdir']}"
    )


def render_stretches(report: dict[str, Any], console: Console) -> None:
    """Each replica's unready and liveness-failing stretches, with /status's reasons."""

    def spans(found: Sequence[Sequence[float]]) -> str:
        return ", ".join(f"{seconds:.0f} s from t={at:.0f}" for at, seconds in found) or "none"

    for row in report["per_replica"]:
        if not (row["unready_stretches"] or row["livez_stretches"]):
            continue
        reasons = sorted(
            {
                e["reason"]
                for e in report["events"]
                if e["replica"] == row["replica"] and "reason" in e
            }
        )
        console.print(
            f"  {row['replica']}: unready {spans(row['unready_stretches'])}; /livez failing "
            f"{spans(row['livez_stretches'])}; why: {'; '.join(reasons)}"
        )
    probe = report["kubelet_liveness"]
    period, threshold = probe["period_s"], probe["failure_threshold"]
    lengths = [s for row in report["per_replica"] for _, s in row["livez_stretches"]]
    certain = sum(s >= period * threshold for s in lengths)
    possible = sum(period * (threshold - 1) < s < period * threshold for s in lengths)
    console.print(
        f"the shipped kubelet liveness probe (/livez every {period} s, {threshold} failures) "
        f"restarts the server after {period * (threshold - 1)}-{period * threshold} s of failing: "
        f"{len(lengths)} /livez failing stretches, {certain} long enough for a restart for "
        f"certain, {possible} more possibly"
    )


def render_fleet(report: dict[str, Any], console: Console) -> None:
    if "fleet" not in report:
        console.print(f"fleet rules: not evaluated ({report.get('prometheus', '--no-prometheus')})")
        return
    f = report["fleet"]
    ratios = f["max_failing_ratio"]
    console.print(
        f"Prometheus over the {f['window']} of load (exporter probed every 30 s, sidecars "
        f"scraped every 15 s, rules every {EVALUATION_INTERVAL}): exporter probe failures by "
        f"reason {json.dumps(f['exporter_failure_reasons'])}; highest "
        f"pool:probe_failing:ratio {_ratio(ratios['pool:probe_failing:ratio'])} (exporter), "
        f"pool:sentinel_readiness_failing:ratio "
        f"{_ratio(ratios['pool:sentinel_readiness_failing:ratio'])} (sidecars)"
    )
    evaluations = f["alert_evaluations"]
    for name in ("SentinelPoolWideFailure", SIDECAR_ALERT, "SentinelProbeFailing"):
        seen = [v for k, v in evaluations.items() if k.split(" ")[0] == name]
        now = [a for a in f["alerts_at_end"] if a["alert"] == name]
        line = (
            f"  {name} (for {f['for'][name]}): pending in "
            f"{sum(v.get('pending', 0) for v in seen):.0f} evaluations, firing in "
            f"{sum(v.get('firing', 0) for v in seen):.0f}"
        )
        if len(seen) > 1 or any(a["instance"] for a in now):
            line += f", for {len(seen)} of {report['replicas']} replicas"
        if now:
            states = sorted({a["state"] for a in now})
            longest = max(a["active_for_s"] for a in now)
            line += (
                f"; after the load {len(now)} {'/'.join(states)}, the longest for {longest:.0f} s"
            )
        console.print(line)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


async def stoppable(run: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
    """``run``, cancelled by SIGTERM as Ctrl-C cancels it, so its clean-up runs either way."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await run
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.bench_fleet_admission")
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of load")
    parser.add_argument("--clients", type=int, default=CLIENTS, help="in flight per replica")
    parser.add_argument("--rate", type=float, default=RATE, help="new requests/s per replica")
    parser.add_argument("--no-prometheus", action="store_true", help="no exporter, no rules")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the report as JSON")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="sentinel-bench-fleet-admission-"))
    _say(f"logs of every simulator, sidecar, exporter and Prometheus in {workdir}")
    try:
        report = asyncio.run(stoppable(bench(args, workdir)))
    except RuntimeError as exc:  # BenchError, or a sidecar that never turned green
        _say(f"could not measure: {exc}")
        return 1
    except (KeyboardInterrupt, asyncio.CancelledError):
        _say("interrupted; every process it started is stopped")
        return 130
    render(report, Console(width=160))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
