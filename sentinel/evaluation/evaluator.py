"""The evaluator: the single writer of :class:`HealthState`.

Once per evaluation interval it freezes the ledger into evidence, runs the pure
verdict, and acts on what changed: a new server epoch (forget cached
baselines, count the restart), a confirmed hang (metric, incident, the phrased
outcome in the log), a suspicion (opens an incident), a canary kind set aside
(an Event, once per kind per epoch), flips of the kubelet answers (a
bounded history, with the hang kinds behind a red answer and the restart
ask, that ``/status`` shows and each diagnostics bundle carries), and the
engine's scheduling policy (the priority report). It then builds the
``/status`` document and publishes one snapshot, both from the evidence it
judged (kept for the diagnostics bundle's context too), and publishes its word on
startup into the plan scheduling goes by (:class:`~sentinel.record.planner.Planner`,
which also sets aside, before each judgement, what the server's command line
rules out). It never writes the ledger.

It also accounts for time sentinel did not observe: when its own loop did not
run for a while (CPU starvation, a pause), that span is handed to the verdict,
whose windows pause over it and resume; they never start over, so periodic
hiccups cannot hide a hang forever.

On shutdown it turns readiness red first and keeps it red, so the pod leaves
its Service before anything else stops.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from sentinel.canary.spec import CanarySpec
from sentinel.config.settings import Settings
from sentinel.evaluation.health import HealthSnapshot, HealthState
from sentinel.evaluation.incidents import IncidentRecorder, hang_outcome
from sentinel.evaluation.kind_events import KindNotices
from sentinel.evaluation.node import PodNode
from sentinel.evaluation.pace import in_play
from sentinel.evaluation.refusal_events import RefusalNotices
from sentinel.evaluation.status import PriorityReport, StatusInputs, Transition, status_document
from sentinel.evaluation.suspicion import suspicion
from sentinel.evaluation.views import health_snapshot, priority_of
from sentinel.fleet.brake_memory import BrakeMemory
from sentinel.fleet.budget import Wish
from sentinel.fleet.lease import PoolBudget
from sentinel.record.ledger import Ledger
from sentinel.record.observers import Observations
from sentinel.record.planner import Planner
from sentinel.record.provider import Provider, fragments, gather
from sentinel.telemetry.logging import get_logger
from sentinel.telemetry.metrics import PROBES, SentinelMetrics
from sentinel.verdict import (
    Action,
    Evidence,
    Hang,
    ProbeAnswer,
    Verdict,
    VerdictState,
    evaluate,
)
from sentinel.verdict.model import CORRECTNESS, RESTART_GATE

log = get_logger("sentinel.evaluator")

TRANSITIONS_KEPT = 100  # the answers' changes, for /status and each bundle's timeline
UNOBSERVED_KEPT = 256  # spans sentinel did not run; older ones no longer overlap any window
SHUTTING_DOWN = "sentinel is shutting down"


class Evaluator:
    """Judges the ledger and publishes the health snapshot; nothing else writes it."""

    def __init__(
        self,
        settings: Settings,
        *,
        ledger: Ledger,
        state: HealthState,
        metrics: SentinelMetrics,
        incidents: IncidentRecorder,
        observations: Observations,
        config: Mapping[str, Any],
        on_server_restart: Callable[[], None] = lambda: None,
        maintenance: Callable[[float], str | None] = lambda now: None,
        specs: Sequence[CanarySpec] = (),
        providers: Sequence[Provider[Any]] = (),
        budget: PoolBudget | None = None,
        brake: BrakeMemory | None = None,
        planner: Planner | None = None,
    ) -> None:
        self.settings = settings
        self.policy = settings.policy()
        self.ledger = ledger
        self.state = state
        self.metrics = metrics
        self.incidents = incidents
        self.observations = observations
        self.config = config
        self.on_server_restart = on_server_restart
        self.maintenance = maintenance  # the reason of the window in force, if any
        self.specs = tuple(specs)  # the canaries run: which kinds the command line rules out
        # Where the judgement's word on startup goes (and what it rules out, before it).
        self.planner = planner if planner is not None else Planner(ledger, self.specs)
        # Evidence beyond the ledger, one frozen section each (the fingerprint
        # checks are judged against, the restart budget's gate, ...).
        # The brake's memory kept in a Lease (sentinel.fleet.brake_memory): seeded, then told.
        self.brake = brake if brake is not None else BrakeMemory()
        node = PodNode(incidents.node)  # verdict.cause reads it
        self.providers = (*providers, node, self.brake)
        # The pool's restart budget: each verdict's wish is its input (its gate a provider).
        self.budget = budget if budget is not None and budget.enabled else None
        self.kind_notices = KindNotices()  # the kinds set aside, announced once per epoch
        self.refusal_notices = RefusalNotices()  # unknown refusals, announced once per run
        self.verdict_state = VerdictState()
        self.verdict: Verdict | None = None
        # The evidence the last verdict judged: every view renders from it, never the ledger.
        self.evidence = Evidence()
        self.priority = PriorityReport()
        self.transitions: deque[Transition] = deque(maxlen=TRANSITIONS_KEPT)
        # Each capture's context carries the flips so far: the bundle draws them.
        incidents.follow_answers(lambda: tuple(self.transitions))
        self.hangs_confirmed = 0
        self.stalls = 0
        self.unobserved: deque[tuple[float, float]] = deque(maxlen=UNOBSERVED_KEPT)
        self.stall_threshold = max(2.0, settings.eval_interval * 4)
        self.shutting_down = False
        self._seen_epoch = ledger.epoch
        self._last_evaluation: float | None = None
        # What kept the last judgement at the full pace (None: nothing; sentinel.evaluation.pace),
        # when it was made, and how many canaries had left by then.
        self.in_play: str | None = "not judged yet"
        self._judged: tuple[float, int] = (float("-inf"), 0)

    def due(self, now: float) -> bool:
        """Whether a tick judges: always while anything is in play or a canary left since;
        otherwise once per ``eval_quiet_interval``. A tick that does not still counts as
        sentinel's loop running."""
        at, sent = self._judged
        if (
            self.in_play is not None
            or self.ledger.canaries_sent != sent
            or now - at >= self.settings.quiet_interval - 1e-9
        ):
            return True
        self._check_own_stall(now)
        return False

    async def evaluate(self, now: float) -> Verdict:
        """Judge the ledger at ``now`` and publish the result."""
        ledger = self.ledger
        self.planner.end_if_gone(now, self.settings.dead_grace)  # a departed server's epoch ends
        if ledger.epoch != self._seen_epoch:
            self._seen_epoch = ledger.epoch
            self.metrics.server_restarted()
            self.on_server_restart()
            log.warning(
                "server_restart_seen",
                epoch=ledger.epoch,
                reason=ledger.epoch_reason,
                departures_recent=len(ledger.departures.within(now)),
            )
        self._check_own_stall(now)
        self.planner.set_aside_unvalidatable()  # what the server's command line rules out
        evidence = ledger.evidence(
            now,
            freshness=self.settings.evidence_freshness,
            unobserved=tuple(self.unobserved),
            sections=gather(self.providers, now),
        )
        for notice in (*self.kind_notices.new(evidence), *self.refusal_notices.new(evidence)):
            self.incidents.announce(notice.reason, notice.message)
        previous = self.verdict
        self.verdict_state = await self.brake.seed(self.verdict_state, now)  # once, bounded
        self.verdict_state, verdict = evaluate(self.verdict_state, evidence, self.policy, now)
        self.brake.observe(self.verdict_state, now)
        self.verdict, self.evidence = verdict, evidence
        # Whether this server passed startup (the verdict's state), not the
        # /startupz answer, which also fails while a restart is asked for.
        self.planner.judged(self.verdict_state.startup_passed)
        if self.budget is not None:
            self.budget.observe(
                Wish(
                    wanted=verdict.restart_wanted,
                    failing=not verdict.liveness.ok,
                    epoch=ledger.epoch,
                    started=self.verdict_state.startup_passed,
                )
            )
        for hang in verdict.new_hangs:
            self._hang_confirmed(hang, verdict)
        found = suspicion(evidence, verdict)
        if found is not None:
            self.incidents.suspect(*found, confirmed=bool(verdict.hangs))
        elif not verdict.hangs:
            self.incidents.all_clear()
        self._log_transitions(previous, verdict, now)
        self._update_priority(evidence)
        self.in_play = "shutting down" if self.shutting_down else in_play(evidence, verdict)
        self._judged = (now, ledger.canaries_sent)
        await self.state.publish(self._snapshot(verdict, evidence, now))
        return verdict

    async def shut_down(self, now: float) -> None:
        """Turn readiness red now and keep it red for every later evaluation.

        Idempotent: the daemon calls it when asked to stop and again on its
        way out after a failure.
        """
        if self.shutting_down:
            return
        self.shutting_down = True
        log.info("readiness_withdrawn", why=SHUTTING_DOWN)
        current = self.state.snapshot()
        await self.state.publish(replace(current, readiness=ProbeAnswer(False, SHUTTING_DOWN, now)))

    def _check_own_stall(self, now: float) -> None:
        last, self._last_evaluation = self._last_evaluation, now
        if last is None:
            return
        gap = now - last
        if gap > self.stall_threshold:
            # The loop should have run one interval after the last evaluation;
            # the rest of the gap is time nobody watched.
            self.unobserved.append((last + self.settings.eval_interval, now))
            self.stalls += 1
            log.warning(
                "sentinel_stalled",
                seconds=round(gap, 3),
                why="sentinel's own loop did not run; hang windows pause over the gap",
            )

    def _hang_confirmed(self, hang: Hang, verdict: Verdict) -> None:
        self.metrics.hang_detected(hang.kind)
        self.hangs_confirmed += 1
        enforce = self.settings.enforce
        self.incidents.hang_confirmed(hang, enforce=enforce, verdict=verdict)
        log.warning(
            "hang_confirmed",
            kind=str(hang.kind),
            action=hang.action.value,
            outcome=hang_outcome(
                hang, enforce=enforce, braked=verdict.brake_engaged, held=verdict.budget_held
            ),
            reason=hang.reason,
            engines=list(hang.engines),
            ranks=list(hang.ranks),
        )

    def _log_transitions(self, previous: Verdict | None, verdict: Verdict, now: float) -> None:
        for flip in answer_transitions(previous, verdict, now):
            self.transitions.append(flip)
            log.info(
                "verdict_changed",
                probe=flip.probe,
                ok=flip.ok,
                reason=flip.reason,
                **({"hangs": list(flip.hangs)} if flip.hangs else {}),
                **({"restart": True} if flip.restart else {}),
            )

    def _update_priority(self, evidence: Evidence) -> None:
        report = priority_of(self.settings.scheduling_policy, evidence)
        if report.policy == self.priority.policy:
            return
        self.priority = report
        if report.policy is None:
            log.info("priority_unknown", why="no vLLM process visible and none configured")
        elif report.effective:
            log.info("priority_effective", policy=report.policy, source=report.source)
        else:
            log.warning(
                "priority_not_effective",
                policy=report.policy,
                source=report.source,
                why="vLLM ignores request priority unless run with --scheduling-policy priority",
            )

    def _snapshot(self, verdict: Verdict, evidence: Evidence, now: float) -> HealthSnapshot:
        readiness = verdict.readiness
        if self.shutting_down:
            readiness = ProbeAnswer(False, SHUTTING_DOWN, now)
        incidents, budget = self.incidents, self.budget
        return health_snapshot(
            verdict,
            evidence,
            enforce=self.settings.enforce,
            priority=self.priority,
            readiness=readiness,
            budget_mode="off" if budget is None else budget.mode.value,
            budget_slot=budget is not None and budget.keeper.lease is not None,
            status=status_document(
                StatusInputs(
                    now=now,
                    target=self.settings.target,
                    enforce=self.settings.enforce,
                    config=self.config,
                    evidence=evidence,
                    verdict=verdict,
                    episodes=self.verdict_state.restarts,
                    brake_window=self.policy.brake_window,
                    priority=self.priority,
                    stalls=self.stalls,
                    last_scrape_error=self.observations.last_scrape_error,
                    evidence_errors=self.observations.errors_json(now),
                    incident=incidents.current,
                    recent_incidents=incidents.recent,
                    transitions=self.transitions,
                    restart_budget={"mode": "off"} if budget is None else budget.status(),
                    sections=fragments(self.providers, _all_sections(evidence), now),
                    pace={
                        "every": self.settings.eval_interval
                        if self.in_play is not None
                        else self.settings.quiet_interval,
                        "in_play": self.in_play,
                    },
                )
            ),
        )


def answer_transitions(previous: Verdict | None, verdict: Verdict, now: float) -> list[Transition]:
    """The kubelet-facing answers that changed from ``previous`` to ``verdict`` (all, at first).

    An answer changes when it flips, or when a red one comes to stand for
    other confirmed hangs (readiness red for slow canaries, then for an
    engine hang). A red answer names the hangs behind it: those its reason
    quotes, or, for liveness and startup while a restart is asked for, the
    restart hangs (startup then answers "restart asked"). Liveness turning
    red while a restart is wanted is the restart ask.
    """
    out: list[Transition] = []
    for probe in PROBES:
        answer: ProbeAnswer = getattr(verdict, probe)
        hangs = _hangs_behind(probe, answer, verdict)
        if previous is None:
            flipped = True
        else:
            before: ProbeAnswer = getattr(previous, probe)
            flipped = before.ok != answer.ok
            if not flipped and _hangs_behind(probe, before, previous) == hangs:
                continue
        restart = probe == "liveness" and not answer.ok and verdict.restart_wanted and flipped
        out.append(Transition(now, probe, answer.ok, answer.reason, hangs, restart))
    return out


def _hangs_behind(probe: str, answer: ProbeAnswer, verdict: Verdict) -> tuple[str, ...]:
    """The kinds of the confirmed hangs a red answer stands for (none for a green one)."""
    if answer.ok:
        return ()
    behind = [h for h in verdict.hangs if h.reason and h.reason in answer.reason]
    if not behind and verdict.restart_wanted and probe != "readiness":
        behind = [h for h in verdict.hangs if h.action is Action.RESTART]
    return tuple(dict.fromkeys(str(h.kind) for h in behind))


def _all_sections(evidence: Evidence) -> dict[str, object]:
    """The sections the verdict judged, the typed built-in ones included, by provider name."""
    return {
        CORRECTNESS.name: evidence.correctness,
        RESTART_GATE.name: evidence.restart_gate,
        **evidence.sections,
    }
