"""The verdict's thresholds: every built-in rule's knobs, and the knobs of the verdict itself.

:class:`Policy` inherits each rule's knobs model
(:mod:`sentinel.verdict.hangs`), so a rule's knobs are settings under their
own names (:class:`sentinel.config.settings.Settings` inherits Policy) with
the default, span and description the rule declared. A ``*_policy`` knob is
the action its hang kind takes.
"""

from __future__ import annotations

from sentinel.knob import DAY, seconds, setting
from sentinel.verdict.hangs.api_server import ApiKnobs
from sentinel.verdict.hangs.broken import BrokenKnobs
from sentinel.verdict.hangs.corrupt import CorruptKnobs
from sentinel.verdict.hangs.dead import DeadKnobs
from sentinel.verdict.hangs.degenerate import DegenerateKnobs
from sentinel.verdict.hangs.engine import EngineKnobs
from sentinel.verdict.hangs.fault_tolerance import FaultToleranceKnobs
from sentinel.verdict.hangs.kv_transfer import KvTransferKnobs
from sentinel.verdict.hangs.listener_down import ListenerKnobs
from sentinel.verdict.hangs.partial import PartialKnobs
from sentinel.verdict.hangs.path import PathKnobs
from sentinel.verdict.hangs.refused import RefusedKnobs
from sentinel.verdict.hangs.scaling import ScalingKnobs
from sentinel.verdict.hangs.stalled import StalledKnobs
from sentinel.verdict.hangs.starved import StarvedKnobs
from sentinel.verdict.hangs.wake import WakeKnobs
from sentinel.verdict.hangs.weight_update import WeightUpdateKnobs
from sentinel.verdict.knobs import Knobs


class VerdictKnobs(Knobs):
    """What the evaluation reads beyond the rules: enforcement, readiness, the brake, gates."""

    enforce: bool = setting(True, "false: observe-only; hangs are reported, liveness stays 200.")
    ready_out_after: int = setting(
        2, "Readiness out after this many bad canaries in a row.", (1, 100, "evaluations")
    )
    ready_back_after: int = setting(
        3, "Readiness back after this many good canaries in a row.", (1, 100, "evaluations")
    )
    brake_max_restarts: int = setting(
        3,
        "Restart-loop brake: hang restarts within brake_window before it holds.",
        (1, 1_000, "restarts"),
    )
    brake_window: float = seconds(
        3600.0, "Restart-loop brake: the window restarts are counted in.", 60.0, 7 * DAY
    )
    compile_grace: float = seconds(
        300.0,
        "A long engine step with a compiler busy under the engine is held this long.",
        0.0,
        DAY,
    )
    compile_linger: float = seconds(
        10.0,
        "The compile hold lasts this long after the last sample that saw a compiler busy: "
        "a storm of sub-second compilers (Triton autotuning) shows in some samples only.",
        0.0,
        30.0,  # sentinel.evidence.compilers.STORM_GAP: a longer gap starts another compile
    )


class Policy(
    ListenerKnobs,
    ApiKnobs,
    DeadKnobs,
    BrokenKnobs,
    CorruptKnobs,
    DegenerateKnobs,
    PathKnobs,
    StarvedKnobs,
    PartialKnobs,
    EngineKnobs,
    StalledKnobs,
    WeightUpdateKnobs,
    ScalingKnobs,
    KvTransferKnobs,
    WakeKnobs,
    FaultToleranceKnobs,
    RefusedKnobs,
    VerdictKnobs,
):
    """Thresholds of the verdict (the README's defaults table), each knob declared once."""
