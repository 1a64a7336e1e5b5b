"""One run's record turned into the report's figures, and the scenario's checks.

Pure: :func:`summarize` reads a :class:`~chaos.records.RunRecord` and returns a
frozen :class:`Summary`; nothing here does I/O or reads a clock. Every figure
is seconds from the fault's start (``None``: it never happened). ``to_json``
gives the report's JSON document, whose shape the committed reports share.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from chaos.blackbox import BlackboxSettings
from chaos.load import percentiles
from chaos.prober import Kill, ProbeSettings
from chaos.records import CanaryPoint, RunRecord, Sample, ScrapePoint
from chaos.scenario import Scenario

_T = TypeVar("_T")
GREEN = (200, 200, 200)  # /livez, /readyz, /startupz
CANARY_KINDS = ("text", "structured", "multimodal")


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _since(at: float | None, origin: float | None) -> float | None:
    return None if at is None or origin is None else _round(at - origin)


def _first(items: Iterable[_T], test: Callable[[_T], bool]) -> _T | None:
    return next((item for item in items if test(item)), None)


def _green(sample: Sample) -> bool:
    return (sample.livez, sample.readyz, sample.startupz) == GREEN


@dataclass(frozen=True, slots=True)
class Latency:
    """Successful canaries' latency percentiles, and how many failed."""

    count: int
    failed: int
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None

    @classmethod
    def of(cls, points: Sequence[CanaryPoint]) -> Latency:
        cuts = percentiles([p.duration for p in points if p.ok])
        return cls(
            len(points),
            sum(1 for p in points if not p.ok),
            cuts["p50"],
            cuts["p90"],
            cuts["p99"],
            cuts["max"],
        )


@dataclass(frozen=True, slots=True)
class Latencies:
    all: Latency
    during_fault: Latency
    under_load: Latency

    def window(self, name: str) -> Latency:
        """``all``, ``during_fault`` or ``under_load``."""
        latency: Latency = getattr(self, name)
        return latency


@dataclass(frozen=True, slots=True)
class Kills:
    """A kubelet-like prober's would-be kills: when, how soon after the fault, how many false."""

    would_kill_at: tuple[float | None, ...]
    detection_s: float | None
    false_kills: int


@dataclass(frozen=True, slots=True)
class FailedCanary:
    at_s: float | None
    kind: str
    reason: str


@dataclass(frozen=True, slots=True)
class SentinelFigures:
    first_failed_canary: FailedCanary | None
    livez_red_s: float | None
    hang_kinds: tuple[str, ...]
    liveness_failed_samples: int
    green_again_s: float | None
    kills: Kills
    canary_latency: Mapping[str, Latencies]


@dataclass(frozen=True, slots=True)
class HealthFigures:
    """vLLM's own ``/health``, as a liveness probe on it would have seen the run."""

    codes_seen: tuple[str, ...]
    non_200_s: float | None
    stayed_200_during_fault: bool
    kills: Kills


@dataclass(frozen=True, slots=True)
class NaiveFigures:
    tripped_s: float | None
    trips: int
    kills: Kills
    latency: Latencies


@dataclass(frozen=True, slots=True)
class ModuleFigures:
    """One blackbox_exporter module's scrapes: how many failed, the first after the fault."""

    scrapes: int
    failed: int
    first_failure_s: float | None
    failures_seen: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class BlackboxFigures:
    """The blackbox_exporter baseline, or why it did not run (``ran`` false)."""

    ran: bool
    not_run: str | None
    settings: BlackboxSettings | None
    #: the first failing scrape of any module after the fault started
    first_failure_s: float | None
    modules: Mapping[str, ModuleFigures]
    kills: Kills
    #: the module whose streak caused each would-be restart
    killed_by: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RestartFigures:
    """A SIGKILL scenario: the server's exit, sentinel's startup probe, and the way back."""

    server_exit_s: float | None
    startup_red_s: float | None
    green_after_restart_s: float | None
    stale_liveness_red_after_restart: bool
    epochs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Check:
    check: str
    ok: bool
    detail: str


@dataclass(frozen=True, slots=True)
class Summary:
    """The report's figures for one run, and the verdict on its expectations."""

    name: str
    description: str
    target: str
    fault: str
    error: str | None
    prober: ProbeSettings
    ready_at_s: float | None
    fault_start_s: float | None
    fault_end_s: float | None
    priority_effective: bool | None
    sentinel: SentinelFigures
    vllm_health: HealthFigures
    naive: NaiveFigures
    blackbox: BlackboxFigures
    load: Mapping[str, Any] | None
    restart: RestartFigures | None
    events: tuple[tuple[float, str], ...]
    checks: tuple[Check, ...]
    passed: bool

    def to_json(self) -> dict[str, Any]:
        """The report's JSON for this run; a prober's kill figures sit beside the others."""
        doc = asdict(self)
        for part in ("sentinel", "vllm_health", "naive", "blackbox"):
            section = doc[part]
            section.update(section.pop("kills"))
            section["would_kill_at"] = list(section["would_kill_at"])
        doc["blackbox"]["killed_by"] = list(self.blackbox.killed_by)
        for module in doc["blackbox"]["modules"].values():
            module["failures_seen"] = list(module["failures_seen"])
        doc["sentinel"]["hang_kinds"] = list(self.sentinel.hang_kinds)
        doc["vllm_health"]["codes_seen"] = list(self.vllm_health.codes_seen)
        if doc["restart"] is not None:
            doc["restart"]["epochs"] = list(self.restart.epochs) if self.restart else []
        doc["load"] = None if self.load is None else dict(self.load)
        doc["events"] = [{"at_s": round(at, 2), "what": what} for at, what in self.events]
        doc["checks"] = [asdict(c) for c in self.checks]
        return doc


class _Windows:
    """The run's time windows: harmful fault, fault (open ones end with the run), load."""

    def __init__(self, record: RunRecord) -> None:
        start, end = record.fault_start, record.fault_end
        self.fault = None if start is None else (start, end if end is not None else record.end)
        self.harmful = [self.fault] if record.scenario.fault.harmful and self.fault else []
        self.load = record.load_window

    def in_harmful(self, at: float) -> bool:
        return any(start <= at <= end for start, end in self.harmful)

    def latencies(self, points: Sequence[CanaryPoint]) -> Latencies:
        def inside(window: tuple[float, float] | None) -> list[CanaryPoint]:
            if window is None:
                return []
            return [p for p in points if window[0] <= p.started <= window[1]]

        return Latencies(
            Latency.of(points), Latency.of(inside(self.fault)), Latency.of(inside(self.load))
        )


def _kills(found: Sequence[Kill], windows: _Windows, start: float | None) -> Kills:
    true = [k for k in found if windows.in_harmful(k.streak_started)]
    return Kills(
        tuple(_round(k.at) for k in found),
        _since(true[0].at, start) if true else None,
        len(found) - len(true),
    )


def _restart(record: RunRecord, samples: list[Sample], after_fault: list[Sample]) -> RestartFigures:
    start, restarted = record.fault_start, record.server_restarted_at
    startup_red = _first(after_fault, lambda s: s.startupz is not None and s.startupz != 200)
    after_restart = [s for s in samples if restarted is not None and s.at >= restarted]
    green_after = _first(after_restart, _green)
    return RestartFigures(
        server_exit_s=_since(record.server_exit_at, start),
        startup_red_s=_since(None if startup_red is None else startup_red.at, start),
        green_after_restart_s=_since(None if green_after is None else green_after.at, restarted),
        stale_liveness_red_after_restart=any(s.livez != 200 or s.hangs for s in after_restart),
        epochs=tuple(sorted({s.epoch for s in samples if s.epoch is not None})),
    )


def _sentinel(
    record: RunRecord, windows: _Windows, samples: list[Sample], after_fault: list[Sample]
) -> SentinelFigures:
    start, end = record.fault_start, record.fault_end
    red = _first(after_fault, lambda s: s.livez is not None and s.livez != 200)
    after = sorted(
        (c for c in record.canaries if start is not None and c.started >= start),
        key=lambda c: c.started + c.duration,
    )
    failed = _first(after, lambda c: not c.ok)
    green = None if end is None else _first((s for s in samples if s.at >= end), _green)
    by_kind = {
        kind: windows.latencies(points)
        for kind in CANARY_KINDS
        if (points := [c for c in record.canaries if c.kind == kind])
    }
    return SentinelFigures(
        first_failed_canary=None
        if failed is None or start is None
        else FailedCanary(
            _since(failed.started + failed.duration, start), failed.kind, failed.reason
        ),
        livez_red_s=_since(None if red is None else red.at, start),
        hang_kinds=tuple(sorted({h for s in after_fault for h in s.hangs})),
        liveness_failed_samples=sum(1 for s in samples if s.livez is not None and s.livez != 200),
        green_again_s=None if green is None or end is None else _round(green.at - end),
        kills=_kills(record.kills.get("sentinel", []), windows, start),
        canary_latency=by_kind,
    )


def _module(points: Sequence[ScrapePoint], start: float | None) -> ModuleFigures:
    failed = [p for p in points if not p.ok]
    after = _first(
        sorted(failed, key=lambda p: p.started),
        lambda p: start is not None and p.started + p.duration >= start,
    )
    return ModuleFigures(
        scrapes=len(points),
        failed=len(failed),
        first_failure_s=None if after is None else _since(after.started + after.duration, start),
        failures_seen=tuple(sorted({p.detail for p in failed})),
    )


def _blackbox(record: RunRecord, windows: _Windows, start: float | None) -> BlackboxFigures:
    modules = {
        module: _module([p for p in record.blackbox if p.module == module], start)
        for module in sorted({p.module for p in record.blackbox})
    }
    firsts = [m.first_failure_s for m in modules.values() if m.first_failure_s is not None]
    kills = record.kills.get("blackbox", [])
    return BlackboxFigures(
        ran=record.blackbox_not_run is None,
        not_run=record.blackbox_not_run,
        settings=record.blackbox_settings,
        first_failure_s=min(firsts) if firsts else None,
        modules=modules,
        kills=_kills(kills, windows, start),
        killed_by=tuple(k.by for k in kills),
    )


def summarize(record: RunRecord) -> Summary:
    """The report's figures for one run, and the verdict on its expectations."""
    scenario, fault, start = record.scenario, record.scenario.fault, record.fault_start
    windows = _Windows(record)
    samples = [s for s in record.samples if record.ready_at is None or s.at >= record.ready_at]
    after_fault = [s for s in samples if start is not None and s.at >= start]
    non200 = _first(after_fault, lambda s: s.vllm_health != 200)
    naive_trips = [t for t in record.naive_trips if start is None or t >= start]
    fault_window = windows.fault
    health = HealthFigures(
        codes_seen=tuple(sorted({str(s.vllm_health) for s in record.samples})),
        non_200_s=_since(None if non200 is None else non200.at, start),
        stayed_200_during_fault=all(
            s.vllm_health == 200
            for s in after_fault
            if fault_window is not None and s.at <= fault_window[1]
        ),
        kills=_kills(record.kills.get("vllm_health", []), windows, start),
    )
    naive = NaiveFigures(
        tripped_s=_since(naive_trips[0], start) if naive_trips else None,
        trips=len(record.naive_trips),
        kills=_kills(record.kills.get("naive", []), windows, start),
        latency=windows.latencies(record.naive),
    )
    sentinel = _sentinel(record, windows, samples, after_fault)
    restart = _restart(record, samples, after_fault) if fault.kind == "sigkill" else None
    checks = tuple(expectations(scenario, sentinel, health, restart))
    return Summary(
        name=scenario.name,
        description=scenario.description,
        target=scenario.target.kind,
        fault=fault.kind + (f" ({fault.process})" if fault.process else ""),
        error=record.error,
        prober=record.probe_settings,
        ready_at_s=_round(record.ready_at),
        fault_start_s=_round(start),
        fault_end_s=_round(record.fault_end),
        priority_effective=record.priority_effective,
        sentinel=sentinel,
        vllm_health=health,
        naive=naive,
        blackbox=_blackbox(record, windows, start),
        load=record.load_summary,
        restart=restart,
        events=tuple((e.at, e.what) for e in record.events),
        checks=checks,
        passed=record.error is None and all(c.ok for c in checks),
    )


def expectations(
    scenario: Scenario,
    sentinel: SentinelFigures,
    health: HealthFigures,
    restart: RestartFigures | None,
) -> list[Check]:
    """One check per expectation the scenario states, each with what was seen."""
    expect = scenario.expect
    out: list[Check] = []
    if expect.detect_within is not None:
        red = sentinel.livez_red_s
        out.append(
            Check(
                f"/livez red within {expect.detect_within:g}s",
                red is not None and red <= expect.detect_within,
                f"red after {red}s" if red is not None else "never red",
            )
        )
    if expect.hang_kinds is not None:
        out.append(
            Check(
                "hang kinds among " + ", ".join(expect.hang_kinds),
                expect.hang_kinds_met(sentinel.hang_kinds),
                f"seen {list(sentinel.hang_kinds)}",
            )
        )
    if expect.vllm_health_stays_200:
        out.append(
            Check(
                "vLLM /health stayed 200",
                health.stayed_200_during_fault,
                f"codes seen {list(health.codes_seen)}",
            )
        )
    if expect.text_canaries_pass:
        text = sentinel.canary_latency.get("text")
        during = text.during_fault if text is not None else Latency.of([])
        out.append(
            Check(
                "text canaries pass during the fault",
                during.count > 0 and during.failed == 0,
                f"{during.count} sent, {during.failed} failed",
            )
        )
    if expect.no_liveness_failure:
        kills = sentinel.kills.would_kill_at
        out.append(
            Check(
                "no liveness failure",
                sentinel.liveness_failed_samples == 0 and not kills,
                f"{sentinel.liveness_failed_samples} red samples, {len(kills)} would-be kills",
            )
        )
    if expect.green_again_within is not None:
        green = sentinel.green_again_s
        out.append(
            Check(
                f"green again within {expect.green_again_within:g}s",
                green is not None and green <= expect.green_again_within,
                f"green after {green}s" if green is not None else "not green again",
            )
        )
    if expect.reenters_startup:
        ok = (
            restart is not None
            and restart.startup_red_s is not None
            and restart.green_after_restart_s is not None
            and not restart.stale_liveness_red_after_restart
        )
        detail = json.dumps(asdict(restart) if restart is not None else {})
        out.append(Check("re-enters startup, green after restart, no stale verdict", ok, detail))
    return out
