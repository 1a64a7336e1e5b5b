"""The naive canary baseline: what a liveness canary without sentinel's evidence would do.

It sends sentinel's own text canary request (same prompt, same deadline, same
cadence) at priority 0, sequentially, with no idle gating and no progress
evidence. It trips (reports unhealthy) once its consecutive failures span
sentinel's engine-hang confirmation window, the same time sentinel waits
before it confirms a hang, and stays tripped until a canary succeeds. A
kubelet-like prober on :meth:`NaiveCanary.check` then decides when the
kubelet would kill, exactly as it does for sentinel's ``/livez``.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from sentinel.canary.spec import CanarySpec


@dataclass(frozen=True, slots=True)
class NaiveResult:
    started: float
    duration: float
    ok: bool
    reason: str

    @property
    def finished(self) -> float:
        return self.started + self.duration


@dataclass(frozen=True, slots=True)
class Trip:
    at: float
    streak_started: float
    failures: int


class NaiveCanary:
    """One canary loop; ``results`` and ``trips`` grow while :meth:`run` runs."""

    def __init__(
        self,
        target: str,
        model: str,
        spec: CanarySpec,
        *,
        hang_window: float,
        priority: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.target = target.rstrip("/")
        self.spec = spec
        self.hang_window = hang_window
        self.clock = clock
        body: dict[str, Any] = copy.deepcopy(dict(spec.request))
        body.setdefault("model", model)
        body["priority"] = priority
        body.pop("stream", None)
        self.body = body
        self.results: list[NaiveResult] = []
        self.trips: list[Trip] = []
        self.tripped = False
        self._streak_started: float | None = None
        self._streak = 0

    def verdict(self, result: NaiveResult) -> Trip | None:
        """Account one result (pure apart from this object's state); the trip it causes."""
        if result.ok:
            self._streak, self._streak_started, self.tripped = 0, None, False
            return None
        if self._streak == 0:
            self._streak_started = result.started
        self._streak += 1
        assert self._streak_started is not None
        if self.tripped or result.finished - self._streak_started < self.hang_window:
            return None
        self.tripped = True
        trip = Trip(result.finished, self._streak_started, self._streak)
        self.trips.append(trip)
        return trip

    async def check(self) -> tuple[bool, str]:
        """What a liveness endpoint backed by this canary would answer."""
        return (not self.tripped, "tripped" if self.tripped else "ok")

    async def _one(self, client: httpx.AsyncClient) -> NaiveResult:
        started = self.clock()
        try:
            async with asyncio.timeout(self.spec.deadline):
                response = await client.post(
                    self.target + self.spec.endpoint, json=self.body, timeout=None
                )
        except TimeoutError:
            return NaiveResult(started, self.clock() - started, False, "timeout")
        except httpx.HTTPError as exc:
            return NaiveResult(started, self.clock() - started, False, type(exc).__name__)
        duration = self.clock() - started
        if response.status_code != 200:
            return NaiveResult(started, duration, False, f"http_{response.status_code}")
        try:
            payload = response.json()
            choice = payload["choices"][0]
            text = (choice.get("message") or {}).get("content") or choice.get("text") or ""
            tokens = int((payload.get("usage") or {}).get("completion_tokens") or 0)
        except (ValueError, KeyError, IndexError, TypeError):
            return NaiveResult(started, duration, False, "bad_body")
        # Same rule as sentinel's text canary: a decoded token is proof of life,
        # even when the server strips it from the text (special tokens).
        alive = bool(text) or tokens > 0
        return NaiveResult(started, duration, alive, "ok" if alive else "empty")

    async def run(self) -> None:
        """Send a canary every ``interval`` s (the next one once the last ended) until cancelled."""
        limits = httpx.Limits(max_connections=2, max_keepalive_connections=1)
        async with httpx.AsyncClient(limits=limits) as client:
            while True:
                result = await self._one(client)
                self.results.append(result)
                self.verdict(result)
                next_at = result.started + self.spec.interval
                await asyncio.sleep(max(0.0, next_at - self.clock()))
