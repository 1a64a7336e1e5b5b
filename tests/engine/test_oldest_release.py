"""Smoke of the oldest release of the compatibility matrix (0.10.2), on its own server.

sentinel's mapping (metric samples, process titles, structured-output fields,
the chaos plugin's hooks) is proven in depth on the default release and, per
release, by ``make compat`` (docs/compat.md); this keeps the oldest line in
``make test``, so that a change which only fits the newest vLLM fails here:
sentinel turns green with every canary kind the text model serves and catches
the plugin's engine hang. 0.10.2 runs ``--dtype float32`` (its release entry
says why) and honours ``response_format``, the field sentinel's structured
canary sends. Its environment builds in the background (``make engine-env-bg``)
while the fast tiers run; this module waits for it on its lock, and runs before
the session's shared server starts (one server at a time).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from chaos.vllm_engine import env as engine_env
from chaos.vllm_engine.compat import metric_names, structured_fields
from chaos.vllm_engine.server import ENGINE_TITLE, VllmServer
from sentinel.evidence.vllm_releases import BY_LINE, recognise
from tests.loopback.sidecar import eventually, running_sidecar

pytestmark = [pytest.mark.engine, pytest.mark.timeout(600)]

OLDEST = "0.10.2"
#: Shortened like the engine tier's (tests/engine/test_sentinel_vllm.py); the
#: multimodal canary is off: the tiny text model takes no images.
TIMINGS = {
    "hang_window": 6.0,
    "no_evidence_window": 10.0,
    "dead_grace": 2.0,
    "canaries": {
        "text": {"interval": 2.0, "deadline": 4.0, "jitter": 0.0},
        "structured": {"interval": 3.0, "deadline": 5.0},
        "multimodal": {"enabled": False},
        "correctness": {"interval": 3.0, "deadline": 5.0},
    },
}
GREEN = 90.0
DETECT = 30.0


@pytest.fixture(scope="module")
def oldest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    env = engine_env.ensure_env(OLDEST)
    model = engine_env.model_for(engine_env.ensure_model(engine_env.ensure_env(), "text"), OLDEST)
    work: Path = tmp_path_factory.mktemp(f"vllm-{OLDEST}")
    server = VllmServer(
        env.python,
        model,
        served_model_name="tiny-text",
        fault_dir=work / "faults",
        log_path=work / "vllm.log",
        extra_args=engine_env.release(OLDEST).server_args,
    )
    with server:
        seconds = server.wait_ready(300)
        print(f"\nvLLM {OLDEST}: first answer after {seconds:.1f} s")
        yield server


def test_oldest_release_keeps_what_sentinel_reads(oldest: VllmServer) -> None:
    facts = BY_LINE["0.10"]
    assert engine_env.release(OLDEST).server_args == facts.server_flags
    assert len(oldest.processes(ENGINE_TITLE)) == 1
    with httpx.Client(base_url=oldest.base_url, timeout=60) as client:
        names, engines = metric_names(client.get("/metrics").text)
        found = recognise(names, engines)
        assert found.lines == ("0.10",)
        assert found.missing == ()
        assert found.engines == ("0",)
        fields = structured_fields(client, oldest.served_model_name)
    honoured = {field for field, outcome in fields.items() if outcome == "honoured"}
    assert honoured == set(facts.structured_fields), fields
    assert all(fields[field].startswith("ignored") for field in facts.ignored_fields), fields


async def test_sentinel_green_then_catches_the_engine_hang(oldest: VllmServer) -> None:
    async with running_sidecar(oldest.base_url, **TIMINGS) as sidecar:
        green = await eventually(sidecar.green, GREEN, "startup, readiness and liveness 200")
        status = await sidecar.json("/status")
        assert status["canaries"]["text"]["passing"] is True, status["canaries"]["text"]
        assert status["canaries"]["structured"]["passing"] is True, status["canaries"]
        assert status["priority"]["effective"] is True, status["priority"]
        oldest.faults.set("engine_hang")
        try:

            async def red() -> bool:
                return await sidecar.code("/livez") == 503

            seconds = await eventually(red, DETECT, "/livez 503 after the engine hang", 0.25)
            reason = str((await sidecar.json("/livez"))["reason"])
        finally:
            oldest.faults.clear("engine_hang")
        assert "engine hang" in reason, reason
        recovered = await eventually(sidecar.green, GREEN, "green again after the hang cleared")
        print(
            f"\nvLLM {OLDEST}: green {green:.1f} s, engine hang detected {seconds:.1f} s "
            f"({reason}), green again {recovered:.1f} s"
        )
