"""The chaos kubelet's rules on a virtual clock: probes, kills, readiness and the crash back-off.

Times are passed in, so ten minutes of back-off cost nothing; the process
side (:class:`chaos.kubelet.Kubelet`) runs in tests/loopback/test_kubelet_sim.py.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from chaos.kubelet import Kubelet, load_wrapper, sim_command
from chaos.kubelet_state import (
    CrashBackOff,
    Event,
    KubeletSettings,
    KubeletState,
    Phase,
    ProbeSpec,
    recovery,
)
from chaos.scenario import MANIFEST

SETTINGS = KubeletSettings(
    startup=ProbeSpec("/startupz", period=10, timeout=3, failure_threshold=3),
    liveness=ProbeSpec("/livez", period=5, timeout=3, failure_threshold=4, grace=10),
    readiness=ProbeSpec("/readyz", period=5, timeout=3, failure_threshold=1),
    grace=60,
)


def manifest_vllm() -> tuple[dict[str, Any], dict[str, Any]]:
    """(the pod spec, the vllm container) of the shipped base Deployment, read raw."""
    for document in yaml.safe_load_all(MANIFEST.read_text(encoding="utf-8")):
        if isinstance(document, dict) and document.get("kind") == "Deployment":
            pod: dict[str, Any] = document["spec"]["template"]["spec"]
            for item in pod["containers"]:
                if item["name"] == "vllm":
                    return pod, item
    raise AssertionError("no vllm container in the base Deployment")


def started(state: KubeletState, at: float = 0.0) -> list[Event]:
    """Start the container and let its startup probe pass at ``at``."""
    events = state.start(at)
    events += state.feed("startup", at, True)
    assert state.phase is Phase.RUNNING
    return events


def kinds(events: list[Event]) -> list[str]:
    return [e.kind for e in events]


# ---------------------------------------------------------------------- settings


def test_settings_are_the_shipped_manifests_probes() -> None:
    pod, vllm = manifest_vllm()
    settings = KubeletSettings.from_manifest()
    for kind, spec in settings.probes():
        raw = vllm[f"{kind}Probe"]
        assert spec.path == raw["httpGet"]["path"]
        assert spec.period == raw.get("periodSeconds", 10)
        assert spec.timeout == raw.get("timeoutSeconds", 1)
        assert spec.failure_threshold == raw.get("failureThreshold", 3)
        assert spec.success_threshold == raw.get("successThreshold", 1)
        assert spec.initial_delay == raw.get("initialDelaySeconds", 0)
    assert [kind for kind, _ in settings.probes()] == ["startup", "liveness", "readiness"]
    assert settings.grace == pod["terminationGracePeriodSeconds"]
    # The liveness kill has a grace of its own; the startup kill takes the pod's.
    assert settings.kill_grace("liveness") == vllm["livenessProbe"]["terminationGracePeriodSeconds"]
    assert settings.kill_grace("startup") == pod["terminationGracePeriodSeconds"]
    # The values the loopback tests scale down (manifests/README.md explains each).
    assert settings.liveness == ProbeSpec("/livez", 5, 3, 4, 1, 0, 10)
    assert settings.startup == ProbeSpec("/startupz", 2, 3, 900, 1, 0, None)
    assert settings.readiness == ProbeSpec("/readyz", 5, 3, 1, 1, 0, None)


def test_scaling_shortens_every_duration_and_keeps_the_thresholds() -> None:
    settings = KubeletSettings.from_manifest()
    fast = settings.scaled(0.2, timeout_floor=1.0)
    assert fast.liveness == ProbeSpec("/livez", 1.0, 1.0, 4, 1, 0.0, 2.0)
    assert fast.startup is not None
    assert fast.startup.period == 0.4
    assert fast.startup.failure_threshold == 900
    assert (fast.grace, fast.backoff_initial, fast.backoff_cap) == (12.0, 2.0, 60.0)
    assert settings.scaled(0.5).liveness == ProbeSpec("/livez", 2.5, 1.5, 4, 1, 0.0, 5.0)


def test_a_probe_other_than_http_get_is_refused() -> None:
    with pytest.raises(ValueError, match="httpGet"):
        ProbeSpec.from_spec({"grpc": {"port": 8472}, "periodSeconds": 5})


# ------------------------------------------------------------------------ probes


def test_only_the_startup_probe_runs_until_it_succeeds() -> None:
    state = KubeletState(SETTINGS)
    state.start(0.0)
    assert state.due("startup", 0.0)
    assert not state.due("liveness", 0.0)
    assert not state.due("readiness", 0.0)
    assert state.feed("liveness", 1.0, False) == []  # an answer out of phase counts nothing
    assert kinds(state.feed("startup", 10.0, True)) == ["started"]
    assert not state.due("startup", 20.0)
    assert state.due("liveness", 20.0)
    assert state.due("readiness", 20.0)
    assert not state.ready  # readiness starts unready


def test_startup_failing_past_its_threshold_kills_with_the_pods_grace() -> None:
    state = KubeletState(SETTINGS)
    state.start(0.0)
    assert kinds(state.feed("startup", 0.0, False)) == ["probe_failure"]
    assert kinds(state.feed("startup", 10.0, False)) == ["probe_failure"]
    events = state.feed("startup", 20.0, False)
    assert kinds(events) == ["probe_failure", "kill"]
    kill = events[-1]
    assert (kill.probe, kill.data["grace"]) == ("startup", 60)
    assert "startup probe failed 3 times" in kill.detail
    assert state.phase is Phase.TERMINATING
    assert not state.due("startup", 30.0)  # no probe of a container being killed


def test_startup_success_in_time_is_no_kill() -> None:
    state = KubeletState(SETTINGS)
    state.start(0.0)
    state.feed("startup", 0.0, False)
    state.feed("startup", 10.0, False)
    assert kinds(state.feed("startup", 20.0, True)) == ["started"]
    assert state.phase is Phase.RUNNING


def test_liveness_failing_threshold_times_in_a_row_kills() -> None:
    state = KubeletState(SETTINGS)
    started(state)
    for at in (5.0, 10.0, 15.0):
        assert kinds(state.feed("liveness", at, False, "503")) == ["probe_failure"]
    events = state.feed("liveness", 20.0, False, "503")
    assert kinds(events) == ["probe_failure", "kill"]
    assert (events[-1].probe, events[-1].data["grace"]) == ("liveness", 10)
    assert events[-1].detail == "liveness probe failed 4 times in a row (last: 503)"


def test_a_single_liveness_success_resets_the_count() -> None:
    state = KubeletState(SETTINGS)
    started(state)
    for at in (5.0, 10.0, 15.0):
        state.feed("liveness", at, False)
    assert state.feed("liveness", 20.0, True) == []
    for at in (25.0, 30.0, 35.0):
        assert kinds(state.feed("liveness", at, False)) == ["probe_failure"]
    assert state.phase is Phase.RUNNING
    assert kinds(state.feed("liveness", 40.0, False)) == ["probe_failure", "kill"]


def test_readiness_marks_ready_and_unready_and_never_kills() -> None:
    state = KubeletState(SETTINGS)
    started(state)
    assert kinds(state.feed("readiness", 5.0, True)) == ["ready"]
    assert state.feed("readiness", 10.0, True) == []
    assert kinds(state.feed("readiness", 15.0, False)) == ["probe_failure", "unready"]
    for at in range(20, 200, 5):
        assert "kill" not in kinds(state.feed("readiness", float(at), False))
    assert state.phase is Phase.RUNNING
    assert kinds(state.feed("readiness", 200.0, True)) == ["ready"]


def test_success_threshold_holds_readiness_back() -> None:
    settings = KubeletSettings(readiness=ProbeSpec("/readyz", success_threshold=3))
    state = KubeletState(settings)
    events = state.start(0.0)
    assert kinds(events) == ["start", "started"]  # no startup probe: started at once
    assert state.feed("readiness", 10.0, True) == []
    assert state.feed("readiness", 20.0, True) == []
    assert kinds(state.feed("readiness", 30.0, True)) == ["ready"]


def test_no_probe_before_its_initial_delay() -> None:
    settings = KubeletSettings(liveness=ProbeSpec("/livez", period=5, initial_delay=12))
    state = KubeletState(settings)
    state.start(100.0)
    assert not state.due("liveness", 105.0)
    assert not state.due("liveness", 111.9)
    assert state.due("liveness", 112.0)


def test_a_restarted_container_counts_afresh() -> None:
    state = KubeletState(SETTINGS)
    started(state)
    state.feed("readiness", 5.0, True)
    for at in (5.0, 10.0, 15.0, 20.0):
        state.feed("liveness", at, False)
    events, start_at = state.exited(22.0, -9)
    assert kinds(events) == ["exit", "unready", "backoff"]
    assert (events[0].probe, events[0].data["returncode"]) == ("liveness", -9)
    assert start_at == 22.0  # the first restart comes at once
    events = state.start(start_at)
    assert kinds(events) == ["restart", "start"]
    assert (state.container, state.restarts, state.ready) == (1, 1, False)
    assert state.phase is Phase.STARTING
    assert state.feed("liveness", 23.0, False) == []  # only startup runs again
    assert state.feed("startup", 23.0, True, container=0) == []  # the killed one's late answer
    assert kinds(state.feed("startup", 30.0, True)) == ["started"]
    for at in (35.0, 40.0, 45.0):
        assert "kill" not in kinds(state.feed("liveness", at, False))


# ---------------------------------------------------------------------- back-off


def test_back_off_is_at_once_then_10_doubling_to_300() -> None:
    backoff = CrashBackOff()
    waits, at = [], 0.0
    for _ in range(9):
        at += 1.0  # the container runs a second, then crashes
        start = backoff.next_start(at)
        waits.append(start - at)
        at = start
    assert waits == [0, 10, 20, 40, 80, 160, 300, 300, 300]


def test_back_off_resets_after_ten_minutes_of_running() -> None:
    backoff = CrashBackOff()
    at = 0.0
    for _ in range(6):
        at = backoff.next_start(at + 1.0)
    assert backoff.current == 300
    assert backoff.next_start(at + 600.0) == at + 600.0 + 300  # 10 min exactly: not yet
    at += 600.0 + 300
    assert backoff.next_start(at + 600.5) == at + 600.5  # longer: forgotten, at once
    at += 600.5
    assert backoff.next_start(at + 1.0) == at + 1.0 + 10  # and from 10 s again


def test_state_uses_the_scaled_back_off() -> None:
    state = KubeletState(SETTINGS.scaled(0.1))
    gaps = []
    at = 0.0
    for _ in range(4):
        state.start(at)
        events, start = state.exited(at + 1.0, 1)
        gaps.append(round(start - (at + 1.0), 6))
        assert events[-1].data["wait"] == pytest.approx(gaps[-1])
        at = start
    assert gaps == [0.0, 1.0, 2.0, 4.0]
    assert state.restarts == 3


# ----------------------------------------------------------------------- figures


def test_recovery_figures_follow_the_timeline() -> None:
    events = [
        Event(90.0, "probe_failure", 0, "liveness", "503"),  # before the fault: not counted
        Event(100.0, "fault", 0),
        Event(107.0, "probe_failure", 0, "readiness"),
        Event(108.0, "probe_failure", 0, "liveness"),
        Event(111.0, "kill", 0, "liveness"),
        Event(113.0, "exit", 0),
        Event(113.0, "restart", 1),
        Event(113.0, "start", 1),
        Event(118.0, "ready", 0),  # the old container's: not the recovery
        Event(120.0, "ready", 1),
    ]
    assert recovery(events, 100.0) == {
        "restarts": 1,
        "detect": 8.0,
        "kill": 11.0,
        "restart": 13.0,
        "recover": 20.0,
    }
    assert recovery(events[:4], 100.0) == {"restarts": 0, "detect": 8.0}


# ------------------------------------------------------------------ the driver's parts


def test_commands() -> None:
    wrapped = load_wrapper(2.5, ["false", "x"])
    assert wrapped[-3:] == ["2.5", "false", "x"]
    command = sim_command(8000, 8001, startup_delay=3)
    assert command[1:3] == ["-m", "sentinel_sim"]
    assert command[command.index("--port") + 1] == "8000"
    assert command[command.index("--control-port") + 1] == "8001"
    assert command[command.index("--startup-delay") + 1] == "3"


async def test_restart_sidecar_moves_the_probes_and_leaves_the_container() -> None:
    async def restart() -> str:
        return "http://127.0.0.1:9999/"

    kubelet = Kubelet(["true"], "http://127.0.0.1:1", SETTINGS, restart_sidecar=restart)
    assert await kubelet.restart_sidecar() == "http://127.0.0.1:9999"
    assert kubelet.probe_url == "http://127.0.0.1:9999"
    assert kinds(kubelet.events) == ["sidecar_restart", "sidecar_started"]
    assert kubelet.restarts == 0
    with pytest.raises(RuntimeError, match="hook"):
        await Kubelet(["true"], "http://127.0.0.1:1", SETTINGS).restart_sidecar()


async def test_readiness_is_probed_the_moment_startup_succeeds() -> None:
    """As the kubelet's UpdatePodStatus does: not on readiness's next period tick."""
    settings = KubeletSettings(
        startup=ProbeSpec("/startupz", period=0.2, timeout=1, failure_threshold=100),
        liveness=None,
        readiness=ProbeSpec("/readyz", period=30, timeout=1, failure_threshold=1),
        grace=1,
    )
    startups = 0

    async def startup(spec: ProbeSpec) -> tuple[bool, str]:
        nonlocal startups
        startups += 1
        return startups >= 3, "200" if startups >= 3 else "503"  # passes at about 0.4 s

    async def readiness(spec: ProbeSpec) -> tuple[bool, str]:
        return True, "200"

    checks = {"startup": startup, "readiness": readiness}
    async with Kubelet(["sleep", "60"], "http://127.0.0.1:1", settings, checks=checks) as kubelet:
        await kubelet.wait_for("ready", within=5)
        started_at = kubelet.of("started")[0].at
        ready_at = kubelet.of("ready")[0].at
    # Without the trigger readiness would wait for its 30 s tick.
    assert 0 <= ready_at - started_at < 1.0
