"""Every family a live sentinel's ``/metrics`` exposes is in docs/metrics.md, and back.

The unit test (tests/unit/repo/test_references.py) compares docs/metrics.md with its
generator, which catches drift but never a gap: a family the generator does not
see (one a collector yields only in some states) would be missing from both.
This one scrapes a real daemon against the simulator, driven through real
traffic (``sentinel_progress_age_seconds``), a known scheduling policy
(``sentinel_priority_effective``), sampled processes
(``sentinel_process_evidence``) and a confirmed engine hang, and compares what
it saw with the documented names, both ways.
"""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sentinel.reference import DOCS
from sentinel_sim.launch import SimProcess
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar

pytestmark = pytest.mark.timeout(90)

ROW = re.compile(r"^\| `([a-z_:]+)` \|", re.MULTILINE)


def documented() -> set[str]:
    return set(ROW.findall((DOCS / "metrics.md").read_text(encoding="utf-8")))


def families(exposition: str) -> set[str]:
    """Family names as docs/metrics.md writes them (a counter with its ``_total``).

    The text format writes a counter's or histogram's ``_created`` series
    as a family of its own; it belongs to the family it is named after.
    """
    parsed = {f.name: f.type for f in text_string_to_metric_families(exposition)}
    return {
        name + ("_total" if kind == "counter" else "")
        for name, kind in parsed.items()
        if parsed.get(name.removesuffix("_created")) not in ("counter", "histogram")
        or not name.endswith("_created")
    }


def test_families_are_read_from_an_exposition() -> None:
    text = (
        "# TYPE a_total counter\na_total 1\n# TYPE a_created gauge\na_created 5\n"
        "# TYPE b gauge\nb 0\n# TYPE c_created gauge\nc_created 1\n"
    )
    assert families(text) == {"a_total", "b", "c_created"}
    assert "sentinel_priority_effective" in documented()


async def test_every_exposed_family_is_documented() -> None:
    wanted = documented()
    seen: set[str] = set()

    async def scrape(sidecar: Sidecar) -> set[str]:
        seen.update(families((await sidecar.client.get(sidecar.url + "/metrics")).text))
        return seen

    async with (
        SimProcess(scheduling_policy="priority") as sim,
        running_sidecar(sim.base_url, scheduling_policy="priority") as sidecar,
        httpx.AsyncClient(timeout=5.0) as client,
    ):

        async def all_shown() -> bool:
            # Real traffic: progress that is not sentinel's own canaries.
            await client.post(
                f"{sim.base_url}/v1/chat/completions",
                json={
                    "model": sim.model,
                    "messages": [{"role": "user", "content": "hello"}],
                    "max_tokens": 4,
                },
            )
            return wanted <= await scrape(sidecar)

        await eventually(sidecar.green, 20, "green first")
        try:
            await eventually(all_shown, 15, "every documented family exposed")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; never exposed: {sorted(wanted - seen)}") from None
        await asyncio.to_thread(sim.control.set_fault, "engine_hang")

        async def red() -> bool:
            await scrape(sidecar)
            return await sidecar.code("/livez") == 503

        await eventually(red, 15, "engine hang confirmed")
        await scrape(sidecar)
    undocumented = sorted(seen - wanted)
    assert not undocumented, f"exposed but not in docs/metrics.md: {undocumented}"
