"""vLLM's own ``GET /health``: whether the API server still reaches its engine.

vLLM answers 503 once the engine client is dead (EngineCore killed, or a
worker past ``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS``), and keeps answering 200
through a silent hang. It is therefore evidence of death, never of life.

Only a 5xx says the engine is dead. A 404, a redirect (never followed) or a
401/403 is a server without that endpoint (any OpenAI-compatible server that
is not vLLM, or one behind an auth proxy): no evidence either way. The poll has
one total deadline, connect to last byte, and a small byte cap (vLLM's body is
empty), so a trickled or endless answer cannot stall the evidence loop or grow
memory; either is reported, with the status it came with.

One 503 is not death: while an elastic expert-parallel scale runs, vLLM's
``ScalingMiddleware`` (``vllm/entrypoints/serve/elastic_ep/middleware.py``)
answers every path with 503 and ``{"error": "The model is currently
scaling. Please try again later."}``. That body makes the poll
:attr:`HealthPoll.scaling`, a lifecycle state (:mod:`sentinel.record.lifecycle`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from sentinel.evidence.failure import EvidenceFailure, classify_transport_error
from sentinel.transport import BodyDecodingError, BodyTooLarge, iter_capped

DEFAULT_TIMEOUT = 2.0
MAX_BODY_BYTES = 64 * 1024
#: What vLLM's scaling middleware says in its 503 body, on every path.
SCALING_MARK = b"The model is currently scaling"


@dataclass(frozen=True, slots=True)
class HealthPoll:
    """One poll: the status code, and why the answer was not a clean one.

    ``status`` may come with a ``failure`` (a body past its cap or its
    deadline): the status line still says what the server meant.
    """

    at: float
    status: int | None = None
    failure: EvidenceFailure | None = None
    detail: str = ""
    scaling: bool = False  # the 503 of vLLM's elastic EP scaling middleware

    @property
    def ok(self) -> bool:
        return self.status == 200

    @property
    def failing(self) -> bool:
        """The engine is dead by vLLM's own word: a 5xx that is not a scale."""
        return self.status is not None and self.status >= 500 and not self.scaling

    @property
    def no_endpoint(self) -> bool:
        """An answer that says nothing about the engine: not 2xx, not 5xx."""
        return self.status is not None and not 200 <= self.status < 300 and self.status < 500


class VllmHealthPoller:
    """Polls ``{base_url}/health``; never raises for a failed poll."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        clock: Callable[[], float],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        path: str = "/health",
    ) -> None:
        self._client = client
        self._url = base_url.rstrip("/") + path
        self._clock = clock
        self._timeout = timeout

    @property
    def url(self) -> str:
        return self._url

    async def poll(self) -> HealthPoll:
        """One poll; never raises for a failed one."""
        status: int | None = None
        body = bytearray()
        try:
            async with asyncio.timeout(self._timeout):
                # A fresh connection each poll: accepted by whichever API-server
                # process takes it, which shows that process serving
                # (sentinel.evidence.held_sockets).
                async with self._client.stream(
                    "GET",
                    self._url,
                    headers={"Connection": "close"},
                    timeout=self._timeout,
                    follow_redirects=False,
                ) as response:
                    status = response.status_code
                    async for chunk in iter_capped(response, MAX_BODY_BYTES):
                        if status == 503:  # only a scale's 503 says anything in its body
                            body.extend(chunk)
        except TimeoutError:
            return HealthPoll(
                at=self._clock(),
                status=status,
                failure=EvidenceFailure.TIMEOUT,
                detail=f"GET {self._url} not complete within {self._timeout:g}s",
            )
        except (httpx.HTTPError, BodyTooLarge, BodyDecodingError) as exc:
            return HealthPoll(
                at=self._clock(),
                status=status,
                failure=classify_transport_error(exc),
                detail=f"{type(exc).__name__}: {exc}",
            )
        return HealthPoll(at=self._clock(), status=status, scaling=SCALING_MARK in body)
