"""One stuck rank or engine of a multi-process vLLM, caught and named (real vLLM 0.32).

vLLM's CPU backend runs the tiny text model with ``--tensor-parallel-size 2``
(``VLLM::EngineCore`` -> ``VLLM::Worker_TP0``, ``VLLM::Worker_TP1``) and with
``--data-parallel-size 2`` (``VLLM::EngineCore_DP0`` and ``_DP1``, each with
one ``VLLM::Worker``; every metric sample carries its ``engine`` label); see
docs/compat-notes.md. The server is pinned to one CPU, so each rank gets the
same OpenMP list (``VLLM_CPU_OMP_THREADS_BIND=0|0``).

- TP: SIGSTOP of ``VLLM::Worker_TP1`` stops the whole engine (every step needs
  every rank): liveness fails, and /status and the bundle name the stopped rank.
- DP: SIGSTOP of ``VLLM::EngineCore_DP1`` leaves engine 0 serving (a partial
  hang): sentinel reports a hang, and /status and the bundle name engine 1.
- DP: the chaos plugin's ``engine_hang`` aimed at engine 1 only (the fault file
  names the rank): nothing is stopped, only engine 1's own progress (its
  ``engine`` label) is flat. vLLM's balancer then sends no new request to
  engine 1 (the requests stuck there never finish), so only canaries aimed at
  it (``X-data-parallel-rank: 1``, which 0.32 honours) see it hang: a partial
  hang naming engine 1.

Each mode has its own server (a class-scoped fixture: one server at a time,
stopped before the next class starts). Slow on two cores (a server start is
70-90 s), so marked ``slow`` as well as ``engine``: ``make engine`` runs it,
``make test`` does not. Each test prints the detection seconds (run with ``-s``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from chaos.vllm_engine import env as engine_env
from chaos.vllm_engine.compat import per_engine_tokens
from chaos.vllm_engine.server import VllmServer, engine_cpus
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(900)]

TIMINGS: dict[str, Any] = {
    "hang_window": 10.0,
    "no_evidence_window": 15.0,
    "dead_grace": 2.0,
    "canaries": {
        "text": {"interval": 2.0, "deadline": 8.0, "jitter": 0.0},
        "structured": {"interval": 5.0, "deadline": 10.0},
        "multimodal": {"enabled": False},  # the tiny text model takes no images
    },
}
DETECT = 30.0  # the bar, from the fault to sentinel reporting a hang
GREEN = 120.0
BUNDLE = 60.0


def _server(tmp: Path, flag: str) -> VllmServer:
    env = engine_env.ensure_env()
    model = engine_env.ensure_model(env, "text")
    cpus = ",".join(str(c) for c in sorted(engine_cpus() or os.sched_getaffinity(0)))
    return VllmServer(
        env.python,
        model,
        served_model_name="tiny-text",
        fault_dir=tmp / "faults",
        log_path=tmp / "vllm.log",
        extra_args=[flag, "2"],
        environment={"VLLM_CPU_OMP_THREADS_BIND": f"{cpus}|{cpus}"},
    )


@pytest.fixture(scope="class")
def tp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    with _server(tmp_path_factory.mktemp("vllm-tp2"), "--tensor-parallel-size") as server:
        print(f"\nTP=2: first answer after {server.wait_ready(300):.1f} s")
        yield server


@pytest.fixture(scope="class")
def dp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    with _server(tmp_path_factory.mktemp("vllm-dp2"), "--data-parallel-size") as server:
        print(f"\nDP=2: first answer after {server.wait_ready(300):.1f} s")
        yield server


async def _hang_reported(sidecar: Sidecar, what: str) -> tuple[float, dict[str, Any]]:
    """Seconds until /status reports a hang (or /livez fails); the /status then."""

    async def reported() -> bool:
        status = await sidecar.json("/status")
        return bool(status["verdict"]["hangs"]) or await sidecar.code("/livez") == 503

    seconds = await eventually(reported, DETECT, f"a hang reported after {what}", 0.25)
    status: dict[str, Any] = await sidecar.json("/status")
    print(f"\n{what}: hang reported after {seconds:.1f} s: {status['verdict']['hangs']}")
    return seconds, status


def _named(status: dict[str, Any], title: str) -> dict[str, Any]:
    """The /status process entry titled ``title``."""
    engines = (status["evidence"]["processes"] or {}).get("engines") or []
    for entry in engines:
        if entry["name"] == title:
            found: dict[str, Any] = entry
            return found
    raise AssertionError(f"{title} not among /status processes: {engines}")


async def _bundle(sidecar: Sidecar) -> dict[str, Any]:
    """The bundle of the confirmed hang (one a missed deadline opened may come first)."""

    async def hang_bundles() -> list[dict[str, Any]]:
        recent = (await sidecar.json("/status"))["incidents"]["recent"]
        return [r for r in recent if r["trigger"] != "missed-deadline"]

    async def written() -> bool:
        return bool(await hang_bundles())

    await eventually(written, BUNDLE, "a confirmed hang's bundle in /status incidents.recent")
    path = Path((await hang_bundles())[-1]["path"])
    bundle: dict[str, Any] = json.loads((path / "bundle.json").read_text())
    return bundle


def _bundle_title(bundle: dict[str, Any], pid: int) -> str:
    for process in bundle["processes"]:
        if process["pid"] == pid:
            return str(process["title"])
    raise AssertionError(f"pid {pid} not in the bundle")


async def _stop_and_check(
    server: VllmServer, title: str, tmp_path: Path
) -> tuple[float, dict[str, Any], dict[str, Any], int]:
    async with running_sidecar(server.base_url, diagnostics_dir=tmp_path, **TIMINGS) as sidecar:
        await eventually(sidecar.green, GREEN, "startup, readiness and liveness 200")
        (pid,) = server.signal(title, signal.SIGSTOP)
        try:
            seconds, status = await _hang_reported(sidecar, f"SIGSTOP of {title}")
            bundle = await _bundle(sidecar)
        finally:
            server.resume_all()
        await eventually(sidecar.green, GREEN, f"green again after SIGCONT of {title}")
    return seconds, status, bundle, pid


def _per_engine_progress(server: VllmServer) -> dict[str, float]:
    """Generated tokens per ``engine`` label over 8 small requests (4 s timeouts)."""
    with httpx.Client(base_url=server.base_url, timeout=10) as client:
        before = per_engine_tokens(client)
        body = {
            "model": server.served_model_name,
            "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": 4,
        }

        def one() -> None:
            with contextlib.suppress(httpx.HTTPError):
                client.post("/v1/chat/completions", json=body, timeout=4)

        threads = [threading.Thread(target=one) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        after = per_engine_tokens(client)
    return {engine: after[engine] - before.get(engine, 0.0) for engine in after}


class TestTensorParallel:
    async def test_sigstop_of_one_rank_is_caught_and_the_rank_named(
        self, tp: VllmServer, tmp_path: Path
    ) -> None:
        title = "VLLM::Worker_TP1"
        seconds, status, bundle, pid = await _stop_and_check(tp, title, tmp_path)
        assert seconds <= DETECT
        assert any(
            1 in h.get("ranks", ()) or title in h["reason"] for h in status["verdict"]["hangs"]
        ), status["verdict"]["hangs"]
        assert _named(status, title)["state"] == "stopped", status["evidence"]["processes"]
        assert _named(status, "VLLM::Worker_TP0")["state"] != "stopped"
        assert bundle["cause"]["pid"] == pid, bundle["cause"]
        assert _bundle_title(bundle, pid).startswith(title)
        print(f"TP=2, {title} stopped: reported {seconds:.1f} s, bundle cause {bundle['cause']}")


class TestDataParallel:
    async def test_sigstop_of_one_engine_is_a_hang_naming_the_engine(
        self, dp: VllmServer, tmp_path: Path
    ) -> None:
        title = "VLLM::EngineCore_DP1"
        seconds, status, bundle, pid = await _stop_and_check(dp, title, tmp_path)
        assert seconds <= DETECT
        assert any(
            1 in h.get("engines", ()) or title in h["reason"] for h in status["verdict"]["hangs"]
        ), status["verdict"]["hangs"]
        assert _named(status, title)["state"] == "stopped", status["evidence"]["processes"]
        assert _named(status, "VLLM::EngineCore_DP0")["state"] != "stopped"
        assert bundle["cause"]["pid"] == pid, bundle["cause"]
        assert _bundle_title(bundle, pid).startswith(title)
        print(f"DP=2, {title} stopped: reported {seconds:.1f} s, bundle cause {bundle['cause']}")

    async def test_plugin_hang_of_one_engine_is_a_partial_hang_naming_it(
        self, dp: VllmServer
    ) -> None:
        async with running_sidecar(dp.base_url, **TIMINGS) as sidecar:
            await eventually(sidecar.green, GREEN, "startup, readiness and liveness 200")
            dp.faults.set("engine_hang", engine=1)
            started = time.monotonic()
            try:
                moved = await asyncio.to_thread(_per_engine_progress, dp)
                assert moved["0"] > 0, f"engine 0 must keep serving: {moved}"
                assert moved["1"] == 0, f"engine 1 must be held by the plugin: {moved}"
                seconds, status = await _hang_reported(sidecar, "engine_hang of DP engine 1")
            finally:
                dp.faults.clear("engine_hang")
            # Nothing is stopped: only engine 1's own progress names it.
            hangs = json.dumps(status["verdict"]["hangs"])
            progress = json.dumps(status["evidence"]["progress"])
            assert '"1"' in hangs or "engine 1" in hangs, (hangs, progress)
            await eventually(sidecar.green, GREEN, "green again after the hang cleared")
            print(
                f"DP=2 engine 1 hung: reported {seconds:.1f} s ({time.monotonic() - started:.1f})"
            )
