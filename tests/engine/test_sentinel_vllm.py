"""sentinel against the real vLLM: silent hangs caught, a busy server spared, a restart followed.

Shortened versions of the acceptance checks, on the session's real vLLM (CPU
build, tiny random PaliGemma, ``--max-num-seqs 4``) with faults injected by the
chaos plugin and by signals, and the real-vLLM scenarios' canary catalog (it
keeps special tokens, see ``PROBES``). Timings are shortened for a slow CPU
engine on shared cores (hang window 6 s, text canary every 2 s); detection
within 30 s of the shipped defaults is measured by the chaos scenarios. Each
test prints what it measured (run with ``-s``).

The restart test comes last: it kills EngineCore and starts the server again
(on the same port, so the sidecar keeps its target).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from chaos.load import LoadConfig, run_load
from tests.engine.session import START_DEADLINE, EngineServer
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar
from tests.timeline_png import check_timeline

pytestmark = [pytest.mark.engine, pytest.mark.timeout(300)]

# The shipped catalog, shortened timings.
TIMINGS: dict[str, Any] = {
    "hang_window": 6.0,
    "no_evidence_window": 10.0,
    "dead_grace": 2.0,
    "canaries": {
        "text": {"interval": 2.0, "deadline": 4.0, "jitter": 0.0},
        "structured": {"interval": 3.0, "deadline": 5.0},
        "multimodal": {"interval": 3.0, "deadline": 5.0},
        "correctness": {"interval": 3.0, "deadline": 5.0},
    },
}
DETECT = 30.0  # seconds from the fault to /livez 503
GREEN = 90.0  # startup (every canary kind once) or recovery, on two shared cores
BUNDLE = 30.0  # from detection to the bundle on disk
CAPTURE_LIMIT = 10.0  # a bundle's own capture time


@contextlib.asynccontextmanager
async def _sidecar(engine: EngineServer, **overrides: Any) -> AsyncIterator[Sidecar]:
    async with running_sidecar(engine.base_url, **{**TIMINGS, **overrides}) as sidecar:
        await eventually(sidecar.green, GREEN, "startup, readiness and liveness all 200")
        yield sidecar


async def _detect(sidecar: Sidecar, fault: Callable[[], object], what: str) -> tuple[float, str]:
    """Inject ``fault``; seconds until /livez is 503, and its reason."""
    fault()

    async def red() -> bool:
        return await sidecar.code("/livez") == 503

    seconds = await eventually(red, DETECT, f"/livez 503 after {what}", interval=0.25)
    reason = str((await sidecar.json("/livez"))["reason"])
    print(f"\n{what}: /livez 503 after {seconds:.1f} s ({reason})")
    return seconds, reason


async def _bundle(sidecar: Sidecar) -> tuple[dict[str, Any], Path]:
    """The first incident bundle this sidecar wrote, once it is on disk."""

    async def written() -> bool:
        return bool((await sidecar.json("/status"))["incidents"]["recent"])

    await eventually(written, BUNDLE, "a diagnostics bundle in /status incidents.recent")
    recent = (await sidecar.json("/status"))["incidents"]["recent"]
    path = Path(recent[-1]["path"])  # newest first: the last one is the first capture
    assert (path / "summary.txt").is_file(), path
    bundle: dict[str, Any] = json.loads((path / "bundle.json").read_text())
    return bundle, path


def _process(bundle: dict[str, Any], pid: int) -> dict[str, Any]:
    for process in bundle["processes"]:
        if process["pid"] == pid:
            found: dict[str, Any] = process
            return found
    raise AssertionError(f"pid {pid} not in the bundle: {[p['pid'] for p in bundle['processes']]}")


def _stack_text(bundle: dict[str, Any], pid: int) -> str:
    dump = bundle["stacks"].get(str(pid))
    assert dump is not None, f"no stack entry for pid {pid}: {sorted(bundle['stacks'])}"
    assert dump["ok"], f"no stacks for pid {pid}: {dump['error']}"
    text: str = dump["text"]
    assert text.strip(), f"empty stacks for pid {pid}"
    return text


def _check_capture_time(bundle: dict[str, Any]) -> float:
    duration = float(bundle["duration_s"])
    print(f"capture: {duration:.2f} s, cause {bundle['cause']['class']}")
    assert duration < CAPTURE_LIMIT, f"capture took {duration:.2f} s (limit {CAPTURE_LIMIT} s)"
    return duration


async def _no_incident_yet(sidecar: Sidecar) -> None:
    """A healthy server must not have opened an incident (the first capture is the fault's)."""
    incidents = (await sidecar.json("/status"))["incidents"]
    assert incidents["open"] is None, incidents
    assert incidents["recent"] == [], incidents


@dataclass
class _HealthWatch:
    """Polls vLLM's own /health on its own task; every status code seen."""

    base_url: str
    codes: list[int | str] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    async def _poll(self) -> None:
        async with httpx.AsyncClient(base_url=self.base_url, timeout=5.0) as client:
            while True:
                try:
                    self.codes.append((await client.get("/health")).status_code)
                except httpx.HTTPError as error:
                    self.codes.append(type(error).__name__)
                await asyncio.sleep(0.25)  # sampling vLLM's /health at a fixed rate

    def __enter__(self) -> _HealthWatch:
        self._task = asyncio.create_task(self._poll())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()


# -- issue 4 (1) and issue 5 (7, 8): plugin engine hang -----------------------------------


async def test_engine_hang_fails_liveness_while_vllm_health_stays_200(
    engine: EngineServer, tmp_path: Path
) -> None:
    async with _sidecar(engine, diagnostics_dir=tmp_path) as sidecar:
        await _no_incident_yet(sidecar)
        with _HealthWatch(engine.base_url) as health:
            try:
                seconds, reason = await _detect(
                    sidecar, lambda: engine.faults.set("engine_hang"), "engine hang"
                )
                assert "engine hang" in reason
                bundle, path = await _bundle(sidecar)
                status = await sidecar.json("/status")
                assert status["server"]["vllm_health_status"] == 200
            finally:
                engine.faults.clear("engine_hang")
        assert health.codes, "vLLM /health was never polled"
        assert set(health.codes) == {200}, f"vLLM /health not always 200: {health.codes}"
        print(f"vLLM /health: {len(health.codes)} polls, all 200")

        # The bundle: cause class, and the EngineCore caught inside the blocked step.
        assert bundle["cause"]["class"] == "engine_blocked", (bundle["cause"], path)
        core = engine.engine_core().pid
        stacks = _stack_text(bundle, core)
        assert "_process_engine_step" in stacks or "sentinel_chaos_vllm" in stacks, stacks
        # The plugin holds the engine inside its step wrapper (a per-engine wait loop).
        assert "_engine_step.<locals>.step" in stacks, (
            f"the plugin's blocking wait is not on the stack: {stacks}"
        )
        duration = _check_capture_time(bundle)
        print(f"engine hang: detected {seconds:.1f} s, capture {duration:.2f} s, bundle {path}")

        await eventually(sidecar.green, GREEN, "green again after the hang cleared")


# -- issue 4 (2) and issue 5 (6, 8): SIGSTOP ----------------------------------------------


async def test_sigstop_worker_is_caught_with_a_bundle_and_sigcont_recovers(
    engine: EngineServer, tmp_path: Path
) -> None:
    async with _sidecar(engine, diagnostics_dir=tmp_path) as sidecar:
        await _no_incident_yet(sidecar)
        api_pid = engine.api_pid
        epoch = int((await sidecar.json("/status"))["server"]["epoch"])
        worker = engine.worker().pid
        core = engine.engine_core().pid
        try:
            seconds, reason = await _detect(sidecar, engine.stop_worker, "SIGSTOP of the worker")
            assert "stopped" in reason or "engine hang" in reason, reason
            bundle, path = await _bundle(sidecar)
        finally:
            engine.resume_worker()

        assert bundle["cause"]["class"] == "process_stopped", (bundle["cause"], path)
        assert bundle["cause"]["pid"] == worker, bundle["cause"]
        assert _process(bundle, worker)["status"] == "stopped"
        _stack_text(bundle, api_pid)  # the API server's stacks
        _stack_text(bundle, core)  # EngineCore's stacks
        assert bundle["metrics"], "no /metrics snapshot in the bundle"
        assert any("vllm:" in scrape["text"] for scrape in bundle["metrics"])
        history = bundle["canary_history"]
        assert history.get("text"), f"no text canary history: {sorted(history)}"
        duration = _check_capture_time(bundle)
        print(f"SIGSTOP worker: detected {seconds:.1f} s, capture {duration:.2f} s, bundle {path}")
        print(f"SIGSTOP worker: timeline {check_timeline(path)}")

        recovered = await eventually(sidecar.green, GREEN, "green again after SIGCONT")
        print(f"SIGSTOP worker: green {recovered:.1f} s after SIGCONT")
        assert engine.api_pid == api_pid
        assert psutil.Process(api_pid).is_running()
        assert (await sidecar.json("/status"))["server"]["epoch"] == epoch


async def test_sigstop_engine_core_is_caught_and_sigcont_recovers(engine: EngineServer) -> None:
    async with _sidecar(engine) as sidecar:
        api_pid = engine.api_pid
        epoch = int((await sidecar.json("/status"))["server"]["epoch"])
        try:
            seconds, reason = await _detect(
                sidecar, engine.stop_engine_core, "SIGSTOP of EngineCore"
            )
            assert "stopped" in reason or "engine hang" in reason, reason
        finally:
            engine.resume_engine_core()
        recovered = await eventually(sidecar.green, GREEN, "green again after SIGCONT")
        print(
            f"SIGSTOP EngineCore: detected {seconds:.1f} s, green {recovered:.1f} s after SIGCONT"
        )
        assert engine.api_pid == api_pid
        assert (await sidecar.json("/status"))["server"]["epoch"] == epoch


# -- issue 4 (3): path hangs --------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "kind"), [("structured_hang", "structured"), ("multimodal_hang", "multimodal")]
)
async def test_path_hang_names_its_kind_while_text_passes(
    engine: EngineServer, fault: str, kind: str
) -> None:
    async with _sidecar(engine) as sidecar:
        try:
            seconds, reason = await _detect(
                sidecar, lambda: engine.faults.set(fault), f"{kind} path hang"
            )
            status = await sidecar.json("/status")
        finally:
            engine.faults.clear(fault)
        assert f"{kind} path hang" in reason, reason
        assert [h["kind"] for h in status["verdict"]["hangs"]] == [kind], status["verdict"]
        assert status["canaries"]["text"]["passing"] is True, status["canaries"]["text"]
        recovered = await eventually(sidecar.green, GREEN, f"green again after {fault} cleared")
        print(f"{kind} path hang: detected {seconds:.1f} s, green {recovered:.1f} s after clearing")


# -- issue 4 (4): saturation --------------------------------------------------------------


def _gauge(text: str, name: str) -> float:
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    )


async def _loop_lag(lags: list[float]) -> None:
    """Record how late each 0.1 s sleep of this event loop (the sidecar's) wakes up."""
    while True:
        asked = time.monotonic()
        await asyncio.sleep(0.1)  # measuring the loop's own lag
        lags.append(time.monotonic() - asked - 0.1)


STALL_LIMIT = 2.0  # seconds the sidecar's event loop may lag before a verdict means nothing


async def test_saturation_never_fails_liveness(engine: EngineServer) -> None:
    """64 long requests against 4 slots for 45 s: the canaries wait, liveness never fails.

    The sidecar runs in this test's process and event loop. If that loop itself stalls
    (measured: on two shared cores, a saturated real vLLM can leave this process waiting
    for the CPU for tens of seconds), canaries "time out" only because the sidecar did not
    run, and the verdict says nothing about the server: the test then xfails with the
    figures instead of passing or failing on them.
    """
    async with _sidecar(engine) as sidecar:
        lags: list[float] = []
        lag = asyncio.create_task(_loop_lag(lags))
        load = asyncio.create_task(
            run_load(
                LoadConfig(
                    target=engine.base_url,
                    concurrency=64,
                    duration=45,
                    max_tokens=1500,  # prompt plus reply stay within the model's 2048
                    timeout=120,
                )
            )
        )
        livez: list[int | str] = []
        waiting: list[float] = []
        loop = asyncio.get_running_loop()
        end = loop.time() + 45
        next_scrape = loop.time() + 3
        try:
            async with httpx.AsyncClient(base_url=engine.base_url, timeout=5.0) as vllm:
                while loop.time() < end:
                    try:
                        livez.append(await sidecar.code("/livez"))
                    except httpx.HTTPError as error:  # no answer is a failed probe too
                        livez.append(type(error).__name__)
                    if loop.time() >= next_scrape:
                        next_scrape += 3
                        with contextlib.suppress(httpx.HTTPError):
                            metrics = (await vllm.get("/metrics")).text
                            waiting.append(_gauge(metrics, "vllm:num_requests_waiting"))
                    await asyncio.sleep(0.25)  # the probe rate the check is about
        finally:
            lag.cancel()
            load.cancel()  # the rest of the queue is aborted by closing its connections
            await asyncio.gather(lag, load, return_exceptions=True)
        status = await sidecar.json("/status")

        latency = {
            kind: [r["duration"] for r in record["last"] if r["reason"] == "ok"]
            for kind, record in status["canaries"].items()
        }
        reasons = {
            kind: [r["reason"] for r in rec["last"]] for kind, rec in status["canaries"].items()
        }
        failures = len([code for code in livez if code != 200])
        stall = max(lags, default=0.0)
        figures = (
            f"{len(livez)} /livez polls, {failures} failures; sidecar loop lag max {stall:.1f} s; "
            f"vLLM waiting queue {waiting}; canary latency (s, last 10 ok per kind) {latency}; "
            f"canary outcomes {reasons}; priority {status['priority']}"
        )
        print(f"\nsaturation: {figures}")
        if stall > STALL_LIMIT:
            pytest.xfail(f"the sidecar's own event loop stalled {stall:.1f} s: {figures}")
        assert max(waiting, default=0) >= 32, f"the load did not saturate 4 slots: {figures}"
        assert failures == 0, f"liveness failures under saturation: {figures}; {livez}"
        assert status["priority"]["effective"] is True, status["priority"]


async def _restart(engine: EngineServer) -> float:
    """``engine.restart()`` without blocking the sidecar's event loop.

    The server is started from this (the main) thread: it dies with the thread that
    started it (``PR_SET_PDEATHSIG``), and a worker thread of the loop's executor ends
    with the loop, at the end of the test. Stopping and waiting run in worker threads.
    """
    await asyncio.to_thread(engine.server.stop)
    engine.faults.clear_all()
    engine.server.start()
    engine.start_seconds = await asyncio.to_thread(engine.server.wait_ready, START_DEADLINE)
    engine.restarts += 1
    return engine.start_seconds


# -- issue 4 (5): SIGKILL of EngineCore, then a restart; last, as it restarts the server ----


async def test_sigkill_engine_core_then_restart_re_enters_startup_and_turns_green(
    engine: EngineServer,
) -> None:
    async with _sidecar(engine) as sidecar:
        url = engine.base_url
        epoch = int((await sidecar.json("/status"))["server"]["epoch"])
        engine.kill_engine_core()
        started = time.monotonic()

        async def exited() -> bool:
            return not engine.alive()

        gone = await eventually(exited, 60, "vLLM to exit after EngineCore's SIGKILL")
        print(f"\nSIGKILL EngineCore: vLLM exited after {gone:.1f} s")

        async def new_epoch() -> bool:
            return int((await sidecar.json("/status"))["server"]["epoch"]) > epoch

        await eventually(new_epoch, 30, "a new server epoch after vLLM exited")
        assert await sidecar.code("/startupz") == 503
        assert await sidecar.code("/livez") == 200  # no stale red verdict from the dead server

        seconds = await _restart(engine)
        assert engine.base_url == url, "the restarted server moved; the sidecar cannot follow"
        print(f"SIGKILL EngineCore: server restarted in {seconds:.1f} s on the same URL")

        await eventually(sidecar.green, GREEN, "green after the restart")
        status = await sidecar.json("/status")
        assert status["server"]["epoch"] > epoch
        assert status["verdict"]["hangs"] == [], status["verdict"]

        # The watcher searches for a new server with a growing pause (up to 16 s)
        # while none owns the port, so attribution may trail readiness a little.
        async def attributed() -> bool:
            processes = (await sidecar.json("/status"))["evidence"]["processes"]
            return bool(processes.get("api")) and processes["api"]["pid"] == engine.api_pid

        await eventually(attributed, 30, "the restarted API server attributed")
        print(
            f"SIGKILL EngineCore: green {time.monotonic() - started:.1f} s after the kill, "
            f"epoch {epoch} -> {status['server']['epoch']} ({status['server']['epoch_reason']})"
        )
