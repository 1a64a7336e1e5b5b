"""The kubelet-like liveness prober of chaos scenarios: it records when it *would* kill.

It probes like the kubelet does (every ``period`` seconds, a probe slower than
``timeout`` fails, ``failure_threshold`` consecutive failures restart the
container: SIGTERM, then SIGKILL after the probe-level
``terminationGracePeriodSeconds``) with the numbers read from the manifest. It
never kills anything. After a would-be kill it waits out the grace period and
starts counting afresh, as the kubelet does with the restarted container.

:class:`KillArithmetic` is the pure part (answers in, kills out);
:class:`Prober` drives it with a real check on a timer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True, slots=True)
class ProbeSettings:
    """A liveness probe's timing, as in a pod spec."""

    period: float = 5.0
    timeout: float = 3.0
    failure_threshold: int = 4
    grace: float = 10.0

    @classmethod
    def from_manifest(cls, path: Path, container: str = "vllm") -> ProbeSettings:
        """The ``livenessProbe`` of ``container`` in a Deployment manifest."""
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if not isinstance(document, dict) or document.get("kind") != "Deployment":
                continue
            spec = document["spec"]["template"]["spec"]
            for item in spec.get("containers", []):
                if item.get("name") == container and "livenessProbe" in item:
                    probe: dict[str, Any] = item["livenessProbe"]
                    return cls(
                        period=float(probe.get("periodSeconds", 10)),
                        timeout=float(probe.get("timeoutSeconds", 1)),
                        failure_threshold=int(probe.get("failureThreshold", 3)),
                        grace=float(
                            probe.get(
                                "terminationGracePeriodSeconds",
                                spec.get("terminationGracePeriodSeconds", 30),
                            )
                        ),
                    )
        raise ValueError(f"{path}: no Deployment container {container!r} with a livenessProbe")

    def override(
        self,
        period: float | None = None,
        timeout: float | None = None,
        failure_threshold: int | None = None,
        grace: float | None = None,
    ) -> ProbeSettings:
        return ProbeSettings(
            period=self.period if period is None else period,
            timeout=self.timeout if timeout is None else timeout,
            failure_threshold=(
                self.failure_threshold if failure_threshold is None else failure_threshold
            ),
            grace=self.grace if grace is None else grace,
        )


@dataclass(frozen=True, slots=True)
class Probe:
    at: float
    ok: bool
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Kill:
    """A restart the kubelet would have made."""

    at: float  # the failing probe that reached the threshold: SIGTERM
    sigkill_at: float  # at + grace
    streak_started: float  # the first failed probe of the streak
    by: str = ""  # which of several checks reached the threshold, where a prober has several


@dataclass(slots=True)
class KillArithmetic:
    """Consecutive-failure counting with the kubelet's rules; pure (times are passed in)."""

    settings: ProbeSettings
    streak: int = 0
    streak_started: float | None = None
    restarting_until: float | None = None
    kills: list[Kill] = field(default_factory=list)

    def feed(self, at: float, ok: bool) -> Kill | None:
        """Account one probe answer; return the kill it causes, if any."""
        if self.restarting_until is not None:
            if at < self.restarting_until:
                return None  # the container is being replaced: no probe runs
            self.restarting_until = None
        if ok:
            self.streak, self.streak_started = 0, None
            return None
        if self.streak == 0:
            self.streak_started = at
        self.streak += 1
        if self.streak < self.settings.failure_threshold:
            return None
        assert self.streak_started is not None
        kill = Kill(at, at + self.settings.grace, self.streak_started)
        self.kills.append(kill)
        self.streak, self.streak_started = 0, None
        self.restarting_until = kill.sigkill_at
        return kill

    def restarted(self, until: float) -> None:
        """Another check restarted the container: forget the streak, count again from ``until``."""
        self.streak, self.streak_started = 0, None
        self.restarting_until = until


Check = Callable[[], Awaitable[tuple[bool, str]]]


class Prober:
    """Runs ``check`` every ``period`` s with ``timeout``; records probes and would-be kills."""

    def __init__(
        self,
        name: str,
        check: Check,
        settings: ProbeSettings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.check = check
        self.settings = settings
        self.clock = clock
        self.arithmetic = KillArithmetic(settings)
        self.probes: list[Probe] = []

    @property
    def kills(self) -> list[Kill]:
        return self.arithmetic.kills

    @property
    def streak(self) -> int:
        return self.arithmetic.streak

    async def probe_once(self) -> Probe:
        at = self.clock()
        try:
            async with asyncio.timeout(self.settings.timeout):
                ok, detail = await self.check()
        except TimeoutError:
            ok, detail = False, f"timeout after {self.settings.timeout:g}s"
        probe = Probe(at, ok, detail)
        self.probes.append(probe)
        self.arithmetic.feed(at, ok)
        return probe

    async def run(self) -> None:
        """Probe on the period until cancelled; a slow probe does not delay the next."""
        pending: set[asyncio.Task[Probe]] = set()
        next_at = self.clock()
        try:
            while True:
                task = asyncio.get_running_loop().create_task(self.probe_once())
                pending.add(task)
                task.add_done_callback(pending.discard)
                next_at += self.settings.period
                await asyncio.sleep(max(0.0, next_at - self.clock()))
        finally:
            for task in pending:
                task.cancel()


def http_check(client: Any, url: str) -> Check:
    """A kubelet httpGet check: 200..399 passes; anything else, or no answer, fails."""

    async def check() -> tuple[bool, str]:
        try:
            response = await client.get(url)
        except Exception as exc:  # connection refused, reset, ...: a failed probe
            return False, type(exc).__name__
        return 200 <= response.status_code < 400, str(response.status_code)

    return check
