"""Three readings of each process sample, each the provider of its own evidence section.

The engine's CPU (:mod:`sentinel.evidence.engine_cpu`, the ``engine_cpu``
section the engine rule reads), compilers busy under the engine
(:mod:`sentinel.evidence.compilers`, the ``compile`` section the compile gate
reads) and API-server processes stuck (:mod:`sentinel.evidence.api_watch`, the
``api_watch`` section the API-server rule reads). Each is told every process
sample by the observers, before the ledger (:meth:`Observers.process_step
<sentinel.record.observers.Observers.process_step>`), and freezes its section
when the evaluator gathers: none of them passes through the ledger or the
evidence's own fields. None shows a ``/status`` fragment of its own: the
compile reading is quoted in ``/status``'s ``evidence`` block, from the section
judged (:mod:`sentinel.evaluation.status`).

The API watch follows the server's epochs: a new one forgets the stuck
processes of the old server (its section is empty from the moment the epoch
changes, and the watch starts afresh at the next sample). The engine's CPU
follows its own processes, and a compile outlives no gap of
:data:`~sentinel.evidence.compilers.STORM_GAP`, so neither needs the epoch.
None needs a setting: their bounds are the rules' knobs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sentinel.evidence.api_watch import ApiWatch
from sentinel.evidence.compilers import CompileWatch
from sentinel.evidence.engine_cpu import EngineCpuWatch
from sentinel.evidence.process_model import ProcessSnapshot
from sentinel.record.observers import Observers
from sentinel.record.reading import LedgerReading
from sentinel.verdict.hangs.api_server import API_WATCH, ApiStuckSection
from sentinel.verdict.hangs.engine import ENGINE_CPU, EngineCpuSection
from sentinel.verdict.sections import SectionKey
from sentinel.verdict.stall import COMPILE, CompileSection


class EngineCpuReading:
    """The provider of the ``engine_cpu`` section: the engine's processes standing still."""

    key: SectionKey[EngineCpuSection] = ENGINE_CPU

    def __init__(self) -> None:
        self.watch = EngineCpuWatch()

    def observe(self, snapshot: ProcessSnapshot, now: float) -> None:
        self.watch.observe(snapshot, now)

    def section(self, now: float) -> EngineCpuSection:
        cpu = self.watch.current
        return EngineCpuSection(cpu.idle_since, cpu.sampled_at, cpu.unknown)

    def status(self, section: EngineCpuSection, now: float) -> Mapping[str, Any] | None:
        return None


class CompileReading:
    """The provider of the ``compile`` section: compilers busy under the engine."""

    key: SectionKey[CompileSection] = COMPILE

    def __init__(self) -> None:
        self.watch = CompileWatch()

    def observe(self, snapshot: ProcessSnapshot, now: float) -> None:
        self.watch.observe(snapshot.compilers, now)

    def section(self, now: float) -> CompileSection:
        watch = self.watch
        return CompileSection(watch.since, watch.seen_at, watch.detail)

    def status(self, section: CompileSection, now: float) -> Mapping[str, Any] | None:
        return None  # /status's evidence block quotes it


class ApiWatchReading:
    """The provider of the ``api_watch`` section: an API-server process stopped or not reading."""

    key: SectionKey[ApiStuckSection] = API_WATCH

    def __init__(self, ledger: LedgerReading) -> None:
        self._ledger = ledger
        self._epoch = ledger.epoch
        self.watch = ApiWatch()

    def observe(self, snapshot: ProcessSnapshot, now: float) -> None:
        if self._ledger.epoch != self._epoch:  # a new server: the old one's processes are gone
            self._epoch = self._ledger.epoch
            self.watch.reset()
        self.watch.observe(snapshot, now)

    def section(self, now: float) -> ApiStuckSection:
        if self._ledger.epoch != self._epoch:
            return ApiStuckSection()  # the old server's stuck processes are no evidence
        return ApiStuckSection(self.watch.since, self.watch.detail)

    def status(self, section: ApiStuckSection, now: float) -> Mapping[str, Any] | None:
        return None


ProcessReading = EngineCpuReading | CompileReading | ApiWatchReading


def process_readings(observers: Observers) -> tuple[ProcessReading, ...]:
    """The three readings, each told every process sample ``observers`` take (before the ledger)."""
    readings = (EngineCpuReading(), CompileReading(), ApiWatchReading(observers.ledger))
    observers.process_listeners.extend(r.observe for r in readings)
    return readings
