"""``/maintenance`` over a real socket: the token, the window, /status, expiry, and the CLI.

The server is sentinel's own aiohttp app on 127.0.0.1:0 (as in test_serve_http),
with a fake clock so a window runs out without waiting; the threaded listener
and the daemon itself are exercised too, since there the request body and the
window live on different threads.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import httpx
import pytest
import structlog
from prometheus_client import CollectorRegistry

from sentinel.cli import main
from sentinel.evaluation.health import HealthState
from sentinel.exitcode import ExitCode
from sentinel.maintenance.endpoint import MaintenanceHook
from sentinel.maintenance.window import MAX_BODY_BYTES, MaintenanceWindow, TokenFile
from sentinel.serve.http import HttpServer
from sentinel.serve.probe_thread import ThreadedHttpServer
from sentinel.serve.state_metrics import daemon_metrics
from tests.loopback.sidecar import running_sidecar

pytestmark = pytest.mark.timeout(120)

TOKEN = "s3cret-maintenance-token-0123456789abcdef"
OTHER = "another-token-of-enough-length-42"
ROOT = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Served:
    """The server under test and what it was built from."""

    def __init__(
        self, http: HttpServer, hook: MaintenanceHook, clock: Clock, token_file: Path
    ) -> None:
        self.http = http
        self.hook = hook
        self.clock = clock
        self.token_file = token_file
        self.registry = hook.metrics.registry if hook.metrics else CollectorRegistry()

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        value = self.registry.get_sample_value(name, labels or {})
        return 0.0 if value is None else value


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def write_token(path: Path, token: str) -> None:
    """Replace the file the way a Secret rotation does: a new file renamed over the old."""
    fresh = path.with_name(path.name + ".new")
    fresh.write_text(token + "\n", encoding="utf-8")
    os.replace(fresh, path)


async def start(tmp_path: Path, *, token: bool = True) -> Served:
    clock = Clock()
    state = HealthState(clock=clock)
    registry = CollectorRegistry()
    metrics = daemon_metrics(registry, state, clock=clock)
    token_file = tmp_path / "token"
    write_token(token_file, TOKEN)
    window = MaintenanceWindow(600.0, on_expired=lambda _: metrics.maintenance_changed("expired"))
    hook = MaintenanceHook(window, TokenFile(token_file) if token else None, clock, metrics)
    http = HttpServer(state, registry, "127.0.0.1", 0, maintenance=hook)
    await http.start()
    return Served(http, hook, clock, token_file)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    server = await start(tmp_path)
    try:
        yield server
    finally:
        await server.http.stop()


@pytest.fixture
async def client(served: Served) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=served.http.url, timeout=5.0) as c:
        yield c


SET = {"seconds": 300, "reason": "weight sync, step 1200"}


# ------------------------------------------------------------------------ the token


@pytest.mark.parametrize(
    "headers",
    [
        {},
        auth(OTHER),
        auth(TOKEN[:-1]),
        auth(TOKEN + "x"),
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": TOKEN},
        {"Authorization": "Bearer"},
    ],
    ids=["none", "other", "prefix", "longer", "basic", "bare", "empty"],
)
async def test_a_missing_or_wrong_token_gets_401_and_nothing_else(
    served: Served, client: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    for method in ("GET", "POST", "DELETE"):
        answer = await client.request(method, "/maintenance", json=SET, headers=headers)
        assert answer.status_code == 401
        assert answer.json() == {"error": "unauthorized"}
        assert answer.headers["WWW-Authenticate"].startswith("Bearer")
    assert served.hook.window.active(served.clock.now) is None
    assert served.metric("sentinel_maintenance_unauthorized_total") == 3


async def test_two_authorization_headers_are_refused(client: httpx.AsyncClient) -> None:
    headers = [("Authorization", f"Bearer {TOKEN}"), ("Authorization", f"Bearer {OTHER}")]
    answer = await client.get("/maintenance", headers=headers)
    assert answer.status_code == 401


async def test_the_scheme_is_case_insensitive(client: httpx.AsyncClient) -> None:
    answer = await client.get("/maintenance", headers={"Authorization": f"bearer {TOKEN}"})
    assert answer.status_code == 200


async def test_a_rotated_token_replaces_the_old_one_at_once(
    served: Served, client: httpx.AsyncClient
) -> None:
    assert (await client.get("/maintenance", headers=auth())).status_code == 200
    write_token(served.token_file, OTHER)
    assert (await client.get("/maintenance", headers=auth())).status_code == 401
    assert (await client.get("/maintenance", headers=auth(OTHER))).status_code == 200


async def test_an_unreadable_token_file_closes_the_hook_until_it_returns(
    served: Served, client: httpx.AsyncClient
) -> None:
    served.token_file.unlink()
    answer = await client.post("/maintenance", json=SET, headers=auth())
    assert answer.status_code == 503
    assert "token file" in answer.json()["error"]
    assert TOKEN not in answer.text
    assert served.hook.window.active(served.clock.now) is None
    write_token(served.token_file, TOKEN)
    assert (await client.post("/maintenance", json=SET, headers=auth())).status_code == 200


async def test_without_a_token_file_the_hook_is_off(tmp_path: Path) -> None:
    served = await start(tmp_path, token=False)
    try:
        async with httpx.AsyncClient(base_url=served.http.url, timeout=5.0) as c:
            for method in ("GET", "POST", "DELETE"):
                answer = await c.request(method, "/maintenance", json=SET, headers=auth())
                assert answer.status_code == 404
                assert "maintenance hook is off" in answer.json()["error"]
                assert "SENTINEL_MAINTENANCE_TOKEN_FILE" in answer.json()["error"]
            assert (await c.get("/status")).json()["maintenance"] is None
    finally:
        await served.http.stop()


async def test_an_app_without_the_hook_has_no_route(tmp_path: Path) -> None:
    http = HttpServer(HealthState(), CollectorRegistry(), "127.0.0.1", 0)
    await http.start()
    try:
        async with httpx.AsyncClient(base_url=http.url, timeout=5.0) as c:
            assert (await c.get("/maintenance", headers=auth())).status_code == 404
            assert "maintenance" not in (await c.get("/status")).json()
    finally:
        await http.stop()


# ------------------------------------------------------------------------ the window


async def test_set_show_status_and_expiry(served: Served, client: httpx.AsyncClient) -> None:
    with structlog.testing.capture_logs() as logs:
        answer = await client.post("/maintenance", json=SET, headers=auth())
    assert answer.status_code == 200
    assert answer.headers["Cache-Control"] == "no-store"
    window = {"reason": "weight sync, step 1200", "seconds": 300.0, "remaining": 300.0, "for": 0.0}
    assert answer.json() == {"maintenance": window, "max_seconds": 600.0}
    info = served.hook.window.active(served.clock.now)
    assert info is not None
    assert (info.since, info.until, info.reason) == (1000.0, 1300.0, "weight sync, step 1200")
    (event,) = [e for e in logs if e["event"] == "maintenance_set"]
    assert event["seconds"] == 300.0
    assert event["reason"] == "weight sync, step 1200"
    assert event["replaced"] is False
    assert TOKEN not in json.dumps(logs, default=str)
    assert served.metric("sentinel_maintenance_changes_total", {"action": "set"}) == 1

    served.clock.now += 100.0
    shown = (await client.get("/maintenance", headers=auth())).json()["maintenance"]
    assert shown == {**window, "remaining": 200.0, "for": 100.0}
    status = (await client.get("/status")).json()
    assert status["maintenance"] == shown
    assert status["liveness"]["status"] == "ok"  # the rest of /status is still there

    served.clock.now += 200.0  # exactly at `until`: over
    with structlog.testing.capture_logs() as logs:
        assert (await client.get("/status")).json()["maintenance"] is None
    assert [e["event"] for e in logs] == ["maintenance_expired"]
    assert (await client.get("/maintenance", headers=auth())).json()["maintenance"] is None
    assert served.metric("sentinel_maintenance_changes_total", {"action": "expired"}) == 1


async def test_a_new_window_replaces_the_old(served: Served, client: httpx.AsyncClient) -> None:
    await client.post("/maintenance", json=SET, headers=auth())
    served.clock.now += 10.0
    with structlog.testing.capture_logs() as logs:
        answer = await client.post(
            "/maintenance", json={"seconds": 30, "reason": "shorter"}, headers=auth()
        )
    assert answer.json()["maintenance"]["remaining"] == 30.0
    assert [e["replaced"] for e in logs if e["event"] == "maintenance_set"] == [True]
    info = served.hook.window.active(served.clock.now)
    assert info is not None
    assert (info.until, info.reason) == (1040.0, "shorter")


async def test_delete_ends_the_window(served: Served, client: httpx.AsyncClient) -> None:
    await client.post("/maintenance", json=SET, headers=auth())
    with structlog.testing.capture_logs() as logs:
        answer = await client.delete("/maintenance", headers=auth())
    assert answer.status_code == 200
    assert answer.json() == {"maintenance": None, "max_seconds": 600.0, "cleared": True}
    assert [e["event"] for e in logs] == ["maintenance_cleared"]
    assert served.hook.window.active(served.clock.now) is None
    assert (await client.get("/status")).json()["maintenance"] is None
    again = await client.delete("/maintenance", headers=auth())
    assert again.json()["cleared"] is False
    assert served.metric("sentinel_maintenance_changes_total", {"action": "cleared"}) == 1


async def test_the_reason_is_cleaned_before_it_is_shown(client: httpx.AsyncClient) -> None:
    reason = "line one\nFORGED level=error\x1b[31m \u202edesrever"
    answer = await client.post(
        "/maintenance", json={"seconds": 5, "reason": reason}, headers=auth()
    )
    shown = answer.json()["maintenance"]["reason"]
    assert shown == "line one FORGED level=error [31m desrever"
    assert (await client.get("/status")).json()["maintenance"]["reason"] == shown


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"seconds": 601, "reason": "x"}', "at most 600 (maintenance_max)"),
        (b'{"seconds": 0, "reason": "x"}', "seconds: Input should be greater than 0"),
        (b'{"seconds": -5, "reason": "x"}', "greater than 0"),
        (b'{"seconds": NaN, "reason": "x"}', "finite number"),
        (b'{"seconds": Infinity, "reason": "x"}', "finite number"),
        (b'{"seconds": 1e999, "reason": "x"}', "finite number"),
        (b'{"seconds": "60", "reason": "x"}', "seconds: Input should be a valid number"),
        (b'{"seconds": true, "reason": "x"}', "valid number"),
        (b'{"seconds": 60, "reason": "x", "enforce": false}', "enforce: unknown key"),
        (b'{"seconds": 60}', "reason: Field required"),
        (b'{"seconds": 60, "reason": ""}', "reason: String should have at least 1 character"),
        (b'{"seconds": 60, "reason": "\\n\\t"}', "reason must hold some visible text"),
        (b'{"seconds": 60, "reason": "' + b"r" * 201 + b'"}', "at most 200 characters"),
        (b"[60]", "Input should be an object"),
        (b"seconds=60", "Invalid JSON"),
        (b"", "Invalid JSON"),
    ],
)
async def test_a_bad_body_is_refused_with_400_naming_the_problem(
    served: Served, client: httpx.AsyncClient, body: bytes, expected: str
) -> None:
    answer = await client.post(
        "/maintenance",
        content=body,
        headers={**auth(), "Content-Type": "application/json"},
    )
    assert answer.status_code == 400, answer.text
    assert expected in answer.json()["error"]
    assert served.hook.window.active(served.clock.now) is None  # refused, never clipped


async def test_a_body_over_the_cap_is_refused_with_413(
    served: Served, client: httpx.AsyncClient
) -> None:
    big = json.dumps({"seconds": 5, "reason": "x" * MAX_BODY_BYTES}).encode()
    answer = await client.post("/maintenance", content=big, headers=auth())
    assert answer.status_code == 413

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"seconds": 5, "reason": "'
        for _ in range(8):
            yield b"y" * 1024
        yield b'"}'

    answer = await client.post("/maintenance", content=chunked(), headers=auth())
    assert answer.status_code == 413
    assert served.hook.window.active(served.clock.now) is None


async def test_other_methods_are_not_allowed(client: httpx.AsyncClient) -> None:
    assert (await client.put("/maintenance", json=SET, headers=auth())).status_code == 405


# --------------------------------------------------------------- threads and the daemon


async def test_the_threaded_listener_sets_what_the_daemon_loop_reads(tmp_path: Path) -> None:
    """In the daemon the body is read on the listener's thread, /status on the daemon's loop."""
    token_file = tmp_path / "token"
    write_token(token_file, TOKEN)
    window = MaintenanceWindow(600.0)
    hook = MaintenanceHook(window, TokenFile(token_file))
    http = ThreadedHttpServer(HealthState(), CollectorRegistry(), "127.0.0.1", 0, maintenance=hook)
    await http.start()
    try:
        async with httpx.AsyncClient(base_url=http.url, timeout=5.0) as c:
            answer = await c.post("/maintenance", json=SET, headers=auth())
            assert answer.status_code == 200
            assert window.active(hook.clock()) is not None
            assert (await c.get("/status")).json()["maintenance"]["reason"] == SET["reason"]
            assert (await c.delete("/maintenance", headers=auth())).json()["cleared"] is True
            assert window.active(hook.clock()) is None
    finally:
        await http.stop()


async def test_the_daemon_serves_the_hook_and_exposes_its_window(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    write_token(token_file, TOKEN)
    async with running_sidecar(
        "http://127.0.0.1:9", maintenance_token_file=token_file, maintenance_max=120.0
    ) as sidecar:
        daemon = sidecar.daemon
        assert daemon.maintenance.active(daemon.clock()) is None
        url = sidecar.url + "/maintenance"
        assert (await sidecar.client.post(url, json=SET, headers=auth())).status_code == 400
        answer = await sidecar.client.post(
            url, json={"seconds": 120, "reason": "rl pause"}, headers=auth()
        )
        assert answer.status_code == 200
        info = daemon.maintenance.active(daemon.clock())
        assert info is not None
        assert info.reason == "rl pause"
        assert 0 < info.until - daemon.clock() <= 120.0
        assert (await sidecar.json("/status"))["maintenance"]["reason"] == "rl pause"


# ------------------------------------------------------------------------------ CLI


async def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``sentinel ARGV`` in a worker thread (the server runs on this loop), with its output."""
    capsys.readouterr()
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def target(served: Served, token_file: Path | None = None) -> Sequence[str]:
    return ("--sentinel", served.http.url, "--token-file", str(token_file or served.token_file))


async def test_cli_sets_shows_and_clears(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = await cli(
        capsys, "maintenance", "set", "--seconds", "90", "--reason", "rl step", *target(served)
    )
    assert code == ExitCode.OK
    assert "sentinel maintenance" not in err  # the server's log lines share stderr here
    assert "90 s left of 90 s" in out
    assert "rl step" in out
    assert TOKEN not in out
    info = served.hook.window.active(served.clock.now)
    assert info is not None
    assert info.until == served.clock.now + 90

    served.clock.now += 30
    code, out, _ = await cli(capsys, "maintenance", "show", *target(served))
    assert code == ExitCode.OK
    assert out.strip() == "maintenance window: 60 s left of 90 s (set 30 s ago): rl step"
    code, out, _ = await cli(capsys, "maintenance", "show", "--output", "json", *target(served))
    assert json.loads(out)["maintenance"]["remaining"] == 60.0

    code, out, _ = await cli(capsys, "maintenance", "clear", *target(served))
    assert (code, out.strip()) == (ExitCode.OK, "maintenance window cleared")
    assert served.hook.window.active(served.clock.now) is None
    code, out, _ = await cli(capsys, "maintenance", "show", *target(served))
    assert out.startswith("no maintenance window")


async def test_cli_refusals_exit_2_with_the_reason(
    served: Served, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = await cli(
        capsys, "maintenance", "set", "--seconds", "7200", "--reason", "x", *target(served)
    )
    assert code == ExitCode.USAGE
    assert "refused (400)" in err
    assert "maintenance_max" in err

    wrong = tmp_path / "wrong"
    write_token(wrong, OTHER)
    code, _, err = await cli(capsys, "maintenance", "show", *target(served, wrong))
    assert code == ExitCode.USAGE
    assert "refused (401): unauthorized" in err
    assert OTHER not in err

    code, _, err = await cli(capsys, "maintenance", "show", *target(served, tmp_path / "absent"))
    assert code == ExitCode.USAGE
    assert "cannot read" in err


async def test_cli_without_an_answer_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    served = await start(tmp_path)
    url = served.http.url
    await served.http.stop()  # the port is closed now
    code, _, err = await cli(
        capsys, "maintenance", "show", "--sentinel", url, "--token-file", str(served.token_file)
    )
    assert code == ExitCode.UNHEALTHY
    assert f"no answer from {url}" in err


async def test_cli_against_a_hook_that_is_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    served = await start(tmp_path, token=False)
    try:
        code, _, err = await cli(capsys, "maintenance", "clear", *target(served))
        assert code == ExitCode.USAGE
        assert "refused (404): the maintenance hook is off" in err
    finally:
        await served.http.stop()


async def test_cli_as_a_process_reads_the_token_file_from_the_environment(
    served: Served,
) -> None:
    env = {**os.environ, "SENTINEL_MAINTENANCE_TOKEN_FILE": str(served.token_file)}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sentinel",
        "maintenance",
        "set",
        "--seconds",
        "45",
        "--reason",
        "from a process",
        "--sentinel",
        served.http.url,
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(60):
            out, err = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == ExitCode.OK, err.decode()
    assert b"from a process" in out
    info = served.hook.window.active(served.clock.now)
    assert info is not None
    assert info.reason == "from a process"


def test_cli_refuses_bad_seconds_before_sending(capsys: pytest.CaptureFixture[str]) -> None:
    for seconds in ("0", "-3", "nan", "inf", "soon"):
        with pytest.raises(SystemExit) as exited:
            main(["maintenance", "set", "--seconds", seconds, "--reason", "x"])
        assert exited.value.code == ExitCode.USAGE
        assert "--seconds" in capsys.readouterr().err


def test_cli_needs_a_token_file(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SENTINEL_MAINTENANCE_TOKEN_FILE", raising=False)
    assert main(["maintenance", "show"]) == ExitCode.USAGE
    assert "SENTINEL_MAINTENANCE_TOKEN_FILE" in capsys.readouterr().err
