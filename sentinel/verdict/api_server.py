"""The API-server rule: one of several API-server processes stuck while its peers serve.

With ``--api-server-count N`` the processes share one socket, so a stuck one
is covered by its peers: they answer ``/health`` and every fresh connection,
sentinel's canaries included, and their progress fills the shared metrics.
Only what the stuck process holds shows it (:mod:`sentinel.evidence.api_watch`):
a process stopped, or a connection to the server's port whose request bytes
no process reads, for ``api_window``. Its users (a router's pooled
connections) wait forever, and it does not heal: policy ``restart``. The
reasoning is in ``docs/design.md`` ("Verdict semantics").
"""

from __future__ import annotations

from collections.abc import Sequence

from sentinel.verdict.clock import held_for
from sentinel.verdict.model import Evidence, Hang, HangKind, KindEvidence, Policy


def api_server(
    evidence: Evidence, enabled: Sequence[KindEvidence], policy: Policy, now: float
) -> Hang | None:
    """An API-server process stopped, or a connection unread, for the API window."""
    since = evidence.api_stuck_since
    elapsed = held_for(since, policy.api_window, now, evidence.unobserved)
    if since is None or elapsed is None:
        return None
    return Hang(
        HangKind.API_SERVER,
        policy.api_policy,
        f"API server stuck: {evidence.api_stuck_detail} for {elapsed:.0f}s",
        since,
    )
