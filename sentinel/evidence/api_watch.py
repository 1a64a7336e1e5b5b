"""Every API-server process judged by its own evidence (``--api-server-count``).

The processes that share the server's socket cover for each other: a peer
answers ``/health`` and every fresh connection (sentinel's canaries included),
and its progress fills the shared metrics. What one stuck process still shows
is its own: its state (stopped by a signal or a tracer), and the connections
it holds without reading them (:mod:`sentinel.evidence.held_sockets`).
:class:`ApiWatch` keeps since when either has been so; the verdict's
API-server rule (:mod:`sentinel.verdict.api_server`) judges it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sentinel.evidence.held_sockets import UnreadTracker
from sentinel.evidence.process_model import ProcessSnapshot, ProcessState, full_title


@dataclass(slots=True)
class ApiWatch:
    """Since when an API-server process has been stopped, or a connection unread."""

    stopped_since: float | None = None
    stopped_detail: str = ""
    port: int | None = None  # the server's port, for the words
    _unread: UnreadTracker = field(default_factory=UnreadTracker)

    def observe(self, snapshot: ProcessSnapshot, now: float) -> None:
        stopped = [p for p in snapshot.api_processes if p.state is ProcessState.STOPPED]
        if stopped:
            if self.stopped_since is None:
                self.stopped_since = now
            self.stopped_detail = ", ".join(
                f"{full_title(p.name, p.cmdline)} (pid {p.pid}) stopped" for p in stopped
            )
        else:
            self.stopped_since, self.stopped_detail = None, ""
        self._unread.observe(snapshot.held, now, snapshot.served)

    def reset(self) -> None:
        self.stopped_since, self.stopped_detail = None, ""
        self._unread.reset()

    @property
    def since(self) -> float | None:
        """The older of the two conditions' starts (None: neither holds)."""
        unread = self._unread.oldest()
        starts = [] if unread is None else [unread.since]
        if self.stopped_since is not None:
            starts.append(self.stopped_since)
        return min(starts, default=None)

    @property
    def detail(self) -> str:
        """The conditions in words, the process named where it can be read."""
        parts = [self.stopped_detail] if self.stopped_detail else []
        unread = self._unread.oldest()
        if unread is not None:
            holder = (
                f"API-server process {unread.owner}"
                if unread.owner is not None
                else "a process sentinel cannot name (its descriptors are unreadable)"
            )
            many = f" (of {unread.sockets} unread)" if unread.sockets > 1 else ""
            parts.append(
                f"a connection{many} holding {unread.unread} unread bytes, held by {holder}"
            )
        return "; ".join(parts)
