"""An operator's /status, over real sockets: against the simulator and against a dead port.

``/status`` opens with its summary and ends with the configuration, ``/``
lists the endpoints, ``sentinel status`` reads a running sidecar (exit 0 live,
1 a confirmed hang, 2 no sidecar), and a target that nothing listens on is
named so in ``/startupz`` and the summary.
"""

from __future__ import annotations

import asyncio
import io
import json
import socket
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from datetime import datetime

import pytest

from sentinel.cli import main
from sentinel_sim.launch import SimProcess
from tests.loopback.sidecar import eventually, running_sidecar

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def sim() -> Iterator[SimProcess]:
    with SimProcess(scheduling_policy="priority") as process:
        yield process


def dead_port() -> int:
    """A port nothing listens on: bound to learn a free one, then closed."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def cli(*argv: str) -> tuple[int, str, str]:
    """``sentinel ARGV`` in a thread (it runs its own event loop): (exit, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()

    def run() -> int:
        with redirect_stdout(out), redirect_stderr(err):
            return main(list(argv))

    code = await asyncio.to_thread(run)
    return code, out.getvalue(), err.getvalue()


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def test_status_opens_with_the_summary_and_ends_with_the_configuration(
    sim: SimProcess,
) -> None:
    async with running_sidecar(sim.base_url) as sidecar:
        await eventually(sidecar.green, 30, "startup, readiness and liveness all 200")
        response = await sidecar.client.get(sidecar.url + "/status")
        keys = list(json.loads(response.text))  # the order on the wire, not a re-sorted dict
        assert keys[0] == "summary"
        assert keys[-1] == "config"
        assert keys.index("verdict") < keys.index("config")
        status = response.json()
        summary = status["summary"]
        assert list(summary)[:4] == ["at", "target", "model", "enforce"]
        for probe in ("liveness", "readiness", "startup"):
            answer = summary[probe]
            assert answer["ok"] is True, answer
            assert answer["reason"]
            assert answer["age"] >= 0
            assert utc(answer["since"]) <= utc(summary["at"])
            assert status[probe]["status"] == "ok"  # the readers of the old keys still read them
            assert status[probe]["since_utc"] == answer["since"]
        assert summary["hang"] is None
        assert summary["unreachable"] is None
        assert isinstance(status["version"], str)  # sentinel's release; revision counts changes
        assert isinstance(status["revision"], int)

        code, out, _ = await cli("status", "--sentinel", sidecar.url)
        assert code == 0, out
        for word in ("liveness", "readiness", "startup", sim.base_url):
            assert word in out, out
        code, out, _ = await cli("status", "--sentinel", sidecar.url, "--output", "json")
        assert code == 0
        assert next(iter(json.loads(out))) == "summary"

        sim.control.set_fault("engine_hang")

        async def red() -> bool:
            return await sidecar.code("/livez") == 503

        await eventually(red, 30, "/livez 503 on the engine hang")
        summary = (await sidecar.json("/status"))["summary"]
        assert summary["liveness"]["ok"] is False
        assert summary["hang"]["kind"] == "engine", summary
        assert summary["hang"]["age"] >= 0
        code, out, _ = await cli("status", "--sentinel", sidecar.url)
        assert code == 1
        assert "engine (restart)" in out, out
        sim.control.clear_all()


async def test_index_lists_every_endpoint_with_a_description(sim: SimProcess) -> None:
    async with running_sidecar(sim.base_url) as sidecar:
        index = await sidecar.json("/")
        endpoints = {e["path"]: e for e in index["endpoints"]}
        for path in ("/", "/livez", "/readyz", "/startupz", "/healthz", "/status", "/metrics"):
            assert endpoints[path]["description"], path
            assert "GET" in endpoints[path]["methods"]
        assert "/incidents" in endpoints  # routes registered from outside are listed too
        assert all(e["description"] for e in index["endpoints"]), index


async def test_a_dead_target_is_named_unreachable_in_startupz_and_the_summary() -> None:
    port = dead_port()
    async with running_sidecar(f"http://127.0.0.1:{port}") as sidecar:

        async def named() -> bool:
            body = await sidecar.json("/startupz")
            return str(body["reason"]).startswith("target unreachable: connection refused")

        await eventually(named, 15, "/startupz naming the refused connection")
        assert await sidecar.code("/startupz") == 503
        status = await sidecar.json("/status")
        assert status["summary"]["unreachable"] == "connection refused"
        assert status["summary"]["startup"]["reason"].startswith("target unreachable")
        assert status["sections"]["reachability"]["unreachable"] == "connection refused"
        # Liveness stays green: a server that never answered is no hang.
        code, out, _ = await cli("status", "--sentinel", sidecar.url)
        assert code == 0
        assert "unreachable" in out


async def test_cli_says_in_one_line_that_no_sidecar_answers() -> None:
    url = f"http://127.0.0.1:{dead_port()}"
    code, out, err = await cli("status", "--sentinel", url, "--timeout", "2")
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert f"no sidecar answering at {url}" in err
