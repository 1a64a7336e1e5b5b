"""vLLM's ``GET /is_sleeping`` and ``GET /is_paused``: the lifecycle endpoints.

vLLM registers them only when the server runs with ``VLLM_SERVER_DEV_MODE=1``;
elsewhere they answer 404 (or a proxy's 401), which is no evidence: the
endpoint is then asked again only every
:data:`~sentinel.evidence.endpoint_poll.ABSENT_RETRY` seconds. Each
answer is a tiny JSON object (``{"is_sleeping": true}``). An endpoint that is
there but gives no word (past the deadline, a reset, a 5xx, a body past
:data:`MAX_BODY_BYTES` or not that object) is *unanswered*: named in
:attr:`LifecyclePoll.unanswered`, so the ledger keeps its last word and
``/status`` says it cannot tell, instead of reading the silence as awake.
Never raises for a failed poll.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sentinel.evidence.endpoint_poll import EndpointPoller

MAX_BODY_BYTES = 4 * 1024


@dataclass(frozen=True, slots=True)
class LifecyclePoll:
    """What the endpoints said (None: absent, or no usable answer)."""

    is_sleeping: bool | None = None
    is_paused: bool | None = None
    # Endpoints there that gave no word this poll, each "GET /path: what happened".
    unanswered: tuple[str, ...] = ()


class LifecyclePoller(EndpointPoller):
    """Asks both endpoints; remembers which are absent and asks those rarely."""

    max_body_bytes = MAX_BODY_BYTES

    async def poll(self) -> LifecyclePoll:
        sleeping, sleeping_problem = await self._ask("/is_sleeping", "is_sleeping")
        paused, paused_problem = await self._ask("/is_paused", "is_paused")
        problems = tuple(p for p in (sleeping_problem, paused_problem) if p)
        return LifecyclePoll(sleeping, paused, problems)

    async def _ask(self, path: str, key: str) -> tuple[bool | None, str]:
        """The endpoint's word (None: absent or none), and what went wrong if it is there."""
        now = self._clock()
        if self._absent(path, now):
            return None, ""
        reply = await self._exchange("GET", path)
        if reply.problem:
            return None, reply.problem
        status, body = reply.status, reply.body
        if status != 200:
            if status is not None and 400 <= status < 500:
                self._mark_absent(path, now)
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
