"""A server that goes away takes its verdict with it (docs/design.md, "Verdict semantics").

Without process evidence, a restarted vLLM is told from the hung one it
replaces only by its absence: it refuses connections while it loads. Past the
dead grace that ends the epoch, so the old server's confirmed hang clears,
startup is earned again, and the restart counts for the brake; with the API
server seen alive the same refusals are the listener-down picture instead.
"""

from __future__ import annotations

from dataclasses import replace

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import TEXT
from sentinel.evidence.process_model import (
    Attribution,
    ProcessInfo,
    ProcessRole,
    ProcessSnapshot,
    ProcessState,
)
from sentinel.record.ledger import Ledger
from sentinel.record.planner import end_if_gone
from sentinel.verdict import Action, Policy, VerdictState, evaluate

GRACE = 5.0


def _ledger() -> Ledger:
    ledger = Ledger([(TEXT, Action.RESTART, None)], 0.0)
    token = ledger.canary_sent(TEXT, 1.0)
    result = CanaryResult("text", TEXT, Reason.OK, started=1.0, duration=0.2)
    ledger.canary_done(TEXT, token, result, 1.2, epoch=0)
    ledger.saw_answer()
    return ledger


def test_refusals_past_the_grace_without_process_evidence_end_the_epoch() -> None:
    ledger = _ledger()
    ledger.saw_refusal(10.0)
    end_if_gone(ledger, 14.9, GRACE)
    assert ledger.epoch == 0
    end_if_gone(ledger, 15.0, GRACE)
    assert (ledger.epoch, ledger.epoch_reason) == (
        1,
        "server went away: connections refused for 5s",
    )
    assert list(ledger.records[TEXT].results) == []  # the old server's history is gone
    end_if_gone(ledger, 60.0, GRACE)
    assert ledger.epoch == 1  # once per going away
    ledger.saw_answer()  # the new server answers: nothing more to end
    ledger.saw_refusal(70.0)
    end_if_gone(ledger, 76.0, GRACE)
    assert ledger.epoch == 2  # and it can go away in turn


def test_a_server_that_never_answered_is_not_gone() -> None:
    ledger = Ledger([(TEXT, Action.RESTART, None)], 0.0)
    ledger.saw_refusal(1.0)  # sentinel started before the server listens
    end_if_gone(ledger, 100.0, GRACE)
    assert ledger.epoch == 0


def test_refusals_while_the_api_server_is_seen_alive_are_listener_down_not_gone() -> None:
    ledger = _ledger()
    api = ProcessInfo(41, ProcessRole.API_SERVER, "vllm", ProcessState.SLEEPING, 100.0)
    snapshot = ProcessSnapshot(at=9.0, api=api, attribution=Attribution.LISTENING_SOCKET)
    ledger.observe_processes(snapshot, 9.0)
    ledger.saw_refusal(10.0)
    end_if_gone(ledger, 100.0, GRACE)
    assert ledger.epoch == 0


def test_the_confirmed_hang_clears_startup_is_earned_again_and_the_restart_counts() -> None:
    ledger = _ledger()
    policy = Policy()
    state, _ = evaluate(VerdictState(), ledger.evidence(2.0, freshness=10.0), policy, 2.0)
    assert state.startup_passed
    ledger.canary_sent(TEXT, 3.0)  # unanswered: the engine hangs
    state, verdict = evaluate(state, ledger.evidence(40.0, freshness=10.0), policy, 40.0)
    assert not verdict.liveness.ok  # no progress evidence: red after the no-evidence window
    ledger.saw_refusal(41.0)  # the kubelet killed it; the new one loads
    end_if_gone(ledger, 46.0, GRACE)
    state, verdict = evaluate(state, ledger.evidence(46.0, freshness=10.0), policy, 46.0)
    assert verdict.new_epoch
    assert verdict.liveness.ok
    assert verdict.hangs == ()
    assert not verdict.startup.ok  # /startupz fails until the new server passes its canaries
    assert state.restarts == (46.0,)  # the brake counts the restart sentinel caused
    again = replace(state)
    _, verdict = evaluate(again, ledger.evidence(200.0, freshness=10.0), policy, 200.0)
    assert verdict.liveness.ok  # loading for minutes is never a hang


def test_while_liveness_asks_for_a_restart_startup_fails_for_the_restarted_server() -> None:
    """The kubelet probes /startupz of the new container before sentinel sees the old one go."""
    ledger = _ledger()
    policy = Policy()
    state, _ = evaluate(VerdictState(), ledger.evidence(2.0, freshness=10.0), policy, 2.0)
    ledger.canary_sent(TEXT, 3.0)
    state, verdict = evaluate(state, ledger.evidence(40.0, freshness=10.0), policy, 40.0)
    assert not verdict.liveness.ok
    assert not verdict.startup.ok
    assert "restart was asked for" in verdict.startup.reason
    observe_only = policy.model_copy(update={"enforce": False})
    _, verdict = evaluate(state, ledger.evidence(41.0, freshness=10.0), observe_only, 41.0)
    assert verdict.liveness.ok
    assert verdict.startup.ok  # nothing restarts the server: its startup stands


def test_the_startup_answer_for_a_restart_leaves_this_servers_startup_standing() -> None:
    """Scheduling (idle gating, the set-aside) reads whether startup passed, not /startupz."""
    ledger = _ledger()
    policy = Policy()
    state, _ = evaluate(VerdictState(), ledger.evidence(2.0, freshness=10.0), policy, 2.0)
    ledger.canary_sent(TEXT, 3.0)
    state, verdict = evaluate(state, ledger.evidence(40.0, freshness=10.0), policy, 40.0)
    assert not verdict.startup.ok
    assert state.startup_passed
