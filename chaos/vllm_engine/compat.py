"""Probe one real vLLM release for the facts sentinel's mapping depends on.

Each release renamed something sentinel reads: metric names, process titles,
the request fields of structured output, the engine-step function the chaos
plugin hooks. Rather than assume 0.32's, this probe starts the release's server
on the tiny text model and records what it really does:

- seconds from start to the first answer;
- every ``vllm:`` sample name in ``/metrics`` (and the ``engine`` label values);
- the process titles of the server's descendants;
- whether ``priority`` under ``--scheduling-policy priority`` jumps a queue of
  long requests (timed against the same canary at priority 0);
- which structured-output request field the release honours, judged by the
  nonce rule: a top-level string enum whose only value is a fresh nonce comes
  back exactly, which a random-weight model cannot do by chance, so a field
  that is accepted and silently ignored reads as not honoured;
- the chaos plugin's hook points installed, and whether ``engine_hang`` really
  stops the engine (a request does not finish while it is on, does after);
- with ``--sigstop TITLE``: how many of 8 requests finish while the processes
  titled ``TITLE`` are stopped, ``/health``, and which ``engine`` label's token
  counter still moves (one data-parallel engine or one tensor-parallel rank).

Unknown arguments pass on as server flags (``--tensor-parallel-size 2``); a
server that does not come up is recorded with its log's tail, which is the
finding. ``--env VLLM_CPU_OMP_THREADS_BIND=0|0`` gives each rank its CPU list.

Run ``python -m chaos.vllm_engine.compat --release 0.27.1`` (one server at a time,
always stopped); the JSON report goes to stdout and ``.cache/compat/``.
"""

from __future__ import annotations

import argparse
import json
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from chaos.vllm_engine import env as engine_env
from chaos.vllm_engine.server import ServerError, VllmServer

_HOOKS_SCRIPT = (
    "import json, tempfile; from sentinel_chaos_vllm.hooks import install; "
    "print(json.dumps(install(tempfile.mkdtemp())))"
)
#: Long requests queued ahead of the priority canary; with ``--max-num-seqs 2``
#: they keep the waiting queue non-empty for several seconds on the tiny model.
QUEUE_DEPTH = 16
QUEUE_TOKENS = 100


def metric_names(text: str) -> tuple[list[str], list[str]]:
    """Every ``vllm:`` sample name in an exposition, and the ``engine`` label values."""
    names: set[str] = set()
    engines: set[str] = set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("vllm:"):
                names.add(sample.name)
                if "engine" in sample.labels:
                    engines.add(sample.labels["engine"])
    return sorted(names), sorted(engines)


def process_titles(server: VllmServer) -> list[dict[str, Any]]:
    """Title (``comm``), command line head and parent of each descendant."""
    found = []
    for child in server.descendants():
        try:
            found.append(
                {
                    "pid": child.pid,
                    "ppid": child.ppid(),
                    "name": child.name(),
                    "cmdline": " ".join(child.cmdline())[:80],
                }
            )
        except psutil.Error:
            continue
    return found


def _chat(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "Say hello."}], **extra}


def structured_fields(client: httpx.Client, model: str) -> dict[str, str]:
    """Per candidate field: ``honoured``, ``ignored`` (200 but not the nonce) or ``HTTP n``."""
    results: dict[str, str] = {}
    for field in ("response_format", "structured_outputs", "guided_json", "guided_choice"):
        nonce = f"ok-{secrets.token_hex(3)}"
        schema = {"type": "string", "enum": [nonce]}
        body: dict[str, Any]
        if field == "response_format":
            fmt = {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}
            body = _chat(model, max_tokens=24, response_format=fmt)
        elif field == "structured_outputs":
            body = _chat(model, max_tokens=24, structured_outputs={"json": schema})
        elif field == "guided_json":
            body = _chat(model, max_tokens=24, guided_json=schema)
        else:
            body = _chat(model, max_tokens=24, guided_choice=[nonce])
        try:
            reply = client.post("/v1/chat/completions", json=body, timeout=60)
        except httpx.HTTPError as error:
            results[field] = f"error {type(error).__name__}"
            continue
        if reply.status_code != 200:
            results[field] = f"HTTP {reply.status_code}: {reply.text[:160]}"
            continue
        content = reply.json()["choices"][0]["message"].get("content") or ""
        wanted = nonce if field == "guided_choice" else json.dumps(nonce)
        results[field] = "honoured" if content.strip() == wanted else f"ignored ({content[:40]!r})"
    return results


def priority_order(client: httpx.Client, model: str) -> dict[str, Any]:
    """Time a 1-token canary at priority -100 and at 0 behind a queue of long requests."""
    timings: dict[str, Any] = {}
    for priority in (-100, 0):
        stop = threading.Event()

        def load(stop: threading.Event = stop) -> None:
            long_body = _chat(
                model, max_tokens=QUEUE_TOKENS, ignore_eos=True, priority=0, min_tokens=1
            )
            with httpx.Client(base_url=str(client.base_url), timeout=120) as own:
                while not stop.is_set():
                    try:
                        own.post("/v1/chat/completions", json=long_body)
                    except httpx.HTTPError:
                        return

        threads = [threading.Thread(target=load, daemon=True) for _ in range(QUEUE_DEPTH)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30
        while _gauge(client, "vllm:num_requests_waiting") < 4 and time.monotonic() < deadline:
            time.sleep(0.1)  # polling for the queue to fill, with a deadline
        waiting = _gauge(client, "vllm:num_requests_waiting")
        started = time.monotonic()
        reply = client.post(
            "/v1/chat/completions", json=_chat(model, max_tokens=1, priority=priority), timeout=120
        )
        timings[str(priority)] = {
            "status": reply.status_code,
            "seconds": round(time.monotonic() - started, 2),
            "waiting_before": waiting,
        }
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
    return timings


def _gauge(client: httpx.Client, name: str) -> float:
    try:
        text = client.get("/metrics", timeout=10).text
    except httpx.HTTPError:
        return -1.0
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                total += float(sample.value)
    return total


def engine_hang_check(server: VllmServer, client: httpx.Client, model: str) -> dict[str, Any]:
    """Whether the plugin's ``engine_hang`` holds a request and releasing it lets it finish."""
    server.faults.set("engine_hang", duration=60)
    time.sleep(0.5)  # the plugin re-reads its directory at most every 0.2 s
    held = False
    try:
        client.post("/v1/chat/completions", json=_chat(model, max_tokens=2), timeout=4)
    except httpx.TimeoutException:
        held = True
    health = client.get("/health", timeout=5).status_code
    server.faults.clear("engine_hang")
    started = time.monotonic()
    reply = client.post("/v1/chat/completions", json=_chat(model, max_tokens=2), timeout=60)
    return {
        "request_held": held,
        "health_while_hung": health,
        "after_clear_status": reply.status_code,
        "after_clear_s": round(time.monotonic() - started, 2),
    }


def per_engine_tokens(client: httpx.Client) -> dict[str, float]:
    """``vllm:generation_tokens_total`` per ``engine`` label."""
    text = client.get("/metrics", timeout=10).text
    tokens: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "vllm:generation_tokens_total":
                engine = sample.labels.get("engine", "")
                tokens[engine] = tokens.get(engine, 0.0) + float(sample.value)
    return tokens


def sigstop_check(
    server: VllmServer, client: httpx.Client, model: str, title: str
) -> dict[str, Any]:
    """SIGSTOP the processes titled ``title``; how many of 8 requests still finish, what
    ``/health`` says, which engines' token counters move; then SIGCONT everything."""
    before = per_engine_tokens(client)
    pids = server.signal(title, signal.SIGSTOP)
    results: list[int | str] = []

    def one() -> None:
        try:
            reply = client.post("/v1/chat/completions", json=_chat(model, max_tokens=4), timeout=8)
            results.append(reply.status_code)
        except httpx.HTTPError as error:
            results.append(type(error).__name__)

    try:
        threads = [threading.Thread(target=one) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        health = client.get("/health", timeout=5).status_code
        after = per_engine_tokens(client)
    finally:
        server.resume_all()
    return {
        "title": title,
        "pids": pids,
        "results": sorted(map(str, results)),
        "health_while_stopped": health,
        "tokens_before": before,
        "tokens_after": after,
    }


def probe(
    release: str,
    model_kind: str,
    extra: Sequence[str],
    full: bool,
    environment: dict[str, str] | None = None,
    stop_titles: Sequence[str] = (),
) -> dict[str, Any]:
    env = engine_env.ensure_env(release)
    model = engine_env.model_for(
        engine_env.ensure_model(engine_env.ensure_env(engine_env.DEFAULT_RELEASE), model_kind),
        release,
    )
    hooks = subprocess.run(
        [str(env.python), "-c", _HOOKS_SCRIPT], capture_output=True, text=True, check=False
    )
    report: dict[str, Any] = {
        "release": release,
        "model": model_kind,
        "extra_args": list(extra),
        "environment": environment or {},
        "hooks_installed": json.loads(hooks.stdout.strip().splitlines()[-1])
        if hooks.returncode == 0 and hooks.stdout.strip()
        else f"failed: {hooks.stderr.strip()[-300:]}",
    }
    extra = [*engine_env.release(release).server_args, *extra]
    report["extra_args"] = extra
    work = Path(tempfile.mkdtemp(prefix=f"sentinel-compat-{release}-"))
    server = VllmServer(
        env.python,
        model,
        served_model_name=f"tiny-{model_kind}",
        fault_dir=work / "faults",
        log_path=work / "vllm.log",
        extra_args=["--max-num-seqs", "2", *extra] if full else list(extra),
        environment=environment,
    )
    report["log"] = str(server.log_path)
    with server:
        try:
            report["start_to_first_answer_s"] = round(server.wait_ready(300), 1)
        except ServerError as error:
            report["start_error"] = str(error)[-4000:]
            return report
        report["processes"] = process_titles(server)
        with httpx.Client(base_url=server.base_url, timeout=30) as client:
            names, engines = metric_names(client.get("/metrics").text)
            report["metric_names"] = names
            report["engine_labels"] = engines
            report["structured_fields"] = structured_fields(client, server.served_model_name)
            if full:
                report["priority"] = priority_order(client, server.served_model_name)
            report["engine_hang"] = engine_hang_check(server, client, server.served_model_name)
            report["sigstop"] = [
                sigstop_check(server, client, server.served_model_name, title)
                for title in stop_titles
            ]
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Probe one vLLM release's observable facts.")
    parser.add_argument("--release", choices=sorted(engine_env.RELEASES), required=True)
    parser.add_argument("--model", choices=engine_env.MODEL_KINDS, default="text")
    parser.add_argument("--quick", action="store_true", help="skip the priority timing")
    parser.add_argument("--tag", default="", help="suffix of the report's file name")
    parser.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="server environment"
    )
    parser.add_argument(
        "--sigstop", action="append", default=[], metavar="TITLE", help="process title to stop"
    )
    args, extra = parser.parse_known_args(argv)
    environment = dict(item.split("=", 1) for item in args.env)
    report = probe(args.release, args.model, extra, not args.quick, environment, args.sigstop)
    out = engine_env.cache_dir() / "compat"
    out.mkdir(parents=True, exist_ok=True)
    name = f"{args.release}-{args.model}{'-' + args.tag if args.tag else ''}.json"
    (out / name).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
