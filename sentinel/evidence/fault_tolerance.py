"""vLLM's fault-tolerance status endpoint, polled: both routes, capped and deadlined.

With ``--enable-fault-tolerance`` (``--fault-tolerance-config`` alone turns the
engine's recovery on but registers no status route: both paths 404) a rank
whose peer link breaks aborts what it holds and waits
*unhealthy* for the orchestrator's ``retry`` up to
``engine_recovery_timeout_sec`` (default 120 s), ``/health`` answering 200
all along. ``GET /fault_tolerance/status`` (0.32/0.33) or ``GET
/v1/fault_tolerance/status`` (0.34: the old path answers 404, and the new one
needs the API key where ``--api-key`` is set) answers the frontend's cached
status of each engine, so it answers while the engine loop waits::

    {"schema_version": 1, "total_engines": 1,
     "engines": [{"id": 0, "status": "unhealthy", "fault_info": "RuntimeError"}]}

What the document and the flags mean is read in
:mod:`sentinel.evidence.ft_status`. Sources:
``vllm/entrypoints/serve/fault_tolerance/api_router.py``,
``vllm/v1/engine/core_client.py`` ``get_status``,
``vllm/v1/fault_tolerance/engine_core_sentinel.py``,
``vllm/config/fault_tolerance.py``.

Hostile like every read: a byte cap, a deadline, at most :data:`MAX_ENGINES`
entries, strings cut short; never raises for a failed poll. 404 on both paths
is "not here" (:attr:`FaultTolerancePoller.missing`: asked again after
:data:`~sentinel.evidence.endpoint_poll.ABSENT_RETRY`, whatever the flags);
401/403 is "cannot tell", with the reason. sentinel only reads: it never sends
``apply``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sentinel.evidence.endpoint_poll import EndpointPoller
from sentinel.evidence.ft_status import FtEngine, parse_status

# The 0.34 path first: a server that has it answers at once, a 0.33 one 404s it once.
PATHS = ("/v1/fault_tolerance/status", "/fault_tolerance/status")
MAX_BODY_BYTES = 64 * 1024
_EITHER = "both status routes"  # the name the absence is kept under: neither gave a status


@dataclass(frozen=True, slots=True)
class FtPoll:
    """One poll's outcome.

    ``engines`` is the status read (None: no status this poll); ``path`` the
    route that answered; ``absent`` both routes answered 404 (fault tolerance
    off, or a server without it); ``problem`` why a route that is there gave
    no usable status (401, a timeout, a 5xx, a body that is not the status).
    """

    engines: tuple[FtEngine, ...] | None = None
    path: str = ""
    absent: bool = False
    problem: str = ""


class FaultTolerancePoller(EndpointPoller):
    """Asks the status route that answers; remembers which, and an absent server's retry."""

    max_body_bytes = MAX_BODY_BYTES
    _path = ""  # the route that last answered
    _missing = False  # and both routes answered 404 when neither gave a status

    def forget(self) -> None:
        """A new server: its release and flags may differ from the old one's."""
        super().forget()
        self._path, self._missing = "", False

    @property
    def absent(self) -> bool:
        """Both routes said "not here" and the retry is not yet due."""
        return self._absent(_EITHER, self._clock())

    @property
    def missing(self) -> bool:
        """:attr:`absent` because both routes answered 404: vLLM registered no status route.

        A server's routes do not change within its life, so this holds even
        where the command line shows fault tolerance on (a timeout or a 401 does not).
        """
        return self._missing and self.absent

    async def poll(self) -> FtPoll:
        """Each route in turn until one answers the status; never raises.

        A 401 on the ``/v1`` route does not prove fault tolerance is on (vLLM's
        API-key middleware guards the whole prefix), so the old route is asked
        too. Whatever gave no status sets the retry :attr:`absent` reports.
        """
        order = (self._path, *(p for p in PATHS if p != self._path)) if self._path else PATHS
        problem = ""
        for path in order:
            status, body, failed = await self._get(path)
            if failed or status in (404, None):
                problem = problem or failed
                continue
            if status in (401, 403):
                key = "a wrong API key" if self._api_key else "no API key configured"
                problem = f"GET {path}: HTTP {status} ({key})"
                continue
            engines = parse_status(body) if status == 200 else None
            if engines is None:
                what = f"HTTP {status}" if status != 200 else "not vLLM's fault-tolerance status"
                problem = problem or f"GET {path}: {what}"
                continue
            self._path = path
            return FtPoll(engines, path)
        self._path, self._missing = "", not problem
        self._mark_absent(_EITHER, self._clock())
        return FtPoll(problem=problem) if problem else FtPoll(absent=True)

    async def _get(self, path: str) -> tuple[int | None, bytes, str]:
        """(HTTP status, body, what went wrong: "" when an answer came whole)."""
        answer = await self._exchange("GET", path, body_only_on_ok=True)
        return answer.status, answer.body, answer.problem
