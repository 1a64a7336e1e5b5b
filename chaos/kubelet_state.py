"""The kubelet's decisions for one container, as a pure state machine fed probe answers and times.

:mod:`chaos.prober` only says when a kill *would* come; showing that a
restarted server is let live needs the restart itself, made as the kubelet
makes it, and the kubelet's rules are easy to get subtly wrong (which probe
runs when, what resets a count, when a crashed container comes back). Kept
pure, those rules can be checked on a virtual clock in milliseconds instead of
the minutes the real back-off takes; :mod:`chaos.kubelet` runs them against a
real process and real probes.

The rules, as the kubelet implements them (its prober worker, and kuberuntime's
``doBackOff`` over client-go's ``flowcontrol.Backoff``):

* until the startup probe succeeds only it runs; liveness and readiness run
  afterwards, each on its own period; no probe before its ``initialDelaySeconds``;
* a probe's result changes only after ``failureThreshold`` failures in a row
  (``successThreshold`` successes); a settled liveness or startup failure kills
  the container, with the probe's ``terminationGracePeriodSeconds``, else the pod's;
* readiness only marks the container ready or unready, and starts unready;
* a container that ended, killed or by itself, starts again after the crash
  back-off: at once the first time, then 10 s, doubling up to 300 s; the
  back-off is forgotten once a container ran more than twice the cap (10 min).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

from chaos.scenario import MANIFEST

KINDS = ("startup", "liveness", "readiness")
POD_DELETED = "pod deleted"  # the kill that ends a run: no fault's doing
FIELDS = {"startup": "startupProbe", "liveness": "livenessProbe", "readiness": "readinessProbe"}


@dataclass(frozen=True, slots=True)
class ProbeSpec:
    """One httpGet probe of a container spec; unset fields take the Kubernetes API's defaults."""

    path: str
    period: float = 10.0
    timeout: float = 1.0
    failure_threshold: int = 3
    success_threshold: int = 1
    initial_delay: float = 0.0
    grace: float | None = None  # the probe's own terminationGracePeriodSeconds

    @classmethod
    def from_spec(cls, probe: Mapping[str, Any]) -> ProbeSpec:
        http = probe.get("httpGet")
        if not isinstance(http, Mapping):
            raise ValueError(f"only httpGet probes can be run here, not {sorted(probe)}")
        grace = probe.get("terminationGracePeriodSeconds")
        return cls(
            path=str(http.get("path", "/")),
            period=float(probe.get("periodSeconds", 10)),
            timeout=float(probe.get("timeoutSeconds", 1)),
            failure_threshold=int(probe.get("failureThreshold", 3)),
            success_threshold=int(probe.get("successThreshold", 1)),
            initial_delay=float(probe.get("initialDelaySeconds", 0)),
            grace=None if grace is None else float(grace),
        )

    def scaled(self, factor: float, timeout_floor: float = 0.0) -> ProbeSpec:
        return replace(
            self,
            period=self.period * factor,
            timeout=max(self.timeout * factor, timeout_floor),
            initial_delay=self.initial_delay * factor,
            grace=None if self.grace is None else self.grace * factor,
        )


@dataclass(frozen=True, slots=True)
class KubeletSettings:
    """The vllm container's probes and the pod's kill and back-off timings."""

    startup: ProbeSpec | None = None
    liveness: ProbeSpec | None = None
    readiness: ProbeSpec | None = None
    grace: float = 30.0  # the pod's terminationGracePeriodSeconds
    backoff_initial: float = 10.0
    backoff_cap: float = 300.0

    @classmethod
    def from_manifest(cls, path: Path = MANIFEST, container: str = "vllm") -> KubeletSettings:
        """The probes of ``container`` in the Deployment of ``path`` (the shipped base)."""
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if not isinstance(document, dict) or document.get("kind") != "Deployment":
                continue
            pod = document["spec"]["template"]["spec"]
            for item in pod.get("containers", []):
                if item.get("name") != container:
                    continue
                specs = {
                    kind: ProbeSpec.from_spec(item[name]) if name in item else None
                    for kind, name in FIELDS.items()
                }
                return cls(
                    startup=specs["startup"],
                    liveness=specs["liveness"],
                    readiness=specs["readiness"],
                    grace=float(pod.get("terminationGracePeriodSeconds", 30)),
                )
        raise ValueError(f"{path}: no Deployment with a container {container!r}")

    def scaled(self, factor: float, timeout_floor: float = 0.0) -> KubeletSettings:
        """Every duration times ``factor`` (thresholds kept); timeouts no shorter than the floor."""

        def scale(spec: ProbeSpec | None) -> ProbeSpec | None:
            return None if spec is None else spec.scaled(factor, timeout_floor)

        return replace(
            self,
            startup=scale(self.startup),
            liveness=scale(self.liveness),
            readiness=scale(self.readiness),
            grace=self.grace * factor,
            backoff_initial=self.backoff_initial * factor,
            backoff_cap=self.backoff_cap * factor,
        )

    def probe(self, kind: str) -> ProbeSpec | None:
        spec: ProbeSpec | None = getattr(self, kind)
        return spec

    def probes(self) -> Iterator[tuple[str, ProbeSpec]]:
        for kind in KINDS:
            if (spec := self.probe(kind)) is not None:
                yield kind, spec

    def kill_grace(self, kind: str | None) -> float:
        spec = self.probe(kind) if kind in KINDS else None  # else the caller's (an alert's) kill
        return self.grace if spec is None or spec.grace is None else spec.grace


@dataclass(slots=True)
class CrashBackOff:
    """client-go's per-container back-off as kuberuntime uses it for restarts."""

    initial: float = 10.0
    cap: float = 300.0
    current: float | None = None  # no entry until the first restart
    last_restart: float | None = None

    def next_start(self, finished_at: float) -> float:
        """When a container that ended at ``finished_at`` starts again; counts that restart."""
        expired = self.last_restart is None or finished_at - self.last_restart > 2 * self.cap
        if self.current is None or expired:
            start, self.current = finished_at, self.initial
        else:
            start = finished_at + self.current
            self.current = min(self.current * 2, self.cap)
        self.last_restart = start
        return start


@dataclass(frozen=True, slots=True)
class Event:
    """One thing the kubelet did or saw; ``container``: 0 the first start, n the n-th restart."""

    at: float
    kind: str  # start restart probe_failure started ready unready kill sigkill exit backoff; notes
    container: int
    probe: str = ""
    detail: str = ""
    data: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class ProbeCounter:
    """The prober worker's run of equal answers, and the result it settles."""

    spec: ProbeSpec
    last: bool | None = None
    run: int = 0

    def feed(self, ok: bool) -> bool | None:
        """The result this answer settles, or None while the run is short of its threshold."""
        if ok == self.last:
            self.run += 1
        else:
            self.last, self.run = ok, 1
        needed = self.spec.success_threshold if ok else self.spec.failure_threshold
        return ok if self.run >= needed else None


class Phase(StrEnum):
    WAITING = "waiting"  # not running: before the first start, or in back-off
    STARTING = "starting"  # only the startup probe runs
    RUNNING = "running"  # started: liveness and readiness run
    TERMINATING = "terminating"  # killed, not yet exited: no probe runs


@dataclass(slots=True)
class KubeletState:
    """One container's life under the kubelet: feed it starts, probe answers and exits."""

    settings: KubeletSettings
    backoff: CrashBackOff = field(init=False)
    phase: Phase = Phase.WAITING
    container: int = -1
    restarts: int = 0
    ready: bool = False
    started_at: float | None = None
    killed_by: str = ""
    counters: dict[str, ProbeCounter] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.backoff = CrashBackOff(self.settings.backoff_initial, self.settings.backoff_cap)

    def start(self, at: float) -> list[Event]:
        self.container += 1
        events = []
        if self.container > 0:
            self.restarts += 1
            events.append(Event(at, "restart", self.container, detail=f"restart {self.restarts}"))
        events.append(Event(at, "start", self.container))
        self.started_at, self.ready, self.killed_by = at, False, ""
        self.counters = {kind: ProbeCounter(spec) for kind, spec in self.settings.probes()}
        self.phase = Phase.STARTING
        if self.settings.startup is None:
            events += self._started(at, "no startup probe")
        return events

    def active(self, kind: str) -> bool:
        """Whether probes of ``kind`` run in this phase."""
        if self.phase is Phase.STARTING:
            return kind == "startup"
        return self.phase is Phase.RUNNING and kind != "startup"

    def due(self, kind: str, at: float) -> bool:
        """Whether the kubelet sends a ``kind`` probe at ``at`` (a tick of that probe's period)."""
        spec = self.settings.probe(kind)
        if spec is None or self.started_at is None or not self.active(kind):
            return False
        return at - self.started_at >= spec.initial_delay

    def feed(
        self, kind: str, at: float, ok: bool, detail: str = "", container: int | None = None
    ) -> list[Event]:
        """One probe answer (to a probe of ``container``, if given); a late one is ignored."""
        stale = container is not None and container != self.container
        if stale or not self.active(kind) or kind not in self.counters:
            return []
        counter = self.counters[kind]
        events = [] if ok else [Event(at, "probe_failure", self.container, kind, detail)]
        settled = counter.feed(ok)
        if settled is None:
            return events
        if kind == "readiness":
            if settled != self.ready:
                self.ready = settled
                events.append(Event(at, "ready" if settled else "unready", self.container, kind))
        elif settled and kind == "startup":
            events += self._started(at, "startup probe succeeded")
        elif not settled:
            reason = f"{kind} probe failed {counter.run} times in a row (last: {detail})"
            events += self.kill(at, reason, kind)
        return events

    def _started(self, at: float, why: str) -> list[Event]:
        self.phase = Phase.RUNNING
        events = [Event(at, "started", self.container, detail=why)]
        if self.settings.readiness is None:
            self.ready = True
            events.append(Event(at, "ready", self.container, detail="no readiness probe"))
        return events

    def kill(self, at: float, reason: str, by: str = "", grace: float | None = None) -> list[Event]:
        """Kill the container: a failed probe's kill, or the caller's (e.g. the pod deleted)."""
        if self.phase in (Phase.WAITING, Phase.TERMINATING):
            return []
        self.phase, self.killed_by = Phase.TERMINATING, by
        grace = self.settings.kill_grace(by) if grace is None else grace
        return [Event(at, "kill", self.container, by, reason, {"grace": grace})]

    def exited(self, at: float, returncode: int) -> tuple[list[Event], float]:
        """The container's main process ended; the events, and when the next start is due."""
        events = [
            Event(
                at,
                "exit",
                self.container,
                self.killed_by,
                f"exit code {returncode}",
                {"returncode": float(returncode)},
            )
        ]
        if self.ready:
            events.append(Event(at, "unready", self.container, detail="container ended"))
        self.phase, self.ready = Phase.WAITING, False
        start = self.backoff.next_start(at)
        wait = start - at
        events.append(
            Event(at, "backoff", self.container, detail=f"{wait:g}s", data={"wait": wait})
        )
        return events, start


def recovery(events: Sequence[Event], fault_at: float) -> dict[str, float]:
    """Seconds from a fault to the first failed liveness probe, the kill, and a new ready container.

    Keys present only for what happened: ``detect`` (a liveness probe failed),
    ``kill`` (the kubelet's, or the container's own exit: a crash),
    ``restart`` (the new container started), ``recover`` (the new container
    ready); ``restarts`` counts restarts since the fault.
    """
    after = [e for e in events if e.at >= fault_at]
    figures: dict[str, float] = {"restarts": float(sum(e.kind == "restart" for e in after))}
    detect = next((e for e in after if e.kind == "probe_failure" and e.probe == "liveness"), None)
    end = next((e for e in after if e.kind in ("kill", "exit") and e.detail != POD_DELETED), None)
    if detect is not None:
        figures["detect"] = detect.at - fault_at
    if end is None:
        return figures
    figures["kill"] = end.at - fault_at
    later = [e for e in after if e.container > end.container]
    for name, kind in (("restart", "start"), ("recover", "ready")):
        if (event := next((e for e in later if e.kind == kind), None)) is not None:
            figures[name] = event.at - fault_at
    return figures


def timeline(events: Sequence[Event], origin: float | None = None) -> str:
    """The events as lines of seconds from ``origin`` (the first event), for test output."""
    if not events:
        return "(no events)"
    zero = events[0].at if origin is None else origin
    return "\n".join(
        f"{e.at - zero:8.2f}s  #{e.container:<2} {e.kind:<14} {e.probe:<10} {e.detail}"
        for e in events
    )
