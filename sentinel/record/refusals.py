"""The runs of deliberate refusals the current server answered, one per state.

A canary answered fast with a refusal (:mod:`sentinel.canary.refusal`) says the
server is there and declining on purpose; the rules of each state need how
long it has been declining, which the bounded canary history cannot tell past
its 50 results (a five-minute bound at a five-second cadence outlives it). So
the ledger keeps, per :class:`~sentinel.canary.refusal.Refusal`, the run that
began with the first refusal after the last success; a success ends every
run, and so does real progress (work beyond sentinel's own canaries) seen
after a run's last refusal: the server serves again, though no canary said so
(under real traffic the text canary is idle-gated). A new epoch forgets them
all. One writer (the ledger), a frozen copy per evaluation.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from sentinel.canary.refusal import Refusal, RefusalSeen
from sentinel.canary.result import CanaryResult

# The message a /status view quotes: vLLM's own bodies are a sentence or two.
MAX_MESSAGE = 300


class Refusals:
    """The latest run of each refusal state (the ledger's; see the module docstring)."""

    def __init__(self) -> None:
        self._runs: dict[Refusal, RefusalSeen] = {}
        # The newest canary's paused refusal, its message and answer time (None:
        # the newest was anything else): a lifecycle source (sentinel.record.lifecycle),
        # whose word lasts only KEEP_WORD past ``paused_at`` unless refreshed.
        self.paused: str | None = None
        self.paused_at: float | None = None

    def reset(self) -> None:
        self._runs.clear()
        self.paused, self.paused_at = None, None

    def progressed(self, at: float | None) -> None:
        """Real progress seen at ``at``: every run whose last refusal came before it ends."""
        if at is not None:
            for refusal in [r for r, run in self._runs.items() if run.at < at]:
                del self._runs[refusal]

    def saw(self, result: CanaryResult, progressed: float | None = None) -> None:
        """One finished canary: a refusal extends (or starts) its run, a success ends them all.

        ``progressed``: when real progress was last seen (runs older than it end first).
        """
        self.progressed(progressed)
        paused = result.refusal is Refusal.PAUSED
        self.paused = _message(result.detail)[:MAX_MESSAGE] if paused else None
        self.paused_at = result.finished if paused else None
        if result.ok:
            self._runs.clear()
            return
        if result.refusal is None or result.awaiting_late:
            return
        self.refused(
            result.refusal,
            since=result.started,
            at=result.finished,
            status=result.http_status,
            message=_message(result.detail),
            source=result.kind.value,
            engine=result.engine,
        )

    def refused(
        self,
        refusal: Refusal,
        *,
        since: float,
        at: float,
        status: int | None,
        message: str,
        source: str,
        engine: int | None = None,
    ) -> None:
        """A refusal seen at ``at`` (``since``: its send); a run keeps its first ``since``."""
        run = self._runs.get(refusal)
        message = message[:MAX_MESSAGE]
        if run is None:
            self._runs[refusal] = RefusalSeen(
                refusal, since, at, 1, status, message, source, engine
            )
            return
        self._runs[refusal] = replace(
            run,
            since=min(run.since, since),
            at=max(run.at, at),
            count=run.count + 1,
            status=status,
            message=message,
            source=source,
            engine=engine,
        )

    def frozen(self) -> MappingProxyType[Refusal, RefusalSeen]:
        return MappingProxyType(dict(self._runs))


def _message(detail: str) -> str:
    """A canary detail without the runner's prefix ("HTTP 503: ", "error in stream: ")."""
    head, sep, rest = detail.partition(": ")
    return rest if sep and (head.startswith("HTTP ") or head == "error in stream") else detail
