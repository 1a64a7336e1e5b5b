"""One module per hang kind: its knobs, its judge and its declaration (``RULE``).

Each module declares one rule (:class:`~sentinel.verdict.rule.HangRule`): the
hang kinds it confirms, the knobs it reads, its action and the judge over
frozen evidence; :mod:`sentinel.verdict.registry` registers them in the order
judged, and :mod:`sentinel.verdict.policy` composes their knobs. A bound rule
states only when its condition began, its bound and its words;
:func:`~sentinel.verdict.rule.past_bound` is the body they share. A rule that
owns a state readiness names (a scale, a weight update's hold, an idle
sleep, an unknown refusal) declares its word on readiness there too
(:class:`~sentinel.verdict.rule.Readiness`).

The face holds the names the rest of the verdict reads: every rule's knobs,
the evidence sections the rules declare, and the helpers the decision and the
causes share. Left out: each module's ``SECTION`` key (three modules have one,
so the name is only unambiguous at home) and ``corrupt.degenerate``, whose
name is the degenerate rule's module.
"""

from sentinel.verdict.hangs.api_server import API_WATCH, ApiKnobs, ApiStuckSection
from sentinel.verdict.hangs.broken import BrokenKnobs
from sentinel.verdict.hangs.corrupt import NAN_ANSWER, CorruptKnobs, compare
from sentinel.verdict.hangs.dead import DeadKnobs
from sentinel.verdict.hangs.degenerate import DegenerateKnobs
from sentinel.verdict.hangs.engine import ENGINE_CPU, EngineCpuSection, EngineKnobs
from sentinel.verdict.hangs.fault_tolerance import FaultToleranceKnobs, FaultToleranceSection
from sentinel.verdict.hangs.kv_transfer import KvTransferKnobs, KvTransferSection
from sentinel.verdict.hangs.listener_down import ListenerKnobs
from sentinel.verdict.hangs.partial import PartialKnobs
from sentinel.verdict.hangs.path import PathKnobs
from sentinel.verdict.hangs.refused import (
    IS_PAUSED_WHY,
    RefusedKnobs,
    current_refusal,
    quoted,
    server_paused,
    unknown_refusal,
)
from sentinel.verdict.hangs.scaling import RETIRING_WHY, SCALE_FAILED_WHY, ScalingKnobs
from sentinel.verdict.hangs.stalled import StalledKnobs
from sentinel.verdict.hangs.starved import StarvedKnobs
from sentinel.verdict.hangs.wake import AutoSleepSection, WakeKnobs
from sentinel.verdict.hangs.weight_update import (
    WEIGHT_UPDATE_WHY,
    WeightUpdateKnobs,
    updating_since,
)

__all__ = [
    "API_WATCH",
    "ENGINE_CPU",
    "IS_PAUSED_WHY",
    "NAN_ANSWER",
    "RETIRING_WHY",
    "SCALE_FAILED_WHY",
    "WEIGHT_UPDATE_WHY",
    "ApiKnobs",
    "ApiStuckSection",
    "AutoSleepSection",
    "BrokenKnobs",
    "CorruptKnobs",
    "DeadKnobs",
    "DegenerateKnobs",
    "EngineCpuSection",
    "EngineKnobs",
    "FaultToleranceKnobs",
    "FaultToleranceSection",
    "KvTransferKnobs",
    "KvTransferSection",
    "ListenerKnobs",
    "PartialKnobs",
    "PathKnobs",
    "RefusedKnobs",
    "ScalingKnobs",
    "StalledKnobs",
    "StarvedKnobs",
    "WakeKnobs",
    "WeightUpdateKnobs",
    "compare",
    "current_refusal",
    "quoted",
    "server_paused",
    "unknown_refusal",
    "updating_since",
]
