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

from dataclasses import dataclass
from typing import Final

from sentinel.knob import DAY, seconds, setting
from sentinel.verdict.knobs import Knobs
from sentinel.verdict.model import Action, Evidence, Hang, HangKind
from sentinel.verdict.rule import HangRule, past_bound
from sentinel.verdict.sections import SectionKey


@dataclass(frozen=True, slots=True)
class ApiStuckSection:
    """An API-server process stopped, or a connection to the server's port unread, since
    ``since`` (None: neither), and the words for it, as the ``api_watch`` section holds it."""

    since: float | None = None
    detail: str = ""


# The evidence section (sentinel.record.process_readings, from sentinel.evidence.api_watch).
API_WATCH: Final = SectionKey("api_watch", ApiStuckSection)


def api_stuck_since(evidence: Evidence) -> float | None:
    """Since when an API-server process is stuck (None: none is, or not told)."""
    section = evidence.section(API_WATCH)
    return None if section is None else section.since


class ApiKnobs(Knobs):
    """The API-server rule's knobs."""

    api_window: float = seconds(
        60.0,
        "One API-server process of several stopped, or a connection it holds left unread, this "
        "long: its users wait forever.",
        1.0,
        DAY,
    )
    api_policy: Action = setting(
        Action.RESTART, "What an API-server process stopped, or not reading, does."
    )


def api_server(evidence: Evidence, policy: ApiKnobs, now: float) -> Hang | None:
    """An API-server process stopped, or a connection unread, for the API window."""
    stuck = evidence.section(API_WATCH) or ApiStuckSection()
    return past_bound(
        HangKind.API_SERVER,
        policy.api_policy,
        stuck.since,
        policy.api_window,
        evidence,
        now,
        lambda elapsed: f"API server stuck: {stuck.detail} for {elapsed:.0f}s",
    )


RULE = HangRule(
    "api_server",
    api_server,
    ApiKnobs,
    kinds=(HangKind.API_SERVER,),
    action="api_policy",
    windows=("api_window",),
    evidence="one of several API-server processes stopped, or a connection to the server's port "
    "holding request bytes no process reads",
)
