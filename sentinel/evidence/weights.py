"""Model and weight identity: ``GET /v1/models`` and vLLM's ``GET /weight_info``.

The correctness fingerprint (:mod:`sentinel.fingerprint.book`) is keyed by what
the server serves, never by the server process: the model's id and root (the
weights' path) from ``/v1/models``, and the weight version vLLM reports at
``/weight_info`` (registered with ``VLLM_SERVER_DEV_MODE=1``; set by an RL
controller through ``/finish_weight_update`` or ``/update_weight_version``).
Where ``/weight_info`` answers "not here" (404, 401, 405), there is no
declared version: ``""``, asked again every
:data:`~sentinel.evidence.endpoint_poll.ABSENT_RETRY` seconds.
Any other failure is no answer (None), and the caller keeps what it knew.
Bodies are capped and bounded in time; never raises for a failed poll.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from sentinel.evidence.endpoint_poll import EndpointPoller

MODELS_PATH = "/v1/models"
WEIGHT_INFO_PATH = "/weight_info"
MAX_BODY_BYTES = 256 * 1024  # /v1/models lists a few models (LoRA adapters too)
MAX_NAME = 512


@dataclass(frozen=True, slots=True)
class Identity:
    """What one poll learned (None: no usable answer this time)."""

    model: str | None = None  # "id" or "id @ root" of the model the checks address
    weights: str | None = None  # the declared weight version; "" where none is declared


class WeightsPoller(EndpointPoller):
    """Asks ``/v1/models`` and ``/weight_info``; an absent ``/weight_info`` is asked rarely."""

    max_body_bytes = MAX_BODY_BYTES

    def __init__(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        clock: Callable[[], float],
        *,
        addressed: str | None = None,
        api_key: str | None = None,
        timeout: float = 2.0,
    ) -> None:
        super().__init__(client, base_url, clock, api_key=api_key, timeout=timeout)
        self._addressed = addressed

    async def poll(self) -> Identity:
        model = model_of(await self._get(MODELS_PATH), self._addressed)
        now = self._clock()
        if self._absent(WEIGHT_INFO_PATH, now):
            return Identity(model, "")
        status, payload = await self._get_status(WEIGHT_INFO_PATH)
        if status in (401, 403, 404, 405):
            self._mark_absent(WEIGHT_INFO_PATH, now)
            return Identity(model, "")
        version = payload.get("weight_version") if isinstance(payload, dict) else None
        if status == 200 and isinstance(version, str | int) and not isinstance(version, bool):
            return Identity(model, str(version)[:MAX_NAME])
        return Identity(model, None)

    async def _get(self, path: str) -> Any:
        status, payload = await self._get_status(path)
        return payload if status == 200 else None

    async def _get_status(self, path: str) -> tuple[int | None, Any]:
        """The status (None: no answer came whole) and, for a 200, the decoded body."""
        answer = await self._exchange("GET", path, body_only_on_ok=True)
        if answer.status != 200:
            return answer.status, None
        try:
            return answer.status, json.loads(answer.body)
        except (ValueError, RecursionError):  # RecursionError: nested past the limit
            return answer.status, None


def model_of(payload: Any, addressed: str | None) -> str | None:
    """``id`` (with ``@ root`` where it names other weights) of the model the checks address.

    The entry whose id is ``addressed`` (a configured model), else the first,
    as the canaries address it. None: the list is unusable.
    """
    data = payload.get("data") if isinstance(payload, Mapping) else None
    if not isinstance(data, list):
        return None
    entries = [e for e in data[:256] if isinstance(e, Mapping) and isinstance(e.get("id"), str)]
    chosen = next((e for e in entries if e["id"] == addressed), entries[0] if entries else None)
    if chosen is None or not chosen["id"]:
        return None
    name: str = chosen["id"]
    root = chosen.get("root")
    if isinstance(root, str) and root and root != name:
        name = f"{name} @ {root}"
    return name[:MAX_NAME]
