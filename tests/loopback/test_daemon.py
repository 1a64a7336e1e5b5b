"""The sidecar against the simulated vLLM over real sockets: hangs caught, busy servers spared.

Timings are shortened (hang window 4 s, canary interval 1 s); the shipped
defaults are exercised by the demo and the benchmarks.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from chaos.load import LoadConfig, run_load
from chaos.ports import free_port
from sentinel.canary.catalog import default_directory
from sentinel.canary.result import CanaryResult
from sentinel.target import target_port
from sentinel_sim.launch import SimProcess
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def sim() -> Iterator[SimProcess]:
    with SimProcess(scheduling_policy="priority") as process:
        yield process


async def _wait_green(sidecar: Sidecar) -> None:
    await eventually(sidecar.green, 20, "startup, readiness and liveness all 200")


async def _wait_red(sidecar: Sidecar, deadline: float = 20) -> dict[str, object]:
    async def red() -> bool:
        return await sidecar.code("/livez") == 503

    await eventually(red, deadline, "/livez 503")
    body: dict[str, object] = await sidecar.json("/livez")
    return body


async def test_engine_hang_via_control_api_turns_liveness_red_then_green(sim: SimProcess) -> None:
    async with running_sidecar(sim.base_url) as sidecar:
        await _wait_green(sidecar)
        assert await sidecar.grpc_status("liveness") == "SERVING"
        sim.control.set_fault("engine_hang")
        body = await _wait_red(sidecar)
        assert "engine hang" in str(body["reason"])
        assert await sidecar.grpc_status("liveness") == "NOT_SERVING"
        assert await sidecar.code("/readyz") == 503
        status = await sidecar.json("/status")
        assert status["server"]["vllm_health_status"] == 200  # vLLM's own /health is fooled
        sim.control.clear_all()
        await _wait_green(sidecar)
        assert await sidecar.grpc_status("liveness") == "SERVING"
        assert status["server"]["epoch"] == (await sidecar.json("/status"))["server"]["epoch"]


async def test_sigstop_of_engine_child_is_caught_and_sigcont_recovers(sim: SimProcess) -> None:
    async with running_sidecar(sim.base_url) as sidecar:
        await _wait_green(sidecar)
        os.kill(sim.engine_pid, signal.SIGSTOP)
        try:
            body = await _wait_red(sidecar)
            assert "stopped" in str(body["reason"]) or "engine hang" in str(body["reason"])
            assert await sidecar.grpc_status("liveness") == "NOT_SERVING"
            assert await sidecar.code("/readyz") == 503
        finally:
            os.kill(sim.engine_pid, signal.SIGCONT)
        await _wait_green(sidecar)


PATH_HANGS = {"structured": "structured_hang", "multimodal": "multimodal_hang"}
Seen = tuple[str, dict[str, Any]] | BaseException  # /livez's reason and /status, when red


async def _path_hang(fault: str) -> tuple[str, dict[str, Any]]:
    """Red with the fault, then green again once it is cleared, on a server of its own."""
    with SimProcess(scheduling_policy="priority") as sim:
        async with running_sidecar(sim.base_url) as sidecar:
            await _wait_green(sidecar)
            sim.control.set_fault(fault)
            reason = str((await _wait_red(sidecar, deadline=30))["reason"])
            status = await sidecar.json("/status")
            sim.control.clear_all()
            await _wait_green(sidecar)
            return reason, status


@pytest.fixture(scope="module")
def path_hangs() -> dict[str, Seen]:
    """Both path hangs at once, each on its own simulator and sentinel (one wait, not two)."""

    async def both() -> list[Seen]:
        faults = PATH_HANGS.values()
        return await asyncio.gather(*map(_path_hang, faults), return_exceptions=True)

    return dict(zip(PATH_HANGS, asyncio.run(both()), strict=True))


@pytest.mark.parametrize(("fault", "kind"), [(f, k) for k, f in PATH_HANGS.items()])
def test_path_hang_names_its_kind_while_text_passes(
    path_hangs: dict[str, Seen], fault: str, kind: str
) -> None:
    got = path_hangs[kind]
    if isinstance(got, BaseException):
        raise got
    reason, status = got
    assert f"{kind} path hang" in reason
    assert status["canaries"]["text"]["passing"] is True
    assert [h["kind"] for h in status["verdict"]["hangs"]] == [kind]


async def test_mid_stream_stall_of_a_streaming_canary_is_detected(
    sim: SimProcess, tmp_path: Path
) -> None:
    probes = tmp_path / "probes"
    shutil.copytree(str(default_directory()), probes, ignore=shutil.ignore_patterns("*.py"))
    text = yaml.safe_load((probes / "text.yaml").read_text())
    text["stream"] = True
    text["request"]["max_tokens"] = 8
    (probes / "text.yaml").write_text(yaml.safe_dump(text))
    for other in ("structured.yaml", "multimodal.yaml", "correctness.yaml"):
        (probes / other).unlink(missing_ok=True)
    fast_text = {"text": {"interval": 1.0, "deadline": 2.0, "jitter": 0.0}}
    async with running_sidecar(sim.base_url, catalog=probes, canaries=fast_text) as sidecar:
        await _wait_green(sidecar)
        sim.control.set_fault("stream_stall")
        body = await _wait_red(sidecar, deadline=40)
        assert "engine hang" in str(body["reason"])
        last = (await sidecar.json("/status"))["canaries"]["text"]["last"]
        assert "timeout" in [r["reason"] for r in last]


async def test_slow_decode_with_rising_counters_is_never_killed(sim: SimProcess) -> None:
    """Every canary misses its deadline, yet tokens keep flowing: liveness stays 200."""
    async with running_sidecar(sim.base_url) as sidecar:
        await _wait_green(sidecar)
        # 100 tok/s / 100 = 1 tok/s per sequence: a 2-token canary needs about 3 s,
        # past its 2 s deadline, while 12 background streams keep decoding. The
        # step period stays well inside the (scaled) 4 s hang window, as 2 s per
        # token does inside the shipped 15 s one.
        sim.control.set_fault("slow_decode", factor=100)
        load = asyncio.create_task(
            run_load(
                LoadConfig(
                    target=sim.base_url, concurrency=12, duration=25, max_tokens=64, timeout=60
                )
            )
        )
        livez: list[int] = []
        loop = asyncio.get_running_loop()
        end = loop.time() + 20
        while loop.time() < end:
            livez.append(await sidecar.code("/livez"))
            await asyncio.sleep(0.2)
        load.cancel()
        await asyncio.gather(load, return_exceptions=True)
        metrics = await sidecar.client.get(sidecar.url + "/metrics")
        timeouts = _sample(metrics.text, "sentinel_canary_total", reason="timeout")
        assert timeouts >= 5, f"only {timeouts} canary timeouts: the test did not slow decode"
        assert set(livez) == {200}, f"liveness failed on a busy server: {livez.count(503)} x 503"


@pytest.mark.parametrize("policy", ["priority", "fcfs"])
async def test_saturation_never_fails_liveness(policy: str) -> None:
    with SimProcess(scheduling_policy=policy, max_num_seqs=4) as sim:
        async with running_sidecar(sim.base_url) as sidecar:
            await _wait_green(sidecar)
            load = asyncio.create_task(
                run_load(
                    LoadConfig(
                        target=sim.base_url,
                        concurrency=200,
                        duration=20,
                        max_tokens=256,
                        # One request per client: 196 wait behind 4 running (2.56 s each
                        # at 100 tokens/s), a queue that outlasts the 18 s watched many
                        # times over, and none is sent again to wait another 22 s after it.
                        max_requests=200,
                        # Those still queued when the 18 s watched are over time out
                        # rather than drain for a minute: saturation is what is tested.
                        timeout=22,
                    )
                )
            )
            livez: list[int] = []
            loop = asyncio.get_running_loop()
            end = loop.time() + 18
            while loop.time() < end:
                livez.append(await sidecar.code("/livez"))
                await asyncio.sleep(0.2)
            result = await load
            status = await sidecar.json("/status")
        assert result.summary()["completed"] > 0
        assert set(livez) == {200}, f"{livez.count(503)} liveness failures under saturation"
        assert status["priority"]["effective"] is (policy == "priority")


async def test_server_restart_re_evaluates_startup_without_stale_red() -> None:
    port = free_port()
    with SimProcess(scheduling_policy="priority", extra_args=["--port", str(port)]) as first:
        url = first.base_url
        async with running_sidecar(url) as sidecar:
            await _wait_green(sidecar)
            first.control.set_fault("engine_hang")
            await _wait_red(sidecar)
            epoch = int((await sidecar.json("/status"))["server"]["epoch"])
            first.stop()

            async def restarted() -> bool:
                return int((await sidecar.json("/status"))["server"]["epoch"]) > epoch

            await eventually(restarted, 15, "a new server epoch after the restart")
            assert await sidecar.code("/livez") == 200  # no stale red verdict
            assert await sidecar.code("/startupz") == 503
            with SimProcess(scheduling_policy="priority", extra_args=["--port", str(port)]):
                await _wait_green(sidecar)
                status = await sidecar.json("/status")
                assert status["verdict"]["hangs"] == []
                metrics = await sidecar.client.get(sidecar.url + "/metrics")
                assert _sample(metrics.text, "sentinel_server_restarts_total") >= 1


async def test_observe_only_reports_but_keeps_liveness(sim: SimProcess) -> None:
    async with running_sidecar(sim.base_url, enforce=False) as sidecar:
        await _wait_green(sidecar)
        sim.control.set_fault("engine_hang")

        async def confirmed() -> bool:
            return bool((await sidecar.json("/status"))["verdict"]["would_restart"])

        await eventually(confirmed, 20, "a would-restart verdict")
        assert await sidecar.code("/livez") == 200
        assert "would restart" in str((await sidecar.json("/livez"))["reason"])
        metrics = (await sidecar.client.get(sidecar.url + "/metrics")).text
        assert _sample(metrics, "sentinel_hang_detections_total", kind="engine") >= 1
        assert _sample(metrics, "sentinel_enforce") == 0


async def test_restart_loop_brake_turns_a_repeat_hang_into_unready(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The brake counts real restarts: a red episode, then a new server, then a hang again.

    A red blip that clears without a restart (the fault cleared in place)
    is not counted; the server being replaced after a red episode is. The
    same hang after the restart is one a restart does not fix: readiness and
    ``sentinel_restart_ineffective`` name the cause and the pod's node.
    """
    monkeypatch.setenv("NODE_NAME", "gpu-node-7")  # the downward API's spec.nodeName
    port = free_port()
    with SimProcess(extra_args=["--port", str(port)]) as first:
        async with running_sidecar(first.base_url, brake_max_restarts=1) as sidecar:

            async def braked() -> bool:
                return bool((await sidecar.json("/status"))["verdict"]["brake_engaged"])

            await _wait_green(sidecar)
            first.control.set_fault("engine_hang")
            await _wait_red(sidecar)
            first.control.clear_all()  # a blip: no restart
            await _wait_green(sidecar)
            assert not await braked()
            first.control.set_fault("engine_hang")
            await _wait_red(sidecar)
            first.stop()  # the kubelet restarts the hung server
            with SimProcess(extra_args=["--port", str(port)]) as second:
                await _wait_green(sidecar)
                second.control.set_fault("engine_hang")
                await eventually(braked, 20, "the restart-loop brake")
                assert await sidecar.code("/livez") == 200
                assert await sidecar.code("/readyz") == 503
                reason = str((await sidecar.json("/readyz"))["reason"])
                assert "brake" in reason
                assert "a restart does not fix this: engine" in reason
                assert "look at node gpu-node-7" in reason
                metrics = (await sidecar.client.get(sidecar.url + "/metrics")).text
                assert _sample(metrics, "sentinel_restart_brake_engaged") == 1
                ineffective = {"node": "gpu-node-7", "cause": "engine"}
                assert _sample(metrics, "sentinel_restart_ineffective", **ineffective) == 1


async def test_text_only_model_disables_multimodal_without_blocking_startup() -> None:
    with SimProcess(text_only=True) as sim:
        async with running_sidecar(sim.base_url) as sidecar:
            await _wait_green(sidecar)
            status = await sidecar.json("/status")
            assert status["canaries"]["multimodal"]["enabled"] is False
            assert status["canaries"]["multimodal"]["disabled_reason"]


async def test_sidecar_healthz_fails_when_a_loop_stops_ticking(sim: SimProcess) -> None:
    async with running_sidecar(sim.base_url) as sidecar:
        await _wait_green(sidecar)
        assert await sidecar.code("/healthz") == 200
        # Stop the evaluation loop as a wedge would: nothing publishes any more,
        # so the last (green) verdict would be served forever without /healthz.
        (evaluate,) = [t for t in asyncio.all_tasks() if t.get_name() == "evaluate"]
        evaluate.cancel()

        async def sidecar_failing() -> bool:
            return await sidecar.code("/healthz") == 503

        await eventually(sidecar_failing, 15, "/healthz 503 after the loop stopped")
        assert "evaluate" in str((await sidecar.json("/healthz"))["reason"])
        assert await sidecar.grpc_status("") == "NOT_SERVING"


async def test_result_listeners_see_each_recorded_result_and_a_failing_one_is_ignored(
    sim: SimProcess,
) -> None:
    seen: list[bool] = []

    def broken(result: CanaryResult) -> None:
        raise RuntimeError("a listener bug")

    async with running_sidecar(sim.base_url) as sidecar:
        daemon = sidecar.daemon

        def recorded(result: CanaryResult) -> None:
            seen.append(result in daemon.ledger.records[result.kind].results)

        daemon.add_result_listener(broken)
        daemon.add_result_listener(recorded)

        async def several() -> bool:
            return len(seen) >= 4

        await eventually(several, 20, "four canary results through the listener")
        await _wait_green(sidecar)  # the raising listener stopped no canary loop
    assert all(seen)


async def test_shutdown_turns_readiness_red_before_any_server_stops(
    sim: SimProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    stops: list[tuple[str, int]] = []
    async with running_sidecar(sim.base_url) as sidecar:
        await _wait_green(sidecar)
        daemon = sidecar.daemon
        assert daemon.grpc is not None
        assert daemon.http is not None
        url = daemon.http.url
        grpc_stop, http_stop = daemon.grpc.stop, daemon.http.stop

        async def readyz() -> int:
            async with httpx.AsyncClient(timeout=3.0) as client:
                return (await client.get(url + "/readyz")).status_code

        async def spy_grpc_stop(grace: float = 2.0) -> None:
            stops.append(("grpc", await readyz()))
            await grpc_stop(grace)

        async def spy_http_stop() -> None:
            stops.append(("http", await readyz()))
            await http_stop()

        monkeypatch.setattr(daemon.grpc, "stop", spy_grpc_stop)
        monkeypatch.setattr(daemon.http, "stop", spy_http_stop)
    assert stops == [("grpc", 503), ("http", 503)]  # each once, readiness already red
    assert "shutting down" in daemon.state.snapshot().readiness.reason


def _sample(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in (name, name + "_total") and all(
                s.labels.get(k) == v for k, v in labels.items()
            ):
                total += s.value
    return total


@pytest.mark.parametrize(
    ("target", "port"),
    [
        ("http://127.0.0.1:8000", 8000),
        ("http://vllm", 80),
        ("https://vllm.example", 443),
        ("http://user:pw@vllm:9000/v1", 9000),
    ],
)
def test_target_port_defaults_to_the_scheme(target: str, port: int) -> None:
    assert target_port(target) == port
