"""Startup that ends: a reasoning model whose template ignores ``enable_thinking``.

No command line is read (process watching off, so ``--reasoning-parser`` is
invisible): the simulated model thinks through every chat request, so the
structured and multimodal canaries only ever reason until ``max_tokens``.
Each is set aside after a bounded run with its reason in ``/status`` and
``/startupz``; readiness counts what the server can do (startup passed on the
text canary, which counts thinking as generation), and nothing restarts it.
Without the set-aside it would never be ready.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sentinel.record.set_aside import SET_ASIDE_AFTER
from sentinel_sim.launch import SimProcess
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def thinker() -> Iterator[SimProcess]:
    with SimProcess(
        decode_tps=400,
        reasoning_parser="qwen3",
        reasoning_tokens=256,
        extra_args=["--thinking-ignores-template"],
    ) as process:
        yield process


async def test_kinds_that_only_think_are_set_aside_and_startup_passes(thinker: SimProcess) -> None:
    async with running_sidecar(thinker.base_url, watch_processes=False) as sidecar:
        await eventually(lambda: _startup(sidecar), 60, "/startupz 200 on the kinds it can do")
        startup = await sidecar.json("/startupz")
        assert "set aside: " in startup["reason"]
        status = await sidecar.json("/status")
        aside = {
            kind: c["disabled_reason"] for kind, c in status["canaries"].items() if not c["enabled"]
        }
        assert {"structured", "multimodal"} <= set(aside), status["canaries"]
        for why in aside.values():
            assert f"{SET_ASIDE_AFTER} canaries in a row inconclusive" in why, why
        assert status["canaries"]["text"]["enabled"] is True
        assert status["canaries"]["text"]["passing"] is True
        assert await sidecar.code("/livez") == 200
        assert status["verdict"]["hangs"] == []


async def _startup(sidecar: Sidecar) -> bool:
    """Every kind resolved: passed or set aside (startup itself passes on the text canary)."""
    startup = await sidecar.json("/startupz")
    return await sidecar.code("/startupz") == 200 and "every canary kind" in startup["reason"]
