"""Startup that ends on a base model: no chat template, or no image input.

A base model whose tokenizer defines no chat template answers every chat
request with vLLM's 400 (the simulator's ``--no-chat-template``). The text
canary falls back to a plain completion on ``/v1/completions`` (named in
``/startupz`` and the startup transition in ``/status``), the chat-needing
kinds are set aside with the refusal as their reason, startup passes and
liveness stays green; and a hung engine behind the same model still turns
``/livez`` red, so the fallback blinds nothing. A text-only model asked for
an image answers vLLM's 400 too: the multimodal kind is disabled with that
reason and startup passes on the rest.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from sentinel.canary.spec import CHAT_ENDPOINT, COMPLETIONS_ENDPOINT
from sentinel.record.set_aside import FALLBACK_AFTER, SET_ASIDE_AFTER
from sentinel_sim.launch import SimProcess
from sentinel_sim.openai_request import NO_CHAT_TEMPLATE
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar

pytestmark = pytest.mark.timeout(120)

STARTUP = 60.0  # seconds: a bounded run of refusals per kind at 1 s cadence, with slack
DETECT = 30.0


@pytest.fixture(scope="module")
def base_model() -> Iterator[SimProcess]:
    with SimProcess(model="sim-base", decode_tps=400, no_chat_template=True) as process:
        yield process


@pytest.fixture(scope="module")
def text_only() -> Iterator[SimProcess]:
    with SimProcess(model="sim-text", decode_tps=400, text_only=True) as process:
        yield process


async def _started(sidecar: Sidecar) -> bool:
    """Every kind resolved: passed or set aside (startup itself passes on the text canary)."""
    startup = await sidecar.json("/startupz")
    return await sidecar.code("/startupz") == 200 and "every canary kind" in startup["reason"]


def _aside(status: dict[str, Any]) -> dict[str, str]:
    return {k: c["disabled_reason"] for k, c in status["canaries"].items() if not c["enabled"]}


def test_the_simulated_base_model_refuses_chat_as_vllm_does(base_model: SimProcess) -> None:
    with httpx.Client(base_url=base_model.base_url, timeout=10) as client:
        chat = client.post(
            CHAT_ENDPOINT,
            json={"messages": [{"role": "user", "content": "Say ok."}], "max_tokens": 2},
        )
        plain = client.post(COMPLETIONS_ENDPOINT, json={"prompt": "Say ok.", "max_tokens": 2})
    assert chat.status_code == 400
    error = {"message": NO_CHAT_TEMPLATE, "type": "BadRequestError", "param": None, "code": 400}
    assert chat.json() == {"error": error}
    assert plain.status_code == 200, plain.text
    assert plain.json()["usage"]["completion_tokens"] >= 1


async def test_a_base_model_without_a_chat_template_passes_startup(base_model: SimProcess) -> None:
    async with running_sidecar(base_model.base_url) as sidecar:
        seconds = await eventually(lambda: _started(sidecar), STARTUP, "/startupz 200")
        startup = (await sidecar.json("/startupz"))["reason"]
        assert f"fell back: text (on {COMPLETIONS_ENDPOINT} for this server" in startup
        assert f"{FALLBACK_AFTER} canaries in a row on {CHAT_ENDPOINT} refused with HTTP 400" in (
            startup
        )
        assert "set aside: " in startup
        status = await sidecar.json("/status")
        aside = _aside(status)
        assert {"structured", "multimodal"} <= set(aside), status["canaries"]
        for kind in ("structured", "multimodal"):
            why = aside[kind]
            assert f"{SET_ASIDE_AFTER} canaries in a row refused with HTTP 400" in why, why
            assert "default chat template is no longer allowed" in why, why
            assert kind in startup
        text = status["canaries"]["text"]
        assert text["enabled"] is True, text
        assert text["passing"] is True, text
        assert "on /v1/completions" in (text["fallback"] or ""), text
        # Completions never needed chat: the correctness check runs on, judged.
        assert status["canaries"]["correctness"]["enabled"] is True
        history = [t for t in status["history"] if t["probe"] == "startup" and t["ok"]]
        assert history, status["history"]
        assert "fell back: text" in history[-1]["reason"], history
        assert await sidecar.code("/livez") == 200
        assert status["verdict"]["hangs"] == []
        ready = await eventually(sidecar.green, 30, "startup, readiness and liveness 200")
        print(f"\nno chat template: startup passed after {seconds:.1f} s, green {ready:.1f} s on")


async def test_a_hung_engine_behind_a_base_model_still_fails_liveness(
    base_model: SimProcess,
) -> None:
    async with running_sidecar(base_model.base_url) as sidecar:
        await eventually(sidecar.green, STARTUP, "green on the base model")
        base_model.control.set_fault("engine_hang")
        try:

            async def red() -> bool:
                return await sidecar.code("/livez") == 503

            seconds = await eventually(red, DETECT, "/livez 503 after the engine hang", 0.25)
            reason = str((await sidecar.json("/livez"))["reason"])
        finally:
            base_model.control.clear_all()
        assert "engine hang" in reason, reason
        print(f"\nno chat template, engine hang: /livez 503 after {seconds:.1f} s ({reason})")


async def test_a_text_only_model_asked_for_an_image_passes_startup(text_only: SimProcess) -> None:
    async with running_sidecar(text_only.base_url) as sidecar:
        await eventually(lambda: _started(sidecar), STARTUP, "/startupz 200")
        startup = (await sidecar.json("/startupz"))["reason"]
        status = await sidecar.json("/status")
        aside = _aside(status)
        assert set(aside) == {"multimodal"}, status["canaries"]
        assert "sim-text is not a multimodal model" in aside["multimodal"]
        assert "set aside: multimodal (" in startup
        assert "is not a multimodal model" in startup
        assert "fell back" not in startup  # chat works: the text canary stays on it
        assert status["canaries"]["text"]["passing"] is True
        assert await sidecar.code("/livez") == 200
