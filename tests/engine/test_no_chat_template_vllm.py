"""A real base model without a chat template: startup ends, on its own server.

The tiny text model copied without its chat template
(:func:`chaos.vllm_engine.models.without_chat_template`, run in the engine
environment like every model builder there): vLLM answers every
chat request with its 400 ("As of transformers v4.44, default chat template
is no longer allowed, ..."), asserted here first, and an image request with
"<model> is not a multimodal model". sentinel's text canary falls back to
``/v1/completions``, the structured canary is set aside after its bounded
run of refusals and the multimodal one disabled, each named in ``/startupz``
and ``/status``; startup passes and ``/livez`` stays 200. One server start
(about 40 s on two cores at ``-O0``) plus sentinel's startup; it runs before
the session's shared server starts (one server at a time). Run with ``-s``
for the time to startup.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from chaos.vllm_engine import env as engine_env
from chaos.vllm_engine.server import VllmServer
from sentinel.canary.spec import CHAT_ENDPOINT, COMPLETIONS_ENDPOINT
from sentinel.record.set_aside import SET_ASIDE_AFTER
from tests.loopback.sidecar import eventually, running_sidecar

pytestmark = [pytest.mark.engine, pytest.mark.timeout(400)]

MODEL = "tiny-base"
START_DEADLINE = 300.0
STARTUP = 90.0
NO_TEMPLATE = "As of transformers v4.44, default chat template is no longer allowed"
#: Shortened like the engine tier's (tests/engine/test_sentinel_vllm.py).
TIMINGS: dict[str, Any] = {
    "hang_window": 6.0,
    "no_evidence_window": 10.0,
    "dead_grace": 2.0,
    "canaries": {
        "text": {"interval": 2.0, "deadline": 4.0, "jitter": 0.0},
        "structured": {"interval": 2.0, "deadline": 5.0},
        "multimodal": {"interval": 2.0, "deadline": 5.0},
        "correctness": {"interval": 3.0, "deadline": 5.0},
    },
}


def _base_model(env: engine_env.EngineEnv) -> Path:
    """The tiny text model without its chat template (made once, beside it in the cache)."""
    text = engine_env.ensure_model(env, "text")
    script = Path(engine_env.__file__).with_name("models.py")
    done = subprocess.run(
        [str(env.python), "-P", str(script), "base", str(text)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return Path(done.stdout.strip().splitlines()[-1])


def _listening(server: VllmServer, deadline_s: float) -> float:
    """Seconds until ``/v1/models`` answers (the server's own ready check sends chat)."""
    started = time.monotonic()
    with httpx.Client(base_url=server.base_url, timeout=5.0) as client:
        while True:
            assert server.alive(), f"vLLM exited{server.log_tail()}"
            try:
                if client.get("/v1/models").status_code == 200:
                    return time.monotonic() - started
            except httpx.TransportError:
                pass
            assert time.monotonic() - started < deadline_s, f"no /v1/models{server.log_tail()}"
            time.sleep(0.25)  # polling the server's port with a deadline


def _warm_up(server: VllmServer) -> None:
    """A first forward pass of a longer prompt, as a chat template makes every prompt.

    On an AMX host (vLLM 0.32's CPU build) the worker died of SIGILL on its very first
    forward pass when that was a 4-token prompt ("Say ok." as a plain completion); after
    any longer first pass, 4-token prompts are served. Chat's template always made the
    first prompt longer, so only a model without one meets it.
    """
    prompt = "A first request to warm the engine up, longer than a few tokens, please."
    with httpx.Client(base_url=server.base_url, timeout=60) as client:
        reply = client.post(COMPLETIONS_ENDPOINT, json={"prompt": prompt, "max_tokens": 2})
    assert reply.status_code == 200, f"{reply.text}{server.log_tail()}"


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    env = engine_env.ensure_env()
    model = _base_model(env)
    work: Path = tmp_path_factory.mktemp("vllm-base")
    server = VllmServer(
        env.python,
        model,
        served_model_name=MODEL,
        fault_dir=work / "faults",
        log_path=work / "vllm.log",
    )
    with server:
        seconds = _listening(server, START_DEADLINE)
        _warm_up(server)
        print(f"\nvLLM base model (no chat template): listening after {seconds:.1f} s")
        yield server


def test_real_vllm_refuses_chat_without_a_template(base_model: VllmServer) -> None:
    say_ok = [{"role": "user", "content": "Say ok."}]
    with httpx.Client(base_url=base_model.base_url, timeout=60) as client:
        chat = client.post(CHAT_ENDPOINT, json={"messages": say_ok, "max_tokens": 2})
        plain = client.post(COMPLETIONS_ENDPOINT, json={"prompt": "Say ok.", "max_tokens": 2})
    assert chat.status_code == 400, chat.text
    error = chat.json()["error"]
    assert error["message"].startswith(NO_TEMPLATE), error
    assert (error["type"], error["param"], error["code"]) == ("BadRequestError", None, 400)
    assert plain.status_code == 200, plain.text


async def test_sentinel_passes_startup_on_a_real_base_model(base_model: VllmServer) -> None:
    async with running_sidecar(base_model.base_url, **TIMINGS) as sidecar:

        async def startup() -> bool:
            return await sidecar.code("/startupz") == 200

        seconds = await eventually(startup, STARTUP, "/startupz 200 on the base model")

        # Startup passes on the served text canary; readiness waits until the kinds
        # the base model refuses are set aside, which /startupz then names too.
        async def ready() -> bool:
            return await sidecar.code("/readyz") == 200

        await eventually(ready, STARTUP, "/readyz 200 on the base model")
        reason = str((await sidecar.json("/startupz"))["reason"])
        status = await sidecar.json("/status")
        canaries = status["canaries"]
        assert f"fell back: text (on {COMPLETIONS_ENDPOINT}" in reason, reason
        assert canaries["text"]["enabled"] is True, canaries["text"]
        assert canaries["text"]["passing"] is True, canaries["text"]
        structured = canaries["structured"]
        assert not structured["enabled"], structured
        why = structured["disabled_reason"]
        assert f"{SET_ASIDE_AFTER} canaries in a row refused with HTTP 400" in why, why
        assert NO_TEMPLATE in why, why
        multimodal = canaries["multimodal"]
        assert not multimodal["enabled"], multimodal
        assert f"{MODEL} is not a multimodal model" in multimodal["disabled_reason"]
        assert "structured (" in reason, reason
        assert "multimodal (" in reason, reason
        assert await sidecar.code("/livez") == 200
        assert status["verdict"]["hangs"] == []
        print(f"\nvLLM base model: sentinel startup passed {seconds:.1f} s after it started")
