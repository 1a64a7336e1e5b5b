"""The ``sentinel`` command as a user runs it: exit codes, messages, the one-shot probe."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from chaos.ports import free_port
from sentinel.canary.catalog import default_directory
from sentinel_sim.launch import SimProcess


def sentinel(
    *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sentinel", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess(scheduling_policy="priority") as process:
        yield process


def test_bad_config_exits_2_naming_key_and_file(tmp_path: Path) -> None:
    config = tmp_path / "sentinel.yaml"
    config.write_text("hang_window: 20\nidle_windw: 3\n", encoding="utf-8")
    for command in (["check-config", str(config)], ["run", "--config", str(config)]):
        done = sentinel(*command)
        assert done.returncode == 2, done.stderr
        assert f"{config}: idle_windw: unknown key" in done.stderr


def test_bad_environment_value_exits_2() -> None:
    done = sentinel("run", env={"SENTINEL_ENFORCE": "perhaps"})
    assert done.returncode == 2
    assert "SENTINEL_ENFORCE" in done.stderr


def test_unknown_canary_kind_is_rejected(tmp_path: Path) -> None:
    probes = tmp_path / "probes"
    shutil.copytree(str(default_directory()), probes, ignore=shutil.ignore_patterns("*.py"))
    (probes / "odd.yaml").write_text(
        "kind: audio\nrequest: {messages: [{role: user, content: hi}], max_tokens: 1}\n",
        encoding="utf-8",
    )
    config = tmp_path / "sentinel.yaml"
    config.write_text(f"catalog: {probes}\n", encoding="utf-8")
    done = sentinel("check-config", str(config))
    assert done.returncode == 2
    assert "odd.yaml: kind: unknown canary kind 'audio'" in done.stderr


def test_override_of_an_unknown_canary_exits_2_naming_the_file(tmp_path: Path) -> None:
    config = tmp_path / "sentinel.yaml"
    config.write_text("canaries: {txet: {interval: 3}}\n", encoding="utf-8")
    done = sentinel("check-config", str(config))
    assert done.returncode == 2, done.stderr
    assert f"{config}: canaries: no canary named 'txet'" in done.stderr


def test_check_config_accepts_a_good_file(tmp_path: Path) -> None:
    config = tmp_path / "sentinel.yaml"
    config.write_text("enforce: false\ncanaries: {text: {interval: 3}}\n", encoding="utf-8")
    done = sentinel("check-config", str(config))
    assert done.returncode == 0, done.stderr
    assert "text (text, every 3s)" in done.stdout


def test_check_config_prints_what_the_file_makes_effective(tmp_path: Path) -> None:
    config = tmp_path / "sentinel.yaml"
    config.write_text(
        "enforce: false\nhang_window: 20\ncanaries: {correctness: {enabled: false}}\n",
        encoding="utf-8",
    )
    done = sentinel("check-config", str(config))
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines()[1:])
    assert lines["enforce"].startswith("false: observe only")
    assert "correctness" not in lines["canaries"]  # a disabled canary is not listed as sent
    assert lines["not sent"] == "correctness (disabled by this configuration)"
    assert "hang_window=20.0" in lines["set here"]
    assert '"correctness": {"enabled": false}' in lines["set here"]
    # --env applies the environment over the file, as run does; without it, the file alone.
    env = {"SENTINEL_ENFORCE": "true"}
    assert "enforce: false" in sentinel("check-config", str(config), env=env).stdout
    applied = sentinel("check-config", "--env", str(config), env=env)
    assert applied.returncode == 0, applied.stderr
    assert "enforce: true: a confirmed hang fails liveness" in applied.stdout
    assert "exit codes: 0 valid, 2 invalid" in sentinel("check-config", "--help").stdout


def test_probe_healthy_and_hung(sim: SimProcess) -> None:
    healthy = sentinel("probe", sim.base_url)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert "structured" in healthy.stdout
    sim.control.set_fault("engine_hang")
    try:
        hung = sentinel("probe", "--timeout", "2", "--output", "json", sim.base_url)
    finally:
        sim.control.clear_all()
    assert hung.returncode == 1, hung.stdout + hung.stderr
    report = json.loads(hung.stdout)
    text = json.dumps(report)
    assert "timeout" in text


def test_probe_usage_error_exits_2() -> None:
    done = sentinel("probe")
    assert done.returncode == 2


def test_run_serves_and_stops_on_sigterm(sim: SimProcess) -> None:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sentinel",
            "run",
            "--target",
            sim.base_url,
            "--listen",
            f"127.0.0.1:{port}",
            "--grpc-listen",
            "127.0.0.1:0",
            "--log-format",
            "json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/startupz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "sentinel run never passed startup"
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
        _, err = process.communicate()
        events = [json.loads(line)["event"] for line in err.splitlines() if line.startswith("{")]
        assert "sentinel_started" in events
        assert events[-1] == "sentinel_stopped"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


MALFORMED_CONFIGS: list[tuple[str, bytes, dict[str, str], str]] = [
    ("not-utf8", b"hang_window: 20\n\xff\xfe\n", {}, "not UTF-8 text"),
    ("deeply-nested", b"a: " + b"[" * 3000 + b"]" * 3000 + b"\n", {}, "nested too deeply"),
    ("malformed-yaml", b"a: {b: [1\n", {}, "not valid YAML"),
    ("infinite-window", b"hang_window: .inf\n", {}, "hang_window: Value error, must be between"),
    ("tiny-interval", b"process_interval: 1e-12\n", {}, "process_interval: Value error"),
    ("unknown-variable", b"", {"SENTINEL_HANG_WINDOWS": "20"}, "SENTINEL_HANG_WINDOWS"),
    ("bad-canaries-variable", b"", {"SENTINEL_CANARIES": "[1"}, "SENTINEL_CANARIES"),
]


@pytest.mark.parametrize(
    ("content", "env", "expected"),
    [pytest.param(c, e, x, id=i) for i, c, e, x in MALFORMED_CONFIGS],
)
def test_malformed_input_is_one_line_and_exit_2(
    tmp_path: Path, content: bytes, env: dict[str, str], expected: str
) -> None:
    config = tmp_path / "sentinel.yaml"
    config.write_bytes(content)
    for command in (["check-config", str(config)], ["run", "--config", str(config)]):
        if command[0] == "check-config" and env:
            continue  # check-config validates the file alone, not the environment
        done = sentinel(*command, env=env, timeout=30)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert expected in lines[0]
        assert "Traceback" not in done.stderr


def test_non_utf8_key_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_bytes(b"sk-\xff\xfe")
    done = sentinel("run", "--api-key-file", str(key), "--listen", "127.0.0.1:0", timeout=30)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"sentinel run: configuration error: api_key_file: cannot read {key}: not UTF-8 text"
    ]
