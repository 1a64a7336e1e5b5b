"""Idle auto-sleep: canaries held on a virtual clock, the wake rule and readiness from tables.

An auto-sleeping server counts every canary as a request, so once no real
traffic was seen for the hold every canary kind stops; real requests shown
end the hold at once. Asleep because of auto-sleep is ready (a request wakes
it); asleep with real requests waiting past ``wake_bound`` is the ``wake``
hang; a manual sleep on a server without auto-sleep stays unready.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace

import httpx
import pytest
from prometheus_client import CollectorRegistry

from sentinel.auto_sleep import AutoSleepWatch, CanaryHold, sleep_idle_ttl
from sentinel.canary.runner import CanaryRunner
from sentinel.evidence.metrics import MetricsSample
from sentinel.record.ledger import Ledger
from sentinel.record.planner import Planner
from sentinel.record.sink import ResultSink
from sentinel.scheduling.scheduler import Scheduler
from sentinel.telemetry.metrics import SentinelMetrics
from sentinel.verdict import Action, Lifecycle, Phase
from sentinel.verdict.hangs.wake import SECTION, SLEEPING_BUT_AWAKE_WHY, AutoSleepSection
from sentinel.verdict.model import Evidence, HangKind
from sentinel.verdict.policy import Policy
from tests.unit.scheduling.test_scheduler import T0, FakeVllm, VirtualClock, _ledger, _specs
from tests.unit.verdict.test_verdict import evidence, hang_of, ok, once, text


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["vllm", "serve", "m", "--sleep-idle-ttl", "300"], (300.0, "--sleep-idle-ttl")),
        (["vllm", "serve", "--sleep_idle_ttl=30.5"], (30.5, "--sleep-idle-ttl")),
        (["llama-server", "--sleep-idle-seconds", "60"], (60.0, "--sleep-idle-seconds")),
        (["llama-server", "--sleep-idle-seconds", "-1"], None),  # llama.cpp's "disabled"
        (["vllm", "serve", "--sleep-idle-ttl", "soon"], None),
        (["vllm", "serve", "--enable-sleep-mode"], None),
    ],
)
def test_the_command_line_tells_the_idle_ttl(
    argv: list[str], expected: tuple[float, str] | None
) -> None:
    assert sleep_idle_ttl(argv) == expected


def _traffic(watch: AutoSleepWatch, at: float, waiting: float) -> None:
    watch.observe_sample(MetricsSample(at, gauges={"waiting": waiting, "running": 0.0}))


async def _scheduled(
    configured: float | None,
    hold: float,
    until: float,
    arrive_at: float | None = None,
    *,
    sleep_told: bool = True,
) -> tuple[FakeVllm, SentinelMetrics, AutoSleepWatch]:
    clock = VirtualClock()
    specs = _specs(
        text={"interval": 5.0, "jitter": 0.0},
        structured={"interval": 5.0, "jitter": 0.0},
        correctness={"interval": 10.0, "jitter": 0.0},
    )
    ledger = _ledger(specs, clock)
    ledger.startup_judged(True)
    if sleep_told:
        ledger.observe_lifecycle(clock(), gauges={"sleep_awake": 1.0})
    watch = AutoSleepWatch(ledger, configured, hold=hold)
    fake = FakeVllm(clock)
    metrics = SentinelMetrics(CollectorRegistry())
    async with httpx.AsyncClient(transport=httpx.MockTransport(fake.handle)) as client:
        runner = CanaryRunner(client, "http://vllm", clock=clock, nonce=lambda: "n")
        scheduler = Scheduler(
            specs,
            runner,
            ledger,
            metrics,
            sink=ResultSink(ledger, metrics, clock=clock),
            planner=Planner(ledger, specs),
            idle_window=0.0,
            configured_model="m",
            clock=clock,
            sleep=clock.sleep,
            beat=lambda name, gap: None,
            rng=random.Random(7),
            hold=CanaryHold(watch, ledger, clock=clock),
        )
        task = asyncio.create_task(scheduler.run())
        try:
            if arrive_at is not None:
                await clock.run_until(arrive_at)
                _traffic(watch, arrive_at, 1.0)  # a real request shows
            await clock.run_until(until)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    return fake, metrics, watch


def _skipped(metrics: SentinelMetrics) -> float:
    value = metrics.registry.get_sample_value(
        "sentinel_canaries_skipped_total", {"reason": "auto_sleep"}
    )
    return value or 0.0


async def test_every_canary_kind_is_held_once_the_hold_passes_without_real_traffic() -> None:
    fake, metrics, watch = await _scheduled(configured=3.0, hold=12.0, until=T0 + 60)
    kinds = {s.kind for s in fake.sent}
    assert {"text", "structured"} <= kinds  # the correctness check asks as a text request
    assert max(s.at for s in fake.sent) - T0 < 12.0  # nothing after the hold began
    assert _skipped(metrics) >= 2 * 9  # text's and structured's steps over 48 s, counted
    assert watch.held_since is not None


async def test_real_requests_end_the_hold_and_canaries_resume_at_once() -> None:
    fake, _, watch = await _scheduled(configured=3.0, hold=12.0, until=T0 + 41, arrive_at=T0 + 37)
    late = sorted({s.kind for s in fake.sent if s.at >= T0 + 37})
    assert "text" in late  # within one cadence step of the arrival
    assert min(s.at for s in fake.sent if s.at >= T0 + 20) <= T0 + 40
    assert watch.held_since is None


async def test_where_nothing_tells_whether_it_sleeps_canaries_are_never_held() -> None:
    """No sleep gauge, no /is_sleeping: a held canary could hide a hang, so none is held."""
    fake, metrics, watch = await _scheduled(
        configured=3.0, hold=12.0, until=T0 + 60, sleep_told=False
    )
    assert max(s.at for s in fake.sent) - T0 >= 55.0
    assert _skipped(metrics) == 0
    shown = watch.status(watch.section(T0 + 60), T0 + 60)
    assert shown is not None
    assert shown["canaries"].startswith("canaries flow, never held")


async def test_without_auto_sleep_canaries_keep_flowing() -> None:
    fake, metrics, watch = await _scheduled(configured=None, hold=12.0, until=T0 + 60)
    assert max(s.at for s in fake.sent) - T0 >= 55.0
    assert _skipped(metrics) == 0
    assert watch.held_since is None


ASLEEP = Lifecycle(Phase.ASLEEP, 100.0, "vllm:engine_sleep_state is weights_offloaded")


def _asleep(section: AutoSleepSection | None) -> Evidence:
    ev = evidence(text(ok(10.0), ok(60.0)), progress_at=50.0)
    sections = {} if section is None else {SECTION.name: section}
    return replace(ev, lifecycle=ASLEEP, sections=sections)


AUTO = AutoSleepSection(
    ttl=30.0, source="config", sleep_known=True, held_since=95.0, idle_since=100.0
)


def test_an_auto_sleeping_server_asleep_idle_is_live_and_ready() -> None:
    verdict = once(_asleep(AUTO), now=400.0)
    assert verdict.liveness.ok
    assert verdict.readiness.ok, verdict.readiness.reason
    assert "wakes on request" in verdict.readiness.reason
    assert not verdict.hangs


@pytest.mark.parametrize(
    "section",
    [None, replace(AUTO, idle_since=None)],
    ids=["without auto-sleep", "a sleep that began while canaries flowed"],
)
def test_a_sleep_asked_for_stays_unready(section: AutoSleepSection | None) -> None:
    verdict = once(_asleep(section), now=400.0)
    assert verdict.liveness.ok
    assert not verdict.readiness.ok
    assert verdict.readiness.reason.startswith("asleep")
    assert hang_of(verdict, HangKind.WAKE) is None


@pytest.mark.parametrize(
    ("woke_idle", "ready"),
    [
        pytest.param(True, True, id="just-woken-by-a-request-is-ready"),
        pytest.param(False, False, id="the-same-words-without-an-idle-wake-are-a-pause"),
    ],
)
def test_is_sleeping_older_than_the_wake_gauge_is_no_pause_after_an_idle_wake(
    woke_idle: bool, ready: bool
) -> None:
    """The gauge says awake at once; /is_sleeping's "asleep" is the last poll's, before the
    wake. After an idle wake on request that is no pause (idle sleep came after 0.32)."""
    woken = replace(AUTO, held_since=None, idle_since=None, woke_idle=woke_idle)
    stale = Lifecycle(Phase.PAUSED, 300.0, SLEEPING_BUT_AWAKE_WHY)
    ev = replace(_asleep(woken), lifecycle=stale)
    verdict = once(ev, now=301.0)
    assert verdict.liveness.ok
    assert verdict.readiness.ok is ready, verdict.readiness.reason


ASKED = {
    "real requests shown": {"waiting": 2.0, "waiting_since": 200.0},
    "/is_sleeping unanswered": {"wake_asked_at": 200.0, "wake_sign": "/is_sleeping unanswered"},
}


@pytest.mark.parametrize("asked", ASKED.values(), ids=ASKED.keys())
@pytest.mark.parametrize(("now", "hung"), [(259.0, False), (261.0, True)])
def test_a_wake_asked_of_an_idle_sleeper_past_the_bound_is_the_wake_hang(
    now: float, hung: bool, asked: dict[str, object]
) -> None:
    waiting = replace(AUTO, held_since=None, real_at=now, **asked)  # type: ignore[arg-type]
    verdict = once(_asleep(waiting), now=now, policy=Policy(wake_bound=60.0))
    hang = hang_of(verdict, HangKind.WAKE)
    assert (hang is not None) is hung
    if hang is not None:
        assert hang.action is Action.RESTART
        assert "does not wake" in hang.reason
        assert not verdict.liveness.ok
        assert not verdict.readiness.ok
    else:
        assert verdict.liveness.ok
        assert verdict.readiness.ok


def test_the_wake_rule_says_nothing_where_nothing_tells_whether_it_sleeps() -> None:
    blind = replace(AUTO, sleep_known=False, waiting=2.0, waiting_since=200.0)
    assert hang_of(once(_asleep(blind), now=400.0), HangKind.WAKE) is None


def test_a_server_that_woke_is_no_wake_hang() -> None:
    waiting = replace(AUTO, waiting=2.0, waiting_since=200.0)
    ev = replace(_asleep(waiting), lifecycle=Lifecycle(Phase.AWAKE, 205.0, "", 205.0))
    assert hang_of(once(ev, now=400.0), HangKind.WAKE) is None


def test_status_says_canaries_are_held_and_who_said_it_sleeps() -> None:
    clock = VirtualClock()
    ledger = _ledger(_specs(text={"interval": 5.0}), clock)
    watch = AutoSleepWatch(ledger, 3.0, hold=60.0)
    watch.held_since = T0
    shown = watch.status(watch.section(T0 + 5), T0 + 5)
    assert shown is not None
    assert shown["canaries"].startswith("canaries held: the server auto-sleeps after 3s idle")
    assert shown["source"] == "config (auto_sleep_idle)"
    assert shown["sleeps"].startswith("cannot tell whether it sleeps")
    _traffic(watch, T0 + 6, 2.0)
    assert watch.real_waiting()
    assert watch.real_at() == T0 + 6


def _sleeping(ledger: Ledger, at: float) -> None:
    gauges = {"sleep_weights_offloaded": 1.0, "sleep_awake": 0.0}
    ledger.observe_lifecycle(at, gauges=gauges, is_sleeping=True, is_paused=True)


def test_a_sleep_that_began_while_canaries_were_held_is_idle_and_one_before_is_not() -> None:
    clock = VirtualClock()
    ledger = _ledger(_specs(text={"interval": 5.0}), clock)
    watch = AutoSleepWatch(ledger, 3.0, hold=60.0)
    _sleeping(ledger, T0 + 1)  # while the canaries flowed: asked for (POST /sleep)
    watch.follow(T0 + 2)
    assert watch.idle_since is None
    ledger.observe_lifecycle(T0 + 3, gauges={"sleep_awake": 1.0}, is_sleeping=False)
    watch.follow(T0 + 3)
    assert not watch.woke_idle  # that sleep was not idle
    watch.held_since = T0 + 4
    _sleeping(ledger, T0 + 10)  # while held: the idle TTL ran out
    watch.follow(T0 + 11)
    assert watch.idle_since == T0 + 10
    section = watch.section(T0 + 11)
    assert isinstance(section, AutoSleepSection)
    assert section.asleep_idle
    assert section.wake_asked_at is None


def test_is_sleeping_unanswered_in_an_idle_sleep_is_a_wake_asked() -> None:
    clock = VirtualClock()
    ledger = _ledger(_specs(text={"interval": 5.0}), clock)
    watch = AutoSleepWatch(ledger, 3.0, hold=60.0)
    watch.held_since = T0
    _sleeping(ledger, T0 + 5)
    watch.follow(T0 + 6)
    unanswered = ("GET /is_sleeping: timeout",)
    ledger.observe_lifecycle(T0 + 20, unanswered=unanswered)
    watch.follow(T0 + 20)
    assert watch.wake_asked_at == T0 + 20
    assert watch.wake_sign.startswith("/is_sleeping unanswered")
    # The wake completes: the sleep gauge turns awake, the old words are dropped.
    ledger.observe_lifecycle(T0 + 22, gauges={"sleep_awake": 1.0}, unanswered=())
    assert ledger.lifecycle.current.phase is Phase.AWAKE  # not paused on a stale /is_paused
    watch.follow(T0 + 22)
    assert watch.woke_idle
    assert watch.woke_at == T0 + 22
    assert watch.wake_asked_at is None


def test_a_pause_read_from_refusals_holds_no_canary() -> None:
    """Paused by the canaries' word, only a canary sees the pause end: none is held then."""
    clock = VirtualClock()
    ledger = _ledger(_specs(text={"interval": 5.0, "jitter": 0.0}), clock)
    ledger.startup_judged(True)
    ledger.observe_lifecycle(clock(), gauges={"sleep_awake": 1.0})
    hold = CanaryHold(AutoSleepWatch(ledger, 3.0, hold=12.0), ledger, clock=clock)
    assert hold.held(T0 + 20)
    said = "Generation is paused."
    ledger.observe_lifecycle(T0 + 20, paused_refusal=said, paused_refusal_at=T0 + 20)
    assert not hold.held(T0 + 25)
    assert hold.held(T0 + 31)  # its word lapsed 10 s after the last paused refusal
