"""The planner: the one place a canary kind is set aside or falls back.

Three things take a kind out of its configured course for a server epoch,
and all are decided here, each at the moment its evidence is complete:

- the server's command line says the kind cannot be validated
  (:func:`sentinel.canary.kinds.unvalidatable`): before each judgement,
  since the process watcher reads it and a new epoch re-enables every kind;
- the kind's canary was refused as unsupported (the model does not take the
  input), or its last canaries were never conclusive before startup
  (:mod:`sentinel.record.set_aside`): after each scheduler step, so no step
  goes out for a kind already set aside;
- the text canary's chat requests were refused as a capability
  (:class:`~sentinel.record.set_aside.ChatFallback`): after each step too.

Here, in the record, because every input is the record's (the kinds'
results, the process snapshot, the epoch) and every outcome is too (the
kind's record for ``/status``, the frozen :class:`~sentinel.record.plan.Plan`
scheduling reads): the scheduler and the evaluator only say when; neither
writes the ledger. The evaluator's judgement reaches the plan the same way
(:meth:`Planner.judged`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sentinel.canary import kinds
from sentinel.canary.protocol import ServerFacts
from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind, CanarySpec
from sentinel.record.ledger import Ledger
from sentinel.record.plan import Plan
from sentinel.record.set_aside import ChatFallback, review
from sentinel.telemetry.logging import get_logger

log = get_logger("sentinel.planner")


class Planner:
    """Sets kinds aside and falls back for one ledger; publishes the plan."""

    def __init__(self, ledger: Ledger, specs: Iterable[CanarySpec] = ()) -> None:
        self.ledger = ledger
        self.specs = tuple(s for s in specs if s.enabled)
        self.chat = ChatFallback(self.specs)
        self._disabled_said: set[tuple[CanaryKind, str]] = set()

    @property
    def plan(self) -> Plan:
        """The plan in force (a new epoch's is fresh)."""
        return self.ledger.plan

    # -- the evaluator's side ----------------------------------------------
    def judged(self, startup_passed: bool) -> None:
        """Publish the judgement's word on startup (the verdict's state, not ``/startupz``)."""
        self.ledger.startup_judged(startup_passed)

    def end_if_gone(self, now: float, grace: float) -> None:
        """Before a judgement: end a departed server's epoch (:func:`end_if_gone`)."""
        end_if_gone(self.ledger, now, grace)

    def set_aside_unvalidatable(self) -> None:
        """Set aside each kind the server's command line says cannot be validated; log it once.

        Known from the command line (``ProcessSnapshot.reasoning_parser``), not
        guessed from replies. Runs before each judgement, so again after a
        server restart, whose new epoch re-enables every kind.
        """
        snapshot = self.ledger.processes
        if snapshot is None or not self.specs:
            return
        facts = ServerFacts(reasoning_parser=snapshot.reasoning_parser)
        for kind, why in kinds.unvalidatable(self.specs, facts).items():
            record = self.ledger.records.get(kind)
            if record is None or not record.enabled:
                continue
            self.ledger.disable(kind, why)
            if (kind, why) not in self._disabled_said:
                self._disabled_said.add((kind, why))
                log.warning("canary_kind_disabled", kind=kind.value, why=why)

    # -- the scheduler's side ----------------------------------------------
    def after_step(self, spec: CanarySpec, results: Sequence[CanaryResult], epoch: int) -> None:
        """One scheduler step of ``spec`` ended with ``results`` (sent in ``epoch``).

        In this order, as each can end what the next would say: a kind
        refused as unsupported is set aside; before startup, a kind never
        conclusive is on its way to being set aside, or is; the text canary
        falls back. Nothing changes for an epoch already over.
        """
        if epoch != self.ledger.epoch:
            return
        unsupported = next((r for r in results if r.reason is Reason.UNSUPPORTED), None)
        if unsupported is not None:
            why = unsupported.detail
            self.ledger.disable(spec.kind, why or "the model does not take this input")
            log.warning("canary_kind_disabled", canary=spec.name, kind=spec.kind.value, why=why)
        self._review_set_aside(spec)
        self._review_fallback()

    def _review_set_aside(self, spec: CanarySpec) -> None:
        """Before startup, set aside a kind this server can never answer (:mod:`.set_aside`)."""
        ledger = self.ledger
        record = ledger.records.get(spec.kind)
        if record is None or not record.enabled or spec.kind == kinds.CONTROL:
            return
        waiting, why = review(record, started=ledger.plan.startup_passed)
        if waiting is not None:
            log.info("canary_kind_refused", canary=spec.name, kind=spec.kind.value, why=waiting)
        if why is not None:
            ledger.disable(spec.kind, why)
            log.warning("canary_kind_set_aside", canary=spec.name, kind=spec.kind.value, why=why)

    def _review_fallback(self) -> None:
        """Send text as a plain completion when chat cannot work (:class:`.ChatFallback`)."""
        ledger = self.ledger
        why = self.chat.review(ledger.records.get(kinds.CONTROL), ledger.epoch)
        if why is not None:
            ledger.fall_back(kinds.CONTROL, why)
            log.warning("canary_kind_fell_back", kind=kinds.CONTROL.value, why=why)


def end_if_gone(ledger: Ledger, now: float, grace: float) -> None:
    """End the epoch when the server went away: refused past ``grace``, its API server unseen.

    A restarted vLLM refuses connections while it loads its model, and
    without process evidence nothing else tells the new server from the
    old: the old one's confirmed hang would stay confirmed and its
    startup passed, and the kubelet would kill the new one mid-load. The
    new epoch's plan is fresh: startup is earned again, every kind runs.
    """
    since = ledger.refused_since
    if since is None or not ledger.answered or now - since < grace:
        return
    if ledger.api_alive() is True:
        return
    ledger.new_epoch(f"server went away: connections refused for {now - since:.0f}s", now)
