"""vLLM's own ``GET /health``: whether the API server still reaches its engine.

vLLM answers 503 once the engine client is dead (EngineCore killed, or a
worker past ``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS``), and keeps answering 200
through a silent hang. It is therefore evidence of death, never of life. The
poll uses a short timeout so a wedged API server cannot stall the evidence loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import httpx

from sentinel.evidence.failure import EvidenceFailure, classify_transport_error

DEFAULT_TIMEOUT = 2.0


@dataclass(frozen=True, slots=True)
class HealthPoll:
    """One poll: the status code, or why there was none."""

    at: float
    status: int | None = None
    failure: EvidenceFailure | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == 200


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
        try:
            response = await self._client.get(self._url, timeout=self._timeout)
        except httpx.TransportError as exc:
            return HealthPoll(
                at=self._clock(), failure=classify_transport_error(exc), detail=repr(exc)
            )
        return HealthPoll(at=self._clock(), status=response.status_code)
