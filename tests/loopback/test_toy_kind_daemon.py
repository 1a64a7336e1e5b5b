"""A toy canary kind, registered from the test package, through the whole daemon.

The kind is one module (tests/toykind.py) and one registration; nothing in
sentinel names it. Here it goes through the catalog, the scheduler, the real
runner over sockets, the verdict, the HTTP probes and ``/status``, against a
small OpenAI-compatible server of the test's own whose toy path can hang while
its text path answers.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from tests import toykind
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar

pytestmark = pytest.mark.timeout(120)

REQUEST = {"messages": [{"role": "user", "content": "Say ok."}], "max_tokens": 2}


@pytest.fixture
def toy_registered() -> Iterator[None]:
    with toykind.registered():
        yield


class ToyServer:
    """Answers text and toy canaries; ``hang`` parks every toy request until released."""

    def __init__(self) -> None:
        self.hang = False
        self.release = asyncio.Event()
        self.toy_requests = 0

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "tiny"}]})

    async def chat(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        if str(body.get("user", "")).startswith(toykind.USER_PREFIX):
            self.toy_requests += 1
            if self.hang:
                await self.release.wait()
        choice = {"index": 0, "message": {"role": "assistant", "content": "ok"}}
        usage = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
        reply = {"choices": [{**choice, "finish_reason": "stop"}], "usage": usage}
        return web.json_response(reply)

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)


@pytest.fixture
async def toy_server() -> AsyncIterator[tuple[ToyServer, str]]:
    server = ToyServer()
    app = web.Application()
    app.add_routes(
        [
            web.get("/v1/models", server.models),
            web.post("/v1/chat/completions", server.chat),
            web.get("/health", server.health),
        ]
    )
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield server, f"http://127.0.0.1:{port}"
    finally:
        server.release.set()
        await runner.cleanup()


def toy_catalog(directory: Path) -> Path:
    (directory / "text.yaml").write_text(yaml.safe_dump({"kind": "text", "request": REQUEST}))
    (directory / "toy.yaml").write_text(yaml.safe_dump({"kind": "toy", "request": REQUEST}))
    return directory


async def test_a_registered_toy_kind_runs_end_to_end_and_reports_in_status(
    toy_registered: None, toy_server: tuple[ToyServer, str], tmp_path: Path
) -> None:
    server, url = toy_server
    canaries = {
        "text": {"interval": 0.5, "deadline": 1.0, "jitter": 0.0},
        "toy": {"interval": 0.5, "deadline": 1.0},
    }
    async with running_sidecar(
        url, catalog=toy_catalog(tmp_path), canaries=canaries, watch_processes=False
    ) as sidecar:
        await eventually(sidecar.green, 20, "startup needs the toy kind to pass too")
        status = await sidecar.json("/status")
        assert status["canaries"]["toy"]["passing"] is True
        assert server.toy_requests >= 1

        server.hang = True
        await eventually(lambda: _red(sidecar), 20, "/livez 503 on the hung toy path")
        reason = (await sidecar.json("/livez"))["reason"]
        assert "toy path hang" in reason
        status = await sidecar.json("/status")
        assert [h["kind"] for h in status["verdict"]["hangs"]] == ["toy"]
        assert status["canaries"]["text"]["passing"] is True

        server.hang = False
        server.release.set()
        await eventually(sidecar.green, 20, "green again once the toy path answers")


async def _red(sidecar: Sidecar) -> bool:
    return await sidecar.code("/livez") == 503
