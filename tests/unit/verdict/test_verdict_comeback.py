"""Startup at the floor: a restarted server passes startup on its first served text canary.

Every other kind still has to pass before readiness counts the server, and
readiness says which (issue 41, "Recovery at the floor"). Evaluated in
sequence, as the daemon does, on virtual time.
"""

from __future__ import annotations

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.verdict import Evidence, KindEvidence, Policy, Verdict, VerdictState, evaluate

TEXT = CanaryKind.TEXT
STRUCTURED = CanaryKind.STRUCTURED
CORRECTNESS = CanaryKind("correctness")


def result(kind: CanaryKind, sent: float, reason: Reason = Reason.OK) -> CanaryResult:
    return CanaryResult(f"{kind}-canary", kind, reason, started=sent, duration=0.3)


class Sidecar:
    """The verdict state carried from one evaluation to the next."""

    def __init__(self) -> None:
        self.state = VerdictState()

    def at(
        self, now: float, *kinds: KindEvidence, epoch: int = 1, started: float = 100.0
    ) -> Verdict:
        evidence = Evidence(epoch=epoch, epoch_started=started, kinds={k.kind: k for k in kinds})
        self.state, verdict = evaluate(self.state, evidence, Policy(), now)
        return verdict


def kind(which: CanaryKind, *results: CanaryResult) -> KindEvidence:
    return KindEvidence(which, path=which is not TEXT, results=results)


def test_a_restarted_server_passes_startup_on_its_first_served_text_canary() -> None:
    sidecar = Sidecar()
    before = sidecar.at(101.0, kind(TEXT), kind(STRUCTURED))
    assert not before.startup.ok
    served = sidecar.at(101.5, kind(TEXT, result(TEXT, 101.0)), kind(STRUCTURED))
    assert served.startup.ok
    assert served.startup.since == 101.5  # the evaluation that saw it, not a later tick
    assert "readiness waits on structured" in served.startup.reason
    assert not served.readiness.ok
    assert served.readiness.reason == (
        "readiness waits on structured: not yet passed since the restart"
    )


def test_readiness_waits_for_every_other_kind_then_serves() -> None:
    sidecar = Sidecar()
    text = kind(TEXT, result(TEXT, 101.0))
    failing = kind(STRUCTURED, result(STRUCTURED, 101.0, Reason.TIMEOUT))
    waiting = sidecar.at(112.0, text, failing, kind(CORRECTNESS))
    assert waiting.startup.ok
    assert not waiting.readiness.ok
    assert "correctness, structured (last: timeout)" in waiting.readiness.reason
    half = sidecar.at(113.0, text, failing, kind(CORRECTNESS, result(CORRECTNESS, 112.5)))
    assert half.readiness.reason.startswith("readiness waits on structured (last: timeout)")
    passed = kind(STRUCTURED, result(STRUCTURED, 101.0, Reason.TIMEOUT), result(STRUCTURED, 113.0))
    ready = sidecar.at(114.0, text, passed, kind(CORRECTNESS, result(CORRECTNESS, 112.5)))
    assert ready.startup.ok
    assert ready.readiness.ok, ready.readiness.reason


def test_a_server_that_answers_but_never_serves_stays_startup_red() -> None:
    sidecar = Sidecar()
    results: list[CanaryResult] = []
    for second in range(101, 400, 5):
        results.append(result(TEXT, float(second), Reason.HTTP_STATUS))
        verdict = sidecar.at(second + 0.5, kind(TEXT, *results), kind(STRUCTURED))
        assert not verdict.startup.ok
        assert not verdict.readiness.ok
    # A structured pass alone is no proof that the engine produces tokens.
    alone = sidecar.at(401.0, kind(TEXT, *results), kind(STRUCTURED, result(STRUCTURED, 400.0)))
    assert not alone.startup.ok
    assert "text" in alone.startup.reason


def test_startup_stays_passed_within_the_epoch_and_is_earned_again_after_a_restart() -> None:
    sidecar = Sidecar()
    assert sidecar.at(102.0, kind(TEXT, result(TEXT, 101.0)), kind(STRUCTURED)).startup.ok
    later = sidecar.at(150.0, kind(TEXT, result(TEXT, 140.0, Reason.TIMEOUT)), kind(STRUCTURED))
    assert later.startup.ok  # the kubelet asks no second time
    again = sidecar.at(200.0, kind(TEXT), kind(STRUCTURED), epoch=2, started=190.0)
    assert not again.startup.ok
    assert not again.readiness.ok


def test_the_first_server_says_since_sentinel_started() -> None:
    verdict = Sidecar().at(
        2.0, kind(TEXT, result(TEXT, 1.0)), kind(STRUCTURED), epoch=0, started=0.0
    )
    assert verdict.readiness.reason.endswith("not yet passed since sentinel started")


def test_a_not_yet_that_waits_only_on_canaries_in_flight_is_settling() -> None:
    """What ``/startupz`` and ``/readyz`` hold a moment (sentinel.serve.http)."""
    sidecar = Sidecar()
    before = sidecar.at(101.0, kind(TEXT), kind(STRUCTURED))
    assert not before.startup.ok
    assert before.startup.settling
    text = kind(TEXT, result(TEXT, 101.0))
    in_flight = KindEvidence(STRUCTURED, path=True, outstanding=(101.0,))
    served = sidecar.at(101.5, text, in_flight)
    assert served.startup.ok
    assert not served.readiness.ok
    assert served.readiness.settling  # structured's canary is under way
    # Nothing in flight for the kind readiness waits on: a period's wait is no loss.
    failed = kind(STRUCTURED, result(STRUCTURED, 101.0, Reason.TIMEOUT))
    idle = sidecar.at(112.0, text, failed)
    assert not idle.readiness.ok
    assert not idle.readiness.settling
    # Readiness before the server served is not held: the kubelet asks it after startup.
    assert not Sidecar().at(1.0, kind(TEXT), epoch=0, started=0.0).readiness.settling
