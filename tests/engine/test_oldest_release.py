"""Smoke of the oldest vLLM release that installs here, on its own server.

sentinel's mapping (metric samples, process titles, structured-output fields,
the chaos plugin's hooks) is proven in depth on the default release; this
checks that the oldest line in the compatibility matrix still offers what the
mapping relies on, so that a change which only fits the newest vLLM fails here.
docs/compat-notes.md says why this is the oldest line that runs on this machine.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from chaos.vllm_engine import env as engine_env
from chaos.vllm_engine.compat import engine_hang_check, metric_names, structured_fields
from chaos.vllm_engine.server import ENGINE_TITLE, WORKER_TITLE, VllmServer
from sentinel.evidence.vllm_releases import recognise

pytestmark = pytest.mark.engine

OLDEST = "0.27.1"


@pytest.fixture(scope="module")
def oldest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    env = engine_env.ensure_env(OLDEST)
    model = engine_env.ensure_model(engine_env.ensure_env(), "text")
    work: Path = tmp_path_factory.mktemp(f"vllm-{OLDEST}")
    server = VllmServer(
        env.python,
        model,
        served_model_name="tiny-text",
        fault_dir=work / "faults",
        log_path=work / "vllm.log",
    )
    with server:
        server.wait_ready(300)
        yield server


def test_oldest_release_keeps_what_sentinel_reads(oldest: VllmServer) -> None:
    assert len(oldest.processes(ENGINE_TITLE)) == 1
    assert len(oldest.processes(WORKER_TITLE)) == 1
    with httpx.Client(base_url=oldest.base_url, timeout=60) as client:
        names, engines = metric_names(client.get("/metrics").text)
        found = recognise(names, engines)
        assert "0.27" in found.lines
        assert found.missing == ()
        assert found.engines == ("0",)
        fields = structured_fields(client, oldest.served_model_name)
        assert fields["response_format"] == "honoured"
        assert fields["structured_outputs"] == "honoured"
        assert fields["guided_json"].startswith("ignored")
        hang = engine_hang_check(oldest, client, oldest.served_model_name)
        assert hang["request_held"] is True
        assert hang["health_while_hung"] == 200
        assert hang["after_clear_status"] == 200
