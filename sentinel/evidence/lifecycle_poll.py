"""vLLM's ``GET /is_sleeping`` and ``GET /is_paused``: the lifecycle endpoints.

vLLM registers them only when the server runs with ``VLLM_SERVER_DEV_MODE=1``;
elsewhere they answer 404 (or a proxy's 401), which is no evidence: the
endpoint is then asked again only every :data:`ABSENT_RETRY` seconds. Each
answer is a tiny JSON object (``{"is_sleeping": true}``). An endpoint that is
there but gives no word (past the deadline, a reset, a 5xx, a body past
:data:`MAX_BODY_BYTES` or not that object) is *unanswered*: named in
:attr:`LifecyclePoll.unanswered`, so the ledger keeps its last word and
``/status`` says it cannot tell, instead of reading the silence as awake.
Never raises for a failed poll.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from sentinel.transport import small_exchange

MAX_BODY_BYTES = 4 * 1024
ABSENT_RETRY = 300.0  # seconds before an endpoint that answered "not here" is asked again


@dataclass(frozen=True, slots=True)
class LifecyclePoll:
    """What the endpoints said (None: absent, or no usable answer)."""

    is_sleeping: bool | None = None
    is_paused: bool | None = None
    # Endpoints there that gave no word this poll, each "GET /path: what happened".
    unanswered: tuple[str, ...] = ()


class LifecyclePoller:
    """Asks both endpoints; remembers which are absent and asks those rarely."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        clock: Callable[[], float],
        *,
        timeout: float = 2.0,
    ) -> None:
        self._client = client
        self._base = base_url.rstrip("/")
        self._clock = clock
        self._timeout = timeout
        self._absent_until: dict[str, float] = {}

    async def poll(self) -> LifecyclePoll:
        sleeping, sleeping_problem = await self._ask("/is_sleeping", "is_sleeping")
        paused, paused_problem = await self._ask("/is_paused", "is_paused")
        problems = tuple(p for p in (sleeping_problem, paused_problem) if p)
        return LifecyclePoll(sleeping, paused, problems)

    async def _ask(self, path: str, key: str) -> tuple[bool | None, str]:
        """The endpoint's word (None: absent or none), and what went wrong if it is there."""
        now = self._clock()
        if now < self._absent_until.get(path, float("-inf")):
            return None, ""
        reply = await small_exchange(
            self._client,
            "GET",
            self._base + path,
            what=f"GET {path}",
            limit=MAX_BODY_BYTES,
            deadline=self._timeout,
        )
        if reply.problem:
            return None, reply.problem
        status, body = reply.status, reply.body
        if status != 200:
            if status is not None and 400 <= status < 500:
                self._absent_until[path] = now + ABSENT_RETRY
                return None, ""
            return None, f"GET {path}: HTTP {status}"
        try:
            value = json.loads(body)
        except (ValueError, RecursionError):  # RecursionError: nested past the limit
            return None, f"GET {path}: not JSON"
        answer = value.get(key) if isinstance(value, dict) else None
        if not isinstance(answer, bool):
            return None, f"GET {path}: no {key!r} in the answer"
        return answer, ""

    def forget(self) -> None:
        """A new server: endpoints absent on the old one may be there now."""
        self._absent_until.clear()
