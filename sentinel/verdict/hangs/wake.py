"""The wake bound: an auto-sleeping server that does not wake for its users.

A server that sleeps when idle (vLLM's proposed ``--sleep-idle-ttl``,
llama.cpp's ``--sleep-idle-seconds``) holds the first request that arrives
while it wakes: vLLM's level 1 copies the weights back from CPU memory in
seconds, level 2 reloads them from disk. While it sleeps with nobody asking,
sentinel sends no canary (any request would wake it), so a wake shows only
when someone asks: the held requests wait in the API server's middleware,
where no request gauge counts them, and the wake is an engine call, so
``/is_sleeping`` answers nothing while it runs. Once such a sign of a wake
shows (``/is_sleeping`` unanswered while the sleep gauge says asleep, real
requests shown waiting, the sleep ending), the canaries go out again
(:mod:`sentinel.auto_sleep.hold`); a server that still sleeps
``wake_bound`` after a wake was asked of it did not wake, a hang of its own
kind (docs/design.md, "Idle auto-sleep"). Policy ``restart`` by default: an
auto-sleeping server that cannot wake serves nobody, and a restart loads the
weights afresh. Only a sleep that began while the canaries were held is an
idle sleep: a sleep while they flowed (every few seconds, well inside the idle
TTL) was asked for (``POST /sleep``, an RL trainer) and keeps the stall
bound's rules. Where nothing tells whether it sleeps (no sleep gauge, no
``/is_sleeping``) the rule says nothing.

The rule also owns the idle sleep's readiness (:func:`idle_word`): asleep idle
the server is ready, since a request wakes it, unless a hang readiness heeds
is confirmed, which then speaks before the sleep; and a server a request woke
from an idle sleep has served, so it need not pass every canary kind again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from sentinel.knob import DAY, seconds, setting
from sentinel.verdict.knobs import Knobs
from sentinel.verdict.model import Action, Evidence, Hang, HangKind, Phase, ProbeAnswer
from sentinel.verdict.rule import HangRule, Point, Readiness, Standing, past_bound
from sentinel.verdict.sections import SectionKey


@dataclass(frozen=True, slots=True)
class AutoSleepSection:
    """What sentinel knows of the server's idle auto-sleep (the ``auto_sleep`` section)."""

    ttl: float | None = None  # the server's idle TTL in seconds (None: it does not auto-sleep)
    source: str = ""  # who said so: "config" or the command-line flag
    sleep_known: bool = False  # a sleep gauge or /is_sleeping answers
    held_since: float | None = None  # canaries held since (None: they flow)
    real_at: float | None = None  # real traffic last seen (work, completions, requests)
    waiting: float = 0.0  # real requests waiting or running at the newest sample
    waiting_since: float | None = None  # real requests shown in every sample since
    idle_since: float | None = None  # the current sleep began while canaries were held
    wake_asked_at: float | None = None  # a sign of a wake during that sleep (None: none yet)
    wake_sign: str = ""  # what the sign was
    woke_idle: bool = False  # the last sleep left was an idle one, woken on request

    @property
    def applies(self) -> bool:
        return self.ttl is not None

    @property
    def asleep_idle(self) -> bool:
        """Whether the server sleeps an idle sleep, one a request wakes."""
        return self.applies and self.idle_since is not None


# The evidence section (sentinel.auto_sleep.watch).
SECTION: Final = SectionKey("auto_sleep", AutoSleepSection)
# The lifecycle's word (sentinel.record.lifecycle) where /is_sleeping's last
# answer says asleep and a newer gauge says awake: 0.32's answer while paused,
# or a server just woken whose /is_sleeping has not been asked since.
SLEEPING_BUT_AWAKE_WHY: Final = "/is_sleeping is true while the sleep gauge says awake"


class WakeKnobs(Knobs):
    """The wake bound's knobs."""

    wake_bound: float = seconds(
        60.0,
        "An auto-sleeping server still asleep this long with real requests waiting did not "
        "wake: vLLM wakes from level 1 (weights in CPU memory) in seconds, from level 2 "
        "(weights from disk) in tens of seconds.",
        1.0,
        DAY,
    )
    wake_policy: Action = setting(
        Action.RESTART, "What an auto-sleeping server that does not wake for real requests does."
    )


def wake_hang(evidence: Evidence, policy: WakeKnobs, now: float) -> Hang | None:
    """A wake asked of an idle sleep (or real requests waiting on it) past the bound."""
    section = evidence.section(SECTION)
    if section is None or not section.asleep_idle:
        return None
    life = evidence.lifecycle
    if not section.sleep_known or life.phase is not Phase.ASLEEP:
        return None
    asked = [t for t in (section.wake_asked_at, section.waiting_since) if t is not None]
    if not asked:
        return None
    sign = section.wake_sign or f"{section.waiting:.0f} real requests waiting"
    return past_bound(
        HangKind.WAKE,
        policy.wake_policy,
        max(min(asked), life.since),
        policy.wake_bound,
        evidence,
        now,
        lambda elapsed: (
            f"wake: still asleep ({life.why}) {elapsed:.0f}s after a wake was "
            f"asked ({sign}): the auto-sleeping server does not wake (bound "
            f"{policy.wake_bound:.0f}s)"
        ),
    )


def idle_word(standing: Standing, policy: WakeKnobs, now: float) -> ProbeAnswer | None:
    """Ready while asleep idle; a hang readiness heeds speaks first (None: no idle sleep)."""
    section = standing.evidence.section(SECTION)
    life = standing.evidence.lifecycle
    if (
        section is not None
        and section.woke_idle
        and life.phase is Phase.PAUSED
        and life.why == SLEEPING_BUT_AWAKE_WHY
        and not standing.heeded
    ):
        # Woken by a request from an idle sleep (the gauge says so): /is_sleeping's
        # "asleep" is older than the wake, not a pause (idle sleep came after 0.32).
        return ProbeAnswer(True, "woken by a request; /is_sleeping not asked since")
    if section is None or not section.asleep_idle:
        return None
    if standing.heeded:  # the hangs' answer, not the stall's: the sleep is no excuse
        return standing.hangs_say
    if life.phase is not Phase.ASLEEP:
        return None
    # Idle auto-sleep: a request wakes it (docs/design.md, "Idle auto-sleep").
    return ProbeAnswer(True, f"asleep idle ({life.why}): it wakes on request")


def woke_on_request(evidence: Evidence) -> bool:
    """Whether the last sleep left was an idle one a request woke: the server just served."""
    section = evidence.section(SECTION)
    return section is not None and section.woke_idle


RULE = HangRule(
    "wake",
    wake_hang,
    WakeKnobs,
    kinds=(HangKind.WAKE,),
    action="wake_policy",
    windows=("wake_bound",),
    evidence="an idle-asleep server still asleep past its bound after a wake was asked of it",
    readiness=Readiness(
        Point.STATE,
        idle_word,
        "ready while asleep idle, since a request wakes it (a hang readiness heeds speaks "
        "first); woken by a request, no second pass of every kind",
        served=woke_on_request,
    ),
)
