"""An engine hang's bundle, end to end: the answers' flips in it and drawn in its timeline.

The simulated vLLM hangs its engine (the control API's ``engine_hang``);
sentinel confirms it, turns liveness red to ask for a restart, and captures
a bundle in its child process. That bundle holds liveness's flip to red with
the hang's kind and the ask, on the clock the canaries are placed by, and
its ``timeline.png`` opens, says it drew them, and has every panel drawn.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sentinel.diagnostics.timeline import restarts
from sentinel_sim.launch import SimProcess
from tests.loopback.sidecar import eventually, running_sidecar
from tests.timeline_png import check_timeline

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def sim() -> Iterator[SimProcess]:
    with SimProcess() as process:
        yield process


def _hang_bundle(diagnostics: Path) -> tuple[Path, dict[str, Any]] | None:
    """The confirmed engine hang's incident and bundle, once it is on disk."""
    for found in diagnostics.glob("*-engine-hang/bundle.json"):
        return found.parent, json.loads(found.read_text())
    return None


async def test_an_engine_hang_s_bundle_holds_and_draws_liveness_turning_red(
    sim: SimProcess, tmp_path: Path
) -> None:
    diagnostics = tmp_path / "diagnostics"
    async with running_sidecar(
        sim.base_url, diagnostics=True, diagnostics_dir=str(diagnostics)
    ) as sidecar:
        await eventually(sidecar.green, 30.0, "startup, readiness and liveness all 200")
        sim.control.set_fault("engine_hang")
        try:

            async def red() -> bool:
                return await sidecar.code("/livez") == 503

            async def captured() -> bool:
                return _hang_bundle(diagnostics) is not None

            await eventually(red, 30.0, "/livez 503")
            await eventually(captured, 60.0, "the engine hang's bundle", 0.5)
        finally:
            sim.control.clear_all()
    found = _hang_bundle(diagnostics)
    assert found is not None
    incident, bundle = found
    flips = bundle["probe_answers"]
    probes = {entry["probe"] for entry in flips}
    assert probes == {"liveness", "readiness", "startup"}, flips
    # Green first (the evaluator's first answers, startup passing), then the hang.
    assert any(e["probe"] == "startup" and e["ok"] for e in flips), flips
    [ask] = [e for e in flips if e["probe"] == "liveness" and not e["ok"]]
    assert ask["restart"] is True
    assert "engine" in ask["hangs"], ask
    assert "engine hang" in ask["reason"]
    # On the bundle's clock: the ask came before the capture that followed it.
    [(at, kinds)] = restarts(bundle)
    assert at <= 0.0
    assert "engine" in kinds
    said = check_timeline(incident)
    assert "probe answers" in said, said
    assert "restart asked" in said, said
