"""What every poller of one of vLLM's small side routes shares: one exchange, and absence.

The fault-tolerance status, the lifecycle endpoints, the elastic-EP scale and
the weight identity are each a small JSON answer, asked with the same client,
under a total deadline and a byte cap (:func:`~sentinel.transport.small_exchange`),
with the API key where the route may need it. Each may also be *absent*: a
release or a flag set without it answers "not here" (404 and kin), and a
server's routes do not change within its life, so such a route is asked again
only every :data:`ABSENT_RETRY` seconds, and at once after :meth:`forget`
(a new server). :class:`EndpointPoller` holds that much once; each subclass
keeps what its answer means.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import httpx

from sentinel.transport import SmallAnswer, small_exchange

ABSENT_RETRY = 300.0  # seconds before a route that answered "not here" is asked again


class EndpointPoller:
    """The client, the target, the clock and the deadline, and which routes are absent until when.

    ``max_body_bytes`` is each subclass's cap on one answer. An absence is
    kept per route name; a poller that judges several routes together (the
    fault-tolerance status's two paths) keeps it under one name of its own.
    """

    max_body_bytes: ClassVar[int]

    def __init__(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        clock: Callable[[], float],
        *,
        api_key: str | None = None,
        timeout: float = 2.0,
    ) -> None:
        self._client = client
        self._base = base_url.rstrip("/")
        self._clock = clock
        self._timeout = timeout
        self._api_key = api_key
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self._absent_until: dict[str, float] = {}

    def forget(self) -> None:
        """A new server: a route absent on the old one may be there now."""
        self._absent_until.clear()

    def _absent(self, route: str, now: float) -> bool:
        """``route`` said "not here" and its retry is not yet due at ``now``."""
        return now < self._absent_until.get(route, float("-inf"))

    def _mark_absent(self, route: str, now: float) -> None:
        """``route`` said "not here" at ``now``: ask it again only after :data:`ABSENT_RETRY`."""
        self._absent_until[route] = now + ABSENT_RETRY

    async def _exchange(
        self, method: str, path: str, *, body_only_on_ok: bool = False
    ) -> SmallAnswer:
        """``method path`` asked once; never raises (what went wrong is the answer's problem)."""
        return await small_exchange(
            self._client,
            method,
            self._base + path,
            what=f"{method} {path}",
            limit=self.max_body_bytes,
            deadline=self._timeout,
            headers=self._headers,
            body_only_on_ok=body_only_on_ok,
        )
