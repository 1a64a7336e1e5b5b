"""Wide data parallelism (issue 30), against the simulator over real sockets.

DP 64 behind one API server: every engine adds its labelled series
(``engine="0"`` .. ``"63"``, about 1,900 of the series sentinel reads), past
the old fixed cap of 1,000. The scrape is accepted, and one stuck engine among
64 is aimed at and turns liveness red as with small DP. An exposition truly
over the cap is refused, loudly: the reason in ``/status`` and
``sentinel_scrape_failures_total``. Each test prints what it measured
(run with ``-s``).
"""

from __future__ import annotations

import time
from typing import Any

import psutil
import pytest

from sentinel.canary.spec import CanaryKind
from sentinel_sim.launch import SimProcess
from tests.loopback.sidecar import eventually, running_sidecar

pytestmark = pytest.mark.timeout(240)

TEXT = CanaryKind.TEXT
ENGINES = 64
STUCK = 37
GREEN_WITHIN = 90.0
RED_WITHIN = 90.0  # a canary reaches each of 64 engines every 64 text intervals at worst
# The text canary alone, fast enough to go round 64 engines in about 16 s.
CANARIES: dict[str, Any] = {
    "canaries": {
        "text": {"interval": 0.25, "deadline": 2.0, "jitter": 0.0},
        "structured": {"enabled": False},
        "multimodal": {"enabled": False},
        "correctness": {"enabled": False},
    },
    # 18,000 lines (1.6 MB) an exposition at DP 64: scraped less often, with more time.
    "scrape_interval": 1.0,
    "scrape_timeout": 5.0,
}


def _rss_mib() -> float:
    return psutil.Process().memory_info().rss / 2**20


async def test_dp_64_is_scraped_and_a_stuck_engine_among_them_turns_red() -> None:
    async with (
        SimProcess(data_parallel_size=ENGINES, startup_timeout=120.0) as sim,
        running_sidecar(sim.base_url, **CANARIES) as sidecar,
    ):
        await eventually(sidecar.green, GREEN_WITHIN, "green first", 0.5)

        async def all_engines_seen() -> bool:
            return len(sidecar.daemon.ledger.progress.engines) == ENGINES

        await eventually(all_engines_seen, 30.0, f"{ENGINES} engines in the evidence", 0.5)
        status = await sidecar.json("/status")
        assert status["evidence"]["last_scrape_error"] is None
        rss = _rss_mib()
        sim.control.set_fault("stuck_running", engine=STUCK, requests=2)
        started = time.monotonic()

        seen: dict[str, Any] = {}

        async def red() -> bool:
            status = await sidecar.json("/status")
            seen["evidence"] = {
                k: v for k, v in status["evidence"].items() if "age" in k or "error" in k
            }
            results = sidecar.daemon.ledger.records[TEXT].results
            seen["stuck"] = [(r.reason.value, r.started) for r in results if r.engine == STUCK]
            seen["hangs"] = status["verdict"]["hangs"]
            return await sidecar.code("/livez") == 503

        try:
            await eventually(red, RED_WITHIN, f"liveness red after engine {STUCK} hung", 0.5)
        except AssertionError:
            print(f"\nnot red; last seen: {seen}")
            raise
        took = time.monotonic() - started
        status = await sidecar.json("/status")
        hangs = status["verdict"]["hangs"]
        print(
            f"\nDP={ENGINES}: scrape accepted, test process RSS {rss:.0f} MiB; "
            f"engine {STUCK} stuck: red after {took:.1f}s, {[h['kind'] for h in hangs]}"
        )
        hang = next(h for h in hangs if h["kind"] == "partial")
        assert hang["engines"] == [STUCK], hang
        sim.control.clear_fault("stuck_running")


async def test_an_exposition_over_the_cap_is_refused_and_says_so() -> None:
    limits = {"metrics_max_series": 10, "metrics_series_per_engine": 5}
    async with (
        SimProcess(data_parallel_size=2) as sim,
        running_sidecar(sim.base_url, **CANARIES, **limits) as sidecar,
    ):

        async def refused() -> bool:
            status = await sidecar.json("/status")
            return bool(status["evidence"]["last_scrape_error"])

        await eventually(refused, 20.0, "a refused exposition in /status", 0.25)
        reason = (await sidecar.json("/status"))["evidence"]["last_scrape_error"]
        print(f"\nrefused: {reason}")
        assert reason.startswith("too_large: more than 20 series")
        assert "2 engines seen" in reason
        text = (await sidecar.client.get(sidecar.url + "/metrics")).text
        line = next(
            x
            for x in text.splitlines()
            if x.startswith('sentinel_scrape_failures_total{reason="too_large"}')
        )
        assert float(line.rsplit(" ", 1)[1]) >= 1, line
