"""A canary kind set aside for a server is a Kubernetes Event on the pod, posted once.

The daemon runs against the simulator, its Events posted to
tests/k8s_fake_api.py (every body validated against the Kubernetes 1.30
schema). A reasoning model whose template ignores ``enable_thinking`` makes
the structured and multimodal kinds inconclusive: each is set aside, and
announced, once for the server epoch however many evaluations follow. A
server that answers every kind gets no Event at all.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from sentinel.canary.spec import TEXT
from sentinel.telemetry.events import EventReason, EventReporter, PodIdentity
from sentinel_sim.launch import SimProcess
from tests.k8s_fake_api import FakeApiServer, fake_api_server
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar

pytestmark = pytest.mark.timeout(120)

NAMESPACE = "inference"
POD = PodIdentity(name="vllm-0", namespace=NAMESPACE, uid="0f7c2d1e-aaaa-bbbb-cccc-123456789abc")
SET_ASIDE = str(EventReason.CANARY_KIND_SET_ASIDE)


@asynccontextmanager
async def _events_to_fake_api(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeApiServer]:
    """The daemon's Event reporter posting to the fake API server as this pod."""
    async with fake_api_server(NAMESPACE) as api:

        def reporter(cls: type[EventReporter], *args: Any, **kwargs: Any) -> EventReporter:
            return EventReporter.for_host(POD, api.base_url)

        monkeypatch.setattr(EventReporter, "from_environment", classmethod(reporter))
        yield api


def _text_results(sidecar: Sidecar) -> int:
    return len(sidecar.daemon.ledger.records[TEXT].results)


async def _more_evaluations(sidecar: Sidecar, canaries: int, within: float) -> None:
    """Wait (polled) until ``canaries`` more text canaries were recorded: many evaluations."""
    start = _text_results(sidecar)

    async def enough() -> bool:
        return _text_results(sidecar) >= start + canaries

    await eventually(enough, within, f"{canaries} more text canaries")


async def test_each_kind_set_aside_is_posted_once(monkeypatch: pytest.MonkeyPatch) -> None:
    async with _events_to_fake_api(monkeypatch) as api:
        with SimProcess(
            decode_tps=400,
            reasoning_parser="qwen3",
            reasoning_tokens=256,
            extra_args=["--thinking-ignores-template"],
        ) as thinker:
            async with running_sidecar(thinker.base_url, watch_processes=False) as sidecar:

                async def both_posted() -> bool:
                    return api.reasons().count(SET_ASIDE) >= 2

                await eventually(both_posted, 60, "an Event for each kind set aside")
                await eventually(
                    lambda: _ok(sidecar, "/startupz"), 20, "startup passes on the text kind"
                )
                await _more_evaluations(sidecar, canaries=4, within=30)
                status = await sidecar.json("/status")
                assert await sidecar.code("/livez") == 200
    assert api.invalid == []
    posted = [e for e in api.events if e["reason"] == SET_ASIDE]
    assert len(posted) == 2, [e["message"] for e in posted]  # not re-posted each evaluation
    assert api.reasons() == [SET_ASIDE, SET_ASIDE]
    by_kind = {e["message"].split()[2]: e for e in posted}
    assert set(by_kind) == {"structured", "multimodal"}, [e["message"] for e in posted]
    for kind, event in by_kind.items():
        assert event["type"] == "Warning"
        assert event["involvedObject"]["name"] == POD.name
        assert event["involvedObject"]["uid"] == POD.uid
        assert event["message"].startswith(f"canary kind {kind} set aside for this server (epoch ")
        assert "canaries in a row inconclusive" in event["message"]
        assert status["canaries"][kind]["enabled"] is False
    print(f"\nset-aside Event: {by_kind['structured']['message']}")


async def test_a_server_answering_every_kind_posts_no_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with _events_to_fake_api(monkeypatch) as api:
        with SimProcess(decode_tps=400) as sim:
            async with running_sidecar(sim.base_url, watch_processes=False) as sidecar:
                await eventually(sidecar.green, 30, "green on every kind")
                await _more_evaluations(sidecar, canaries=4, within=30)
                status = await sidecar.json("/status")
    assert all(c["enabled"] for c in status["canaries"].values()), status["canaries"]
    assert api.events == []
    assert api.invalid == []


async def _ok(sidecar: Sidecar, path: str) -> bool:
    return await sidecar.code(path) == 200
