"""Why the target does not answer at all: the ``reachability`` evidence section.

Before the target ever answers (a wrong port, a name that does not resolve, a
firewall dropping packets) no canary runs, since the served model cannot be
resolved, and startup could only name the kinds it waits for. This provider
says why nothing answers, in a few closed words: from the newest canary's
transport failure where one ran (:func:`sentinel.canary.replies.classify`
opens its detail with the transport failure's name), else from the last
``/health`` poll. The startup answer (:mod:`sentinel.verdict.decide`) and the
summary of ``/status`` quote it, and :meth:`Reachability.warn` repeats it in
the log at a bounded rate while it lasts, so a sidecar pointed at nothing
does not fall silent after its first line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sentinel.canary.result import Reason
from sentinel.config.settings import Settings
from sentinel.record.observers import Observations, Observers
from sentinel.record.reading import LedgerReading
from sentinel.telemetry.logging import get_logger
from sentinel.telemetry.redact import redact_url
from sentinel.verdict.decide import REACHABILITY
from sentinel.verdict.sections import SectionKey

log = get_logger("sentinel.reachability")

SECTION = REACHABILITY  # the section's key; sentinel.verdict.decide reads it
WARN_EVERY_S = 60.0  # one warning a minute while the target stays unreachable

REFUSED = "connection refused"
NOT_RESOLVED = "name not resolved"
NO_ROUTE = "no route to host"
TIMEOUT = "timeout"
# How the resolver's errors read (glibc, musl, macOS, and Python's own wording).
_NAME_ERRORS = (
    "name or service not known",
    "nodename nor servname",
    "name resolution",
    "no address associated",
    "name does not resolve",
    "getaddrinfo",
)


def unreachable_words(ledger: LedgerReading, last_health_error: str) -> str:
    """'' while the target answers; else why nothing does (one of the closed words)."""
    if ledger.reachable is True:
        return ""
    results = [
        r
        for record in ledger.records.values()
        for r in record.results
        if r.started >= ledger.epoch_started
    ]
    if results:
        newest = max(results, key=lambda r: r.started + r.duration)
        if newest.reason is Reason.TIMEOUT:
            return TIMEOUT if not ledger.answered else ""
        if newest.reason is not Reason.CONNECT:
            return ""  # something answered it
        return _connect_words(newest.detail)
    failure, _, detail = last_health_error.partition(": ")
    if failure == "connect":
        return _connect_words(detail)
    if failure == "timeout":
        return "" if ledger.answered else TIMEOUT
    if failure or ledger.health_status is not None:
        return ""  # the last /health poll was answered, whatever it said
    return REFUSED if ledger.refused_since is not None else ""


def _connect_words(detail: str) -> str:
    lowered = detail.lower()
    if any(marker in lowered for marker in _NAME_ERRORS):
        return NOT_RESOLVED
    if "unreachable" in lowered or "no route" in lowered:
        return NO_ROUTE
    return REFUSED


class Reachability:
    """The provider of the ``reachability`` section (a str: '' or why nothing answers)."""

    key: SectionKey[str] = SECTION

    def __init__(self, ledger: LedgerReading, observations: Observations, target: str) -> None:
        self._ledger = ledger
        self._observations = observations
        self._target = target  # already redacted: it goes to the log
        self._since: float | None = None  # unreachable since (None: answering)
        self._words = ""
        self._warned_at: float | None = None

    @classmethod
    def for_settings(cls, observers: Observers, settings: Settings) -> Reachability:
        """The provider over the observers' ledger and last ``/health`` word; of the settings
        it reads ``target`` (redacted: it goes to the log)."""
        return cls(observers.ledger, observers.observations, redact_url(settings.target))

    def section(self, now: float) -> str:
        words = unreachable_words(self._ledger, self._observations.last_health_error)
        if words and self._since is None:
            self._since = now
        elif not words:
            self._since = None
        self._words = words
        return words

    def status(self, section: str, now: float) -> Mapping[str, Any] | None:
        words = section
        since = self._since if words else None
        return {
            "unreachable": words or None,
            "for": None if since is None else round(now - since, 3),
        }

    def warn(self, now: float) -> None:
        """Log the unreachable target once per ``WARN_EVERY_S``, and once when it answers again."""
        if not self._words:
            if self._warned_at is not None:
                log.info("target_reachable", target=self._target)
            self._warned_at = None
            return
        if self._warned_at is not None and now - self._warned_at < WARN_EVERY_S:
            return
        self._warned_at = now
        since = now if self._since is None else self._since
        log.warning(
            "target_unreachable",
            target=self._target,
            why=self._words,
            for_s=round(now - since, 1),
            next_warning_in_s=WARN_EVERY_S,
        )
