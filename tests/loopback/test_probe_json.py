"""``sentinel probe --json URL | python -m json.tool`` holds for every fault of the simulator.

stdout carries the JSON document and nothing else; whatever sentinel logs
while probing a broken server goes to stderr. The command runs as a user
runs it: a real process, piped into ``json.tool``.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from sentinel_sim.faults import Fault
from sentinel_sim.launch import SimProcess

# (fault, parameters): every fault, both garbage modes; the exit fault last, on its own sim.
CASES: list[tuple[str, dict[str, Any]]] = [
    (Fault.ENGINE_HANG.value, {}),
    (Fault.STRUCTURED_HANG.value, {}),
    (Fault.MULTIMODAL_HANG.value, {}),
    (Fault.STREAM_STALL.value, {"after": 1}),
    (Fault.SLOW_DECODE.value, {"factor": 20}),
    (Fault.ERROR_5XX.value, {"rate": 1.0}),
    (Fault.GARBAGE.value, {"mode": "invalid_json"}),
    (Fault.GARBAGE.value, {"mode": "schema_break"}),
    (Fault.BLACKHOLE.value, {}),
    (Fault.STUCK_RUNNING.value, {}),
    (Fault.WAITING_CHURN.value, {}),
    (Fault.PREEMPTION_CHURN.value, {}),
    (Fault.PREFILL_NO_DECODE.value, {}),
    (Fault.STALL_AFTER_FIRST.value, {}),
    (Fault.DECODE_DEAD.value, {}),
    (Fault.RESET_ALL.value, {}),
    (Fault.EMPTY_200.value, {}),
    (Fault.METRICS_LAPSE.value, {}),
    (Fault.METRICS_401.value, {}),
    (Fault.STARVE.value, {}),
    (Fault.CACHE_FRONT.value, {}),
    (Fault.LONG_PREFILL.value, {"tokens": 20000}),
    (Fault.SLEEP.value, {}),
    (Fault.PAUSE.value, {}),
    (Fault.WEIGHT_UPDATE.value, {}),
    (Fault.COMPILE_STEP.value, {"seconds": 5}),
    (Fault.SLOW_IMAGE.value, {}),
    (Fault.ELASTIC_SCALE.value, {}),
    *((f.value, {}) for f in Fault if f.value in ("weights_lost", "weights_updated")),
    (Fault.NO_LOGPROBS.value, {}),
    (Fault.NEAR_TIES.value, {"flip": "third"}),
    (Fault.REMOTE_KV.value, {"land": "never"}),
    (Fault.REFUSE.value, {}),
    (Fault.REFUSE.value, {"stream": "body"}),
]
# Faults that end the server's life as a target run last, each on a simulator of its own.
TERMINAL = (Fault.EXIT.value, Fault.LISTENER_CLOSED.value)
# Faults that need a simulator of another shape: two API-server processes, idle auto-sleep.
OWN_SHAPE = (Fault.API_WEDGE.value, Fault.WAKE_HANG.value)
PROBE_TIMEOUT_S = 2


def probe_piped(url: str) -> subprocess.CompletedProcess[str]:
    probe = shlex.join(
        [
            sys.executable,
            "-m",
            "sentinel",
            "probe",
            "--output=json",
            "--timeout",
            str(PROBE_TIMEOUT_S),
            url,
        ]
    )
    tool = shlex.join([sys.executable, "-m", "json.tool"])
    # The pipeline's status is json.tool's, as a user's shell sees it; the
    # probe's own status goes to stderr for the assertion below.
    script = (
        f'{probe} | {tool}; s=("${{PIPESTATUS[@]}}"); echo "probe-rc=${{s[0]}}" >&2; exit ${{s[1]}}'
    )
    return subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# The cases run on LANES simulators at once, each lane's cases in turn as one
# simulator ran them all before (one fault at a time, cleared after): a probe
# mostly waits out its timeouts, so the file pays for its slowest lane rather than
# for the sum. Each test then asserts on its own case's probe.
LANES = 3

Probed = tuple[str, subprocess.CompletedProcess[str]] | Exception


def _lane(cases: Sequence[int]) -> dict[int, Probed]:
    """Every case of ``cases`` (indexes into CASES) probed in turn on one simulator."""
    done: dict[int, Probed] = {}
    with SimProcess(max_num_seqs=4) as sim:
        for index in cases:
            fault, params = CASES[index]
            try:
                sim.control.clear_all()
                sim.control.set_fault(fault, duration=60, **params)
                try:
                    done[index] = (sim.base_url, probe_piped(sim.base_url))
                finally:
                    sim.control.clear_all()
            except Exception as exc:  # the case's own test raises it
                done[index] = exc
    return done


@pytest.fixture(scope="module")
def probed() -> dict[int, Probed]:
    lanes = [range(lane, len(CASES), LANES) for lane in range(LANES)]
    with ThreadPoolExecutor(LANES) as pool:
        return {index: got for done in pool.map(_lane, lanes) for index, got in done.items()}


def test_every_fault_case_is_covered() -> None:
    assert {name for name, _ in CASES} | set(TERMINAL) | set(OWN_SHAPE) == {f.value for f in Fault}


@pytest.mark.parametrize(("fault", "params"), CASES, ids=lambda c: str(c))
def test_probe_json_is_only_json(
    probed: dict[int, Probed], fault: str, params: dict[str, Any]
) -> None:
    got = probed[CASES.index((fault, params))]
    if isinstance(got, Exception):
        raise got
    url, result = got
    # json.tool fails on any non-JSON line in stdout; probe itself exits 0 or
    # 1 (healthy or not), never 2 (usage) here.
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-2000:])
    assert result.stderr.rstrip().endswith(("probe-rc=0", "probe-rc=1")), result.stderr[-2000:]
    document = json.loads(result.stdout)
    assert [t["url"] for t in document["targets"]] == [url]


def test_probe_json_beside_a_wedged_api_server() -> None:
    with SimProcess(api_server_count=2) as sim:
        sim.control.set_fault(Fault.API_WEDGE.value, server=1, duration=30)
        result = probe_piped(sim.base_url)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-2000:])
    assert json.loads(result.stdout)["targets"][0]["url"] == sim.base_url


def _asleep(exposition: str) -> bool:
    return any(
        line.startswith("vllm:engine_sleep_state{")
        and 'sleep_state="weights_offloaded"' in line
        and line.endswith(" 1.0")
        for line in exposition.splitlines()
    )


def test_probe_json_on_an_idle_sleeper_whose_wake_never_returns() -> None:
    with SimProcess(extra_args=["--sleep-idle-ttl", "1"]) as sim:
        deadline = time.monotonic() + 30
        while not _asleep(httpx.get(sim.base_url + "/metrics", timeout=5).text):
            assert time.monotonic() < deadline, "the idle simulator never slept"
            time.sleep(0.2)  # the polling interval, not a wait for a state
        sim.control.set_fault(Fault.WAKE_HANG.value)
        result = probe_piped(sim.base_url)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-2000:])
    assert result.stderr.rstrip().endswith("probe-rc=1"), result.stderr[-2000:]
    assert json.loads(result.stdout)["targets"][0]["url"] == sim.base_url


def test_probe_json_after_the_server_exits() -> None:
    with SimProcess() as sim:
        url = sim.base_url
        sim.control.set_fault(Fault.EXIT.value)
        sim.wait_exit(timeout=10)
        result = probe_piped(url)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-2000:])
    assert json.loads(result.stdout)["targets"][0]["url"] == url


def test_probe_json_after_the_listener_closes() -> None:
    with SimProcess() as sim:
        url = sim.base_url
        sim.control.set_fault(Fault.LISTENER_CLOSED.value)
        result = probe_piped(url)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-2000:])
    assert result.stderr.rstrip().endswith("probe-rc=1"), result.stderr[-2000:]
    assert json.loads(result.stdout)["targets"][0]["url"] == url
