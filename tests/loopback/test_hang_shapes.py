"""Every hang shape, end to end: sentinel against the simulator, one fault per case.

What docs/design.md "Verdict semantics" promises, held at loopback with scaled-down
timings (hang window 4 s, broken window 16 s, listener-down grace 3 s, canary
interval 1 s; the shipped 15 s window scales to 4 s and the others by the same
ratio, so "red within 45 s" becomes red within :data:`RED_WITHIN`):

- a hung engine that still looks busy (stuck requests in ``running``, a
  churning waiting gauge, growing preemptions, prefills without decode,
  streams that stop after one token) is an *engine* hang;
- the two that stop decoding do so with another client arriving every
  second, whose prefills and first tokens are real work but no decode;
- every canary failing fast (a reset, a 500 storm, an empty 200) with no
  progress is an *engine* hang after the hang window and *broken* after the
  broken window; at the shipped ratio (60 s to 15 s) the engine rule fires first;
- a closed listener behind a live API-server process is *listener down*;
- a slow server (2 s per token, judged with the shipped canary deadlines) and
  a busy server whose ``/metrics`` lapses for less than the no-evidence window
  never fail liveness;
- sentinel's own process paused again and again does not hide a hang;
- two servers on one host: one stopped engine never turns the other's
  sentinel red.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from chaos.load import LoadConfig, run_load
from chaos.ports import free_port
from chaos.scenario import SCENARIO_DIR, load_scenario
from sentinel.config.settings import Settings
from sentinel_sim.launch import SimProcess
from tests.loopback.sidecar import FAST, Sidecar, eventually, running_sidecar

pytestmark = pytest.mark.timeout(240)

HANG_WINDOW = float(FAST["hang_window"])
NO_EVIDENCE_WINDOW = float(FAST["no_evidence_window"])
RED_WITHIN = 25.0  # 45 s at the shipped 15 s window, scaled by 4/15 with room for a busy box
GREEN_WITHIN = 30.0

# The broken window scaled like the hang window (60 s against 15 s), so the
# kind that fires first is the one that fires first with the shipped defaults.
# The listener-down grace stays under the hang window: at the shipped 30 s a
# canary reset as the listener closes can confirm an engine hang first.
# Offered only to a Settings that knows them: an older one would refuse the
# whole configuration, and its defaults (60 s, 30 s) then miss RED_WITHIN,
# which is the honest failure.
SCALED: dict[str, Any] = {"broken_window": 16.0, "listener_grace": 3.0}
TIMINGS: dict[str, Any] = {k: v for k, v in SCALED.items() if k in Settings.model_fields}


# Slow decode is judged with the shipped canary deadlines (8 s text, 10 s
# structured and multimodal): at 2 s per token a scaled 2 s deadline cannot fit
# even the text control's 2 tokens, which would test the arithmetic, not the
# rule. The windows stay short but never shorter than the deadlines they judge.
SHIPPED_DEADLINES: dict[str, Any] = {
    "hang_window": 10.0,
    "no_evidence_window": 12.0,
    "broken_window": 10.0,
    "canaries": {
        "text": {"interval": 4.0, "deadline": 8.0, "jitter": 0.0},
        "structured": {"interval": 5.0, "deadline": 10.0},
        "multimodal": {"interval": 5.0, "deadline": 10.0},
    },
}


@contextlib.asynccontextmanager
async def _sidecar(target: str, **overrides: Any) -> AsyncIterator[Sidecar]:
    async with running_sidecar(target, **{**TIMINGS, **overrides}) as sidecar:
        await eventually(sidecar.green, GREEN_WITHIN, "startup, readiness and liveness all 200")
        yield sidecar


async def _red(sidecar: Sidecar, deadline: float = RED_WITHIN) -> float:
    async def red() -> bool:
        return await sidecar.code("/livez") == 503

    return await eventually(red, deadline, "/livez 503 (a confirmed hang)")


async def _hang_kinds(sidecar: Sidecar) -> list[str]:
    status = await sidecar.json("/status")
    return [str(h["kind"]) for h in status["verdict"]["hangs"]]


async def _liveness_failures(sidecar: Sidecar, seconds: float) -> int:
    """Poll ``/livez`` for ``seconds`` and count the 503s."""
    failures = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if await sidecar.code("/livez") != 200:
            failures += 1
        await asyncio.sleep(0.2)  # the polling interval, not a wait for a state
    return failures


@pytest.fixture
def sim() -> Iterator[SimProcess]:
    with SimProcess() as process:
        yield process


# -- every hang shape turns liveness red, with the right kind ----------------

# (fault, its parameters, the kind confirmed first, every kind a scenario may see)
SHAPES = [
    pytest.param("stuck_running", {"requests": 2}, "engine", {"engine"}, id="stuck-running"),
    pytest.param("waiting_churn", {"period": 0.3}, "engine", {"engine"}, id="waiting-churn"),
    pytest.param("preemption_churn", {"period": 0.3}, "engine", {"engine"}, id="preemption-churn"),
    pytest.param("prefill_no_decode", {}, "engine", {"engine"}, id="prefill-no-decode"),
    pytest.param("stall_after_first", {}, "engine", {"engine"}, id="stall-after-first"),
    pytest.param("reset_all", {}, "engine", {"engine", "broken"}, id="reset-all"),
    pytest.param("error_5xx", {"rate": 1.0}, "engine", {"engine", "broken"}, id="500-storm"),
    pytest.param("empty_200", {}, "engine", {"engine", "broken"}, id="empty-200"),
    pytest.param("listener_closed", {}, "listener_down", {"listener_down"}, id="listener-closed"),
]


@pytest.mark.parametrize(("fault", "params", "kind", "acceptable"), SHAPES)
async def test_hang_shape_is_confirmed_with_its_kind(
    sim: SimProcess, fault: str, params: dict[str, Any], kind: str, acceptable: set[str]
) -> None:
    async with _sidecar(sim.base_url) as sidecar:
        epoch = (await sidecar.json("/status"))["server"]["epoch"]
        sim.control.set_fault(fault, **params)
        await _red(sidecar)
        kinds = await _hang_kinds(sidecar)
        assert kinds == [kind], f"{fault}: confirmed {kinds} first, expected {kind}"
        status = await sidecar.json("/status")
        assert status["server"]["epoch"] == epoch, "a fault is not a server restart"


async def _arrivals(base_url: str, every: float, tasks: set[asyncio.Task[None]]) -> None:
    """Another client: a request every ``every`` seconds, each given up after 10 s."""
    async with httpx.AsyncClient(base_url=base_url, timeout=10.0) as client:

        async def one() -> None:
            body = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 16}
            with contextlib.suppress(httpx.HTTPError):
                await client.post("/v1/chat/completions", json=body)

        try:
            while True:
                task = asyncio.create_task(one())
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                await asyncio.sleep(every)  # the arrival rate, not a wait for a state
        finally:
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


@pytest.mark.parametrize("fault", ["prefill_no_decode", "stall_after_first"])
async def test_stuck_decode_is_confirmed_while_other_clients_arrive(
    sim: SimProcess, fault: str
) -> None:
    # Each arrival's prefill (and first token) is new work; only decode
    # progress, which these faults never make, tells the engine is stuck.
    async with _sidecar(sim.base_url) as sidecar:
        requests: set[asyncio.Task[None]] = set()
        client = asyncio.create_task(_arrivals(sim.base_url, 1.0, requests))
        try:
            sim.control.set_fault(fault)

            async def prefilled() -> float:
                totals = (await sidecar.json("/status"))["evidence"]["progress"]["epoch_totals"]
                return float(totals.get("prompt_tokens", {}).get("progress", 0.0))

            before = await prefilled()

            async def arrivals_prefilled() -> bool:
                return await prefilled() > before

            await eventually(arrivals_prefilled, RED_WITHIN, "arrivals' prefills counted")
            await _red(sidecar)
            assert await _hang_kinds(sidecar) == ["engine"]
        finally:
            client.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await client


# -- the still-engine rule: no step at all confirms before the hang window ----

# The hang window well beyond the step window, so which rule fired is plain.
STILL: dict[str, Any] = {"hang_window": 12.0, "no_evidence_window": 14.0, "step_window": 3.0}


async def _reasons(sidecar: Sidecar) -> list[str]:
    status = await sidecar.json("/status")
    return [str(h["reason"]) for h in status["verdict"]["hangs"]]


async def test_a_still_engine_is_confirmed_within_the_step_window(sim: SimProcess) -> None:
    """An idle engine hangs; no counter moves, not even for the canary: red at the step window.

    Without its processes in view, so the frozen rule (which would fire as soon) cannot.
    """
    async with _sidecar(sim.base_url, **STILL, watch_processes=False) as sidecar:
        sim.control.set_fault("engine_hang")
        # A canary every second, the step window, a scrape and an evaluation fit
        # well under the 12 s hang window; which rule fired is in the reason.
        await _red(sidecar, 10.0)
        reasons = await _reasons(sidecar)
        assert any("no engine step at all" in r for r in reasons), reasons


@pytest.mark.parametrize(
    ("fault", "params", "words"),
    [
        # A request stuck in the batch: the gauges show it, so the still rule
        # keeps out, but the engine's processes use no CPU at all.
        pytest.param("stuck_running", {"requests": 1}, "using no CPU", id="stuck-in-batch"),
        # An idle engine spinning in its hang: CPU used, so the frozen rule
        # keeps out and the still rule (no step at all) confirms.
        pytest.param("engine_hang", {"spin": True}, "no engine step at all", id="spinning"),
    ],
)
async def test_the_frozen_rule_confirms_a_blocked_engine_and_keeps_out_of_a_spinning_one(
    sim: SimProcess, fault: str, params: dict[str, Any], words: str
) -> None:
    """Red within a few seconds either way; the reason names the rule that fired."""
    async with _sidecar(sim.base_url, **STILL) as sidecar:
        sim.control.set_fault(fault, **params)
        await _red(sidecar, 10.0)
        reasons = await _reasons(sidecar)
        assert any(words in r for r in reasons), reasons


@pytest.mark.parametrize(
    ("fault", "params"),
    [
        # Each canary's prefill is a step: the still rule keeps out.
        pytest.param("prefill_no_decode", {}, id="prefill-no-decode"),
        # Real requests stuck in the engine: counters flat while the gauges show
        # requests, what sentinel sees of a healthy vLLM prefilling one long
        # prompt in chunks (no counter moves until its first token).
        pytest.param("stuck_running", {"requests": 2}, id="stuck-running"),
    ],
)
async def test_hangs_the_still_rule_keeps_out_of_wait_for_the_hang_window(
    sim: SimProcess, fault: str, params: dict[str, Any]
) -> None:
    """The hang window's rules confirm these; the still rule never does."""
    async with _sidecar(sim.base_url, **STILL) as sidecar:
        sim.control.set_fault(fault, **params)
        await _red(sidecar, RED_WITHIN + float(STILL["hang_window"]))
        assert await _hang_kinds(sidecar) == ["engine"]
        reasons = await _reasons(sidecar)
        assert not any("no engine step at all" in r for r in reasons), reasons


def test_slow_decode_never_trips_the_still_rule(slow_decode: SlowDecode) -> None:
    """A step every 2 s (2 s per token) against a 3 s step window: never red."""
    assert _held(slow_decode, "still-rule") == 0


# -- progress, however slow, is never a hang ----------------------------------


async def _slow_decode_failures(observe: float, background: bool = False, **overrides: Any) -> int:
    """Liveness failures over ``observe`` s of 2 s per token, on a server of its own."""
    with SimProcess() as sim:
        async with _sidecar(sim.base_url, **{**SHIPPED_DEADLINES, **overrides}) as sidecar:
            sim.control.set_fault("slow_decode", token_s=2.0)
            load = None
            if background:
                config = LoadConfig(
                    target=sim.base_url, concurrency=2, duration=observe, max_tokens=32, stream=True
                )
                load = asyncio.create_task(run_load(config))
            try:
                return await _liveness_failures(sidecar, observe)
            finally:
                if load is not None:
                    load.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await load


SlowDecode = dict[str, int | BaseException]


@pytest.fixture(scope="module")
def slow_decode() -> SlowDecode:
    """The three slow-decode servers held at once, each with its own simulator and sentinel.

    The file pays for the longest hold rather than the sum; each test then asserts on
    the liveness failures its own server's sentinel showed.
    """
    hang_window = float(SHIPPED_DEADLINES["hang_window"])

    async def held() -> SlowDecode:
        names = ("alone", "with-other-streams", "still-rule")
        got = await asyncio.gather(
            # Three hang windows: each canary kind misses its deadline several times over.
            _slow_decode_failures(3 * hang_window),
            _slow_decode_failures(3 * hang_window, background=True),
            _slow_decode_failures(2 * hang_window, step_window=3.0),
            return_exceptions=True,
        )
        return dict(zip(names, got, strict=True))

    return asyncio.run(held())


def _held(slow_decode: SlowDecode, name: str) -> int:
    got = slow_decode[name]
    if isinstance(got, BaseException):
        raise got
    return got


@pytest.mark.parametrize("background", [False, True], ids=["alone", "with-other-streams"])
def test_slow_decode_two_seconds_per_token_never_fails_liveness(
    slow_decode: SlowDecode, background: bool
) -> None:
    assert _held(slow_decode, "with-other-streams" if background else "alone") == 0


async def test_metrics_lapse_on_a_busy_server_within_the_no_evidence_window() -> None:
    # Saturated FCFS: canaries queue behind real work while counters move.
    with SimProcess(max_num_seqs=4, decode_tps=40) as sim:
        async with _sidecar(sim.base_url) as sidecar:
            lapse = 0.75 * NO_EVIDENCE_WINDOW
            config = LoadConfig(
                target=sim.base_url,
                concurrency=24,
                duration=2 * HANG_WINDOW + lapse + HANG_WINDOW,
                max_tokens=64,
                timeout=60,
            )
            load = asyncio.create_task(run_load(config))
            try:
                assert await _liveness_failures(sidecar, 2 * HANG_WINDOW) == 0
                sim.control.set_fault("metrics_lapse", duration=lapse)
                assert await _liveness_failures(sidecar, lapse + HANG_WINDOW) == 0
            finally:
                load.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await load


# -- a paused sidecar, two servers on one host --------------------------------


def _config_file(path: Path) -> Path:
    settings = {
        key: value
        for key, value in {**FAST, **TIMINGS}.items()
        if key not in ("listen", "grpc_listen")
    }
    settings["diagnostics"] = False
    path.write_text(yaml.safe_dump(settings))
    return path


@contextlib.contextmanager
def _sentinel_process(target: str, config: Path, port: int) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sentinel",
            "run",
            "--target",
            target,
            "--listen",
            f"127.0.0.1:{port}",
            "--grpc-listen",
            f"127.0.0.1:{free_port()}",
            "--config",
            str(config),
            "--log-level",
            "warning",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGCONT)
            process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def _pause_periodically(pid: int, pause: float, every: float) -> None:
    """SIGSTOP ``pid`` for ``pause`` seconds out of every ``every``: a starved node."""
    while True:
        await asyncio.sleep(every - pause)
        os.kill(pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(pause)
        finally:
            os.kill(pid, signal.SIGCONT)


async def test_periodic_sidecar_pause_does_not_hide_an_engine_hang(
    sim: SimProcess, tmp_path: Path
) -> None:
    # 2.6 s out of every 5 s: the stretches sentinel sees (2.4 s) are all
    # shorter than the hang window, so only a window clock that pauses over
    # unobserved time, rather than starting over, can ever confirm the hang.
    pause, every = 2.6, 5.0
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with _sentinel_process(sim.base_url, _config_file(tmp_path / "sentinel.yaml"), port) as proc:
        async with httpx.AsyncClient(timeout=5.0) as client:

            async def code(path: str) -> int:
                try:
                    return (await client.get(url + path)).status_code
                except httpx.TransportError:
                    return 0

            async def green() -> bool:
                return [await code(p) for p in ("/startupz", "/readyz", "/livez")] == [200] * 3

            await eventually(green, GREEN_WITHIN, "the sentinel process green")
            pauser = asyncio.create_task(_pause_periodically(proc.pid, pause, every))
            try:
                sim.control.set_fault("engine_hang")

                async def red() -> bool:
                    return await code("/livez") == 503

                await eventually(red, 60.0, "/livez 503 despite the pauses", interval=0.2)
            finally:
                pauser.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pauser
                os.kill(proc.pid, signal.SIGCONT)


async def test_two_servers_on_one_host_stopping_one_engine_spares_the_other() -> None:
    with SimProcess() as first, SimProcess() as second:
        async with (
            _sidecar(first.base_url) as watching_first,
            _sidecar(second.base_url) as watching_second,
        ):

            async def attributed() -> bool:
                status = await watching_second.json("/status")
                return status["evidence"]["processes"] is not None

            # The first process sample may come after the first /status under load.
            await eventually(attributed, GREEN_WITHIN, "the processes attributed")
            processes = (await watching_second.json("/status"))["evidence"]["processes"]
            assert processes["api"]["pid"] == second.api_pid
            assert [p["pid"] for p in processes["engines"]] == [second.engine_pid]
            os.kill(first.engine_pid, signal.SIGSTOP)
            try:
                await _red(watching_first)
                assert await _liveness_failures(watching_second, 2 * HANG_WINDOW) == 0
            finally:
                os.kill(first.engine_pid, signal.SIGCONT)


# -- the same shapes as chaos scenarios ----------------------------------------


@pytest.mark.parametrize(("fault", "params", "kind", "acceptable"), SHAPES)
def test_each_shape_has_a_chaos_scenario_expecting_its_kinds(
    fault: str, params: dict[str, Any], kind: str, acceptable: set[str]
) -> None:
    scenarios = [load_scenario(p) for p in sorted(SCENARIO_DIR.glob("sim-*.yaml"))]
    matching = [s for s in scenarios if s.fault.kind == fault and s.expect.hang_kinds]
    assert matching, f"no chaos scenario injects {fault}"
    for s in matching:
        assert set(s.expect.hang_kinds or ()) == acceptable, s.name
        assert s.expect.hang_kinds_met([kind]), s.name
        assert s.expect.hang_kinds_met(sorted(acceptable)), s.name


def test_a_scenario_expecting_kinds_wants_some_and_no_other() -> None:
    broken = next(
        load_scenario(p)
        for p in sorted(SCENARIO_DIR.glob("sim-*.yaml"))
        if load_scenario(p).fault.kind == "empty_200"
    )
    assert not broken.expect.hang_kinds_met([])
    assert not broken.expect.hang_kinds_met(["engine", "listener_down"])


@pytest.mark.parametrize("fault", ["slow_decode", "metrics_lapse"])
def test_spared_shapes_have_chaos_scenarios_expecting_no_failure(fault: str) -> None:
    scenarios = [load_scenario(p) for p in sorted(SCENARIO_DIR.glob("sim-*.yaml"))]
    assert any(s.fault.kind == fault and s.expect.no_liveness_failure for s in scenarios)
