"""A toy hang rule and a toy evidence provider, from the test package, through the whole daemon.

The rule is one module and one registration (tests/toyrule.py); the provider
is handed to the daemon like its own. Against the simulated vLLM over real
sockets: the provider's section reaches the verdict and its fragment
``/status``, the rule turns ``/livez`` red with its own reason and counts its
kind in the metrics; without the registration the same wedge changes nothing
but the fragment.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from sentinel_sim.launch import SimProcess
from tests import toyrule
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess(scheduling_policy="priority") as process:
        yield process


async def _wedged_in_status(sidecar: Sidecar) -> bool:
    section = (await sidecar.json("/status"))["sections"].get("toy")
    return section is not None and section["wedged"] is True


async def test_a_registered_toy_rule_reads_its_provider_and_fails_liveness(
    sim: SimProcess,
) -> None:
    source = toyrule.ToySource(time.monotonic)
    with toyrule.registered():
        async with running_sidecar(sim.base_url, providers=[source]) as sidecar:
            await eventually(sidecar.green, 30, "green on a working simulator")
            assert (await sidecar.json("/status"))["sections"]["toy"]["wedged"] is False

            source.wedge()
            await eventually(
                lambda: _code_is(sidecar, "/livez", 503), 20, "/livez red on the toy wedge"
            )
            assert "toy wedge" in (await sidecar.json("/livez"))["reason"]
            status = await sidecar.json("/status")
            assert [h["kind"] for h in status["verdict"]["hangs"]] == ["toy_wedge"]
            assert status["sections"]["toy"]["wedged"] is True
            metrics = (await sidecar.client.get(sidecar.url + "/metrics")).text
            assert 'sentinel_hang_detections_total{kind="toy_wedge"} 1.0' in metrics

            source.clear()
            await eventually(sidecar.green, 20, "green again once the toy source clears")


async def test_without_the_registration_the_wedge_shows_in_status_and_fails_nothing(
    sim: SimProcess,
) -> None:
    source = toyrule.ToySource(time.monotonic)
    async with running_sidecar(sim.base_url, providers=[source]) as sidecar:
        await eventually(sidecar.green, 30, "green on a working simulator")
        source.wedge()
        await eventually(lambda: _wedged_in_status(sidecar), 10, "the fragment shows the wedge")
        read = source.sections_read
        await eventually(
            lambda: _async(source.sections_read >= read + 8), 10, "a few more evaluations"
        )
        assert await sidecar.code("/livez") == 200
        assert (await sidecar.json("/status"))["verdict"]["hangs"] == []


async def _code_is(sidecar: Sidecar, path: str, code: int) -> bool:
    return await sidecar.code(path) == code


async def _async(value: bool) -> bool:
    return value
