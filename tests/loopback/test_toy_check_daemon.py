"""A toy kind that is not a path kind, registered from the test package, through the whole daemon.

The kind is one module (tests/toycheck.py) and one registration; nothing in
sentinel names it. Its registry entry says it is neither paired nor
idle-gated, so the scheduler must send its canaries alone, with no text
control beside them, and the verdict must judge its failures as a failing
check (readiness), never as a path hang (liveness). The server is a small
OpenAI-compatible one of the test's own that counts each kind's requests by
their ``user`` field.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from tests import toycheck
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar

pytestmark = pytest.mark.timeout(120)

REQUEST = {"messages": [{"role": "user", "content": "Say ok."}], "max_tokens": 2}
# The text canary is rare and the check frequent: a control sent beside each
# check would make text requests at least as many as checks.
CANARIES = {
    "text": {"interval": 2.0, "deadline": 1.0, "jitter": 0.0},
    "toycheck": {"interval": 0.25, "deadline": 1.0},
}

Check = Callable[[], Awaitable[bool]]


@pytest.fixture
def check_registered() -> Iterator[None]:
    with toycheck.registered():
        yield


class CheckServer:
    """Answers every canary ``ok``; with ``wrong`` set, the checks get another answer."""

    def __init__(self) -> None:
        self.wrong = False
        self.checks = 0
        self.texts = 0

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "tiny"}]})

    async def chat(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        content = "ok"
        if str(body.get("user", "")).startswith(toycheck.USER_PREFIX):
            self.checks += 1
            if self.wrong:
                content = "no"
        else:
            self.texts += 1
        choice = {"index": 0, "message": {"role": "assistant", "content": content}}
        usage = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
        reply = {"choices": [{**choice, "finish_reason": "stop"}], "usage": usage}
        return web.json_response(reply)

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)


@pytest.fixture
async def check_server() -> AsyncIterator[tuple[CheckServer, str]]:
    server = CheckServer()
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
        await runner.cleanup()


def check_catalog(directory: Path) -> Path:
    (directory / "text.yaml").write_text(yaml.safe_dump({"kind": "text", "request": REQUEST}))
    (directory / "toycheck.yaml").write_text(
        yaml.safe_dump({"kind": "toycheck", "request": REQUEST})
    )
    return directory


async def test_a_non_path_kind_runs_alone_and_its_failures_are_a_failing_check_not_a_path_hang(
    check_registered: None, check_server: tuple[CheckServer, str], tmp_path: Path
) -> None:
    server, url = check_server
    async with running_sidecar(
        url, catalog=check_catalog(tmp_path), canaries=CANARIES, watch_processes=False
    ) as sidecar:
        await eventually(sidecar.green, 20, "startup needs the toy check to pass too")
        assert (await sidecar.json("/status"))["canaries"]["toycheck"]["passing"] is True

        checks, texts = server.checks, server.texts
        await eventually(_after(server, checks + 12), 20, "a dozen more checks")
        sent_checks, sent_texts = server.checks - checks, server.texts - texts
        assert sent_texts * 3 <= sent_checks, (sent_checks, sent_texts)

        server.wrong = True
        await eventually(_failing_checks(sidecar, 4), 20, "four checks in a row judged bad_body")
        await eventually(_code(sidecar, "/readyz", 503), 10, "/readyz 503 on the failing check")
        # Two misses beside passing controls would already be a path hang; a
        # check that is not a path kind fails readiness only.
        assert await sidecar.code("/livez") == 200
        status = await sidecar.json("/status")
        assert status["verdict"]["hangs"] == []
        assert status["canaries"]["text"]["passing"] is True
        last = status["canaries"]["toycheck"]["last"][-1]
        assert (last["reason"], last["detail"]) == ("bad_body", "answered 'no', not 'ok'")

        server.wrong = False
        await eventually(sidecar.green, 20, "green again once the check answers right")


def _after(server: CheckServer, checks: int) -> Check:
    async def check() -> bool:
        return server.checks >= checks

    return check


def _failing_checks(sidecar: Sidecar, count: int) -> Check:
    async def check() -> bool:
        last = (await sidecar.json("/status"))["canaries"]["toycheck"]["last"]
        return len(last) >= count and all(r["reason"] == "bad_body" for r in last[-count:])

    return check


def _code(sidecar: Sidecar, path: str, code: int) -> Check:
    async def check() -> bool:
        return await sidecar.code(path) == code

    return check
