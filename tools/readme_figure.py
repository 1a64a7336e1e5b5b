"""``make readme-figure``: the README's incident figure, drawn from a real run on the simulator.

The demo's machinery (:func:`sentinel.commands.demo.run_demo`) with a fixed
scenario and the shipped default timings: its light load for 40 s, then
the simulator's ``engine_hang`` fault (the engine loop blocks, vLLM's
``/health`` stays 200, ``/metrics`` freezes), liveness red, the confirmed
hang's bundle stored, the fault cleared. The bundle's ``timeline.png`` is
copied to the path given (``docs/images/incident-timeline.png`` by default):
the README's figure is what this command drew, never a hand-edited picture.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

from sentinel.commands.demo import Scenario, run_demo
from sentinel.diagnostics.timeline import TIMELINE_FILE
from sentinel_sim.launch import SimProcess

FIGURE = Path("docs/images/incident-timeline.png")
HEALTHY_S = 40.0  # the load's steady work before the hang: most of the picture


def _hang(sim: SimProcess) -> None:
    sim.control.set_fault("engine_hang")


def _clear(sim: SimProcess) -> None:
    sim.control.clear_all()


SCENARIO = Scenario("engine_hang fault (engine loop blocked)", _hang, _clear, HEALTHY_S)


def main(argv: list[str]) -> int:
    target = Path(argv[0]) if argv else FIGURE
    with tempfile.TemporaryDirectory(prefix="sentinel-figure-") as work:
        run = asyncio.run(run_demo(False, Path(work) / "diagnostics", SCENARIO))
        bundle = run.bundle
        if run.code != 0 or bundle is None or not (bundle / TIMELINE_FILE).is_file():
            print(f"readme-figure: no picture drawn (demo exit {run.code})", file=sys.stderr)
            return 1
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(bundle / TIMELINE_FILE, target)
        print(f"readme-figure: {target} from {bundle.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
