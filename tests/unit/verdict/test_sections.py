"""Evidence sections read one typed way: keys, gathering, and the process readings.

A section is declared once as a :class:`SectionKey` and read only through it
(docs/design.md, "Evidence flows one way"); the engine's CPU, compilers under
the engine and stuck API-server processes are providers of their own sections.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sentinel.canary.spec import CanaryKind
from sentinel.evidence.compilers import CompilerProcess
from sentinel.evidence.process_model import ProcessInfo, ProcessRole, ProcessSnapshot, ProcessState
from sentinel.record.ledger import Ledger
from sentinel.record.process_readings import ApiWatchReading, CompileReading, EngineCpuReading
from sentinel.record.provider import fragments, gather
from sentinel.verdict import Action, Evidence
from sentinel.verdict.hangs.api_server import API_WATCH, ApiStuckSection
from sentinel.verdict.hangs.engine import ENGINE_CPU, EngineCpuSection
from sentinel.verdict.sections import SectionKey
from sentinel.verdict.stall import COMPILE, CompileSection

ROOT = Path(__file__).resolve().parents[3] / "sentinel"


@dataclass(frozen=True, slots=True)
class Wedge:
    since: float | None = None


WEDGE = SectionKey("wedge", Wedge)


class WedgeSource:
    key = WEDGE

    def __init__(self, section: object) -> None:
        self.given = section

    def section(self, now: float) -> Any:
        return self.given

    def status(self, section: Wedge, now: float) -> Mapping[str, Any] | None:
        return {"since": section.since}


def test_a_section_reads_as_its_keys_type_or_not_at_all() -> None:
    assert Evidence(sections={"wedge": Wedge(3.0)}).section(WEDGE) == Wedge(3.0)
    assert Evidence().section(WEDGE) is None  # absent: cannot tell
    assert Evidence(sections={"wedge": "3.0"}).section(WEDGE) is None  # another type: cannot tell
    assert Evidence(sections={"wedge": Wedge(3.0)}).section(SectionKey("other", Wedge)) is None


def test_gathering_keys_each_section_by_name_and_refuses_a_mismatch() -> None:
    assert gather([WedgeSource(Wedge(1.0))], 5.0) == {"wedge": Wedge(1.0)}
    assert gather([WedgeSource(None)], 5.0) == {}  # none now: absent, not None
    with pytest.raises(TypeError, match="'wedge'"):
        gather([WedgeSource("wedged")], 5.0)
    with pytest.raises(ValueError, match="two evidence providers named 'wedge'"):
        gather([WedgeSource(Wedge()), WedgeSource(Wedge())], 5.0)


def test_fragments_render_only_sections_of_their_keys_type() -> None:
    source = WedgeSource(Wedge(1.0))
    assert fragments([source], {"wedge": Wedge(1.0)}, 5.0) == {"wedge": {"since": 1.0}}
    assert fragments([source], {"wedge": "1.0"}, 5.0) == {}


def test_no_module_reads_a_section_by_string_or_checks_its_type() -> None:
    """Only :meth:`SectionKey.read` looks into the sections: every reader goes through it."""
    by_string = re.compile(r"\.sections\.get\(|\.sections\[")
    by_type = re.compile(r"isinstance\((section|node|words)\b")
    strings, types = set(), set()
    for path in ROOT.rglob("*.py"):
        text, name = path.read_text(), path.relative_to(ROOT).as_posix()
        if by_string.search(text):
            strings.add(name)
        if name.split("/")[0] in ("verdict", "record", "evaluation") and by_type.search(text):
            types.add(name)
    assert (strings, types) == (set(), set())


# -- the process readings ---------------------------------------------------------------

API = ProcessInfo(41, ProcessRole.API_SERVER, "vllm", ProcessState.SLEEPING, 100.0)


def _api_process(state: ProcessState) -> ProcessInfo:
    return ProcessInfo(42, ProcessRole.API_PROCESS, "VLLM::APIServer", state, 101.0)


def _snapshot(at: float, state: ProcessState = ProcessState.SLEEPING) -> ProcessSnapshot:
    return ProcessSnapshot(at=at, api=API, api_processes=(_api_process(state),))


def test_the_api_watch_section_follows_the_servers_epochs() -> None:
    ledger = Ledger([(CanaryKind.TEXT, Action.RESTART, None)], 0.0)
    reading = ApiWatchReading(ledger)
    reading.observe(_snapshot(1.0, ProcessState.STOPPED), 1.0)
    stuck = reading.section(1.0)
    assert stuck.since == 1.0
    assert "(pid 42) stopped" in stuck.detail
    ledger.new_epoch("a vLLM counter went down", 2.0)
    assert reading.section(2.0) == ApiStuckSection()  # the old server's processes: no evidence
    reading.observe(_snapshot(3.0, ProcessState.STOPPED), 3.0)
    assert reading.section(3.0).since == 3.0  # timed afresh in the new epoch


def test_the_engine_cpu_and_compile_sections_freeze_their_watches() -> None:
    cpu, compiling = EngineCpuReading(), CompileReading()
    assert cpu.section(0.0) == EngineCpuSection(unknown="no process sample yet")
    assert compiling.section(0.0) == CompileSection()
    ptxas = CompilerProcess(7, "ptxas", 1.0, 3)
    compiling.observe(ProcessSnapshot(at=1.0, compilers=(ptxas,)), 1.0)
    section = compiling.section(1.0)
    assert (section.since, section.seen_at) == (1.0, 1.0)
    assert "ptxas" in section.detail
    sections = gather([cpu, compiling], 1.0)
    assert set(sections) == {ENGINE_CPU.name, COMPILE.name}
    assert Evidence(sections=sections).section(COMPILE) == section
    assert fragments([cpu, compiling], sections, 1.0) == {}  # /status quotes them elsewhere
    assert API_WATCH.name not in sections
