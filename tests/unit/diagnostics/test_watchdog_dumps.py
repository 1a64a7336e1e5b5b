"""vLLM's own watchdog dumps (0.33+ ``--watchdog-config``) in a hang's bundle.

The flag read in every form argparse and vLLM's config flags take; the dump
dir read as hostile (the current processes' files only, newest first, capped,
tails kept, no symlink followed); and a real capture carrying them redacted,
with summary.txt naming them. Off (no flag, or an empty ``dump_dir``) adds nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sentinel.diagnostics import watchdog
from sentinel.diagnostics.bundle import DiagnosticsContext, Trigger, capture
from sentinel.diagnostics.procs import ProcessMatch
from tests import secret_corpus as corpus


@pytest.mark.parametrize(
    ("cmdline", "expected"),
    [
        (["vllm", "serve", "m", "--watchdog-config", '{"dump_dir": "/d", "timeout": 300}'], "/d"),
        (["vllm", "serve", "m", '--watchdog-config={"dump_dir":"/d"}'], "/d"),
        (["sh", "-c", 'vllm serve m --watchdog_config \'{"dump_dir": "/d"}\' --port 8'], "/d"),
        (["vllm", "serve", "m", "--watchdog-config.dump_dir", "/e"], "/e"),
        (
            ["vllm", "--watchdog-config", '{"dump_dir": "/d"}', "--watchdog-config.dump-dir=/e"],
            "/e",
        ),
        (["vllm", "serve", "m", "--watchdog-config", '{"dump_dir": ""}'], None),
        (["vllm", "serve", "m", "--watchdog-config", '{"dump_dir": '], None),
        (["vllm", "serve", "m", "--watchdog-config", '{"dump_dir": 7}'], None),
        (["vllm", "serve", "m"], None),
    ],
)
def test_the_dump_dir_is_read_from_the_command_line(
    cmdline: list[str], expected: str | None
) -> None:
    assert watchdog.dump_dir(cmdline) == expected


def _dump(folder: Path, kind: str, index: int, pid: int, text: str, age: float) -> Path:
    path = folder / f"VLLM_STACK_DUMP_for_{kind}_{index}_{pid}.log"
    path.write_text(text)
    stamp = path.stat().st_mtime - age
    os.utime(path, (stamp, stamp))
    return path


def test_only_the_current_processes_dumps_are_kept_newest_first(tmp_path: Path) -> None:
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    _dump(dumps, "engine", 0, 101, ">>> Call stack dump #1\nengine frames\n", age=60)
    _dump(dumps, "worker", 1, 102, ">>> Call stack dump #1\nworker frames\n", age=5)
    _dump(dumps, "engine", 0, 999, "a dump of a process restarted away\n", age=1)
    (dumps / "unrelated.log").write_text("not a dump")
    secret = tmp_path / "secret"
    secret.write_text("do not read")
    (dumps / "VLLM_STACK_DUMP_for_worker_2_103.log").symlink_to(secret)
    cmd = ["vllm", "serve", "m", "--watchdog-config", f'{{"dump_dir": "{dumps}"}}']
    section = watchdog.gather([(101, cmd), (102, ["VLLM::Worker_TP1"]), (103, ["x"])])
    assert section is not None
    assert [(f["process"], f["index"], f["pid"]) for f in section["files"]] == [
        ("worker", 1, 102),
        ("engine", 0, 101),
    ]
    assert section["files"][0]["text"].endswith("worker frames\n")
    assert section["other_processes"] == 1
    assert "do not read" not in str(section)  # a symlink is never followed
    lines = watchdog.summary_lines(section)
    assert "2 dump file(s)" in lines[1]
    assert "worker 1 pid 102" in lines[2]


def test_a_long_dump_keeps_its_last_bytes_and_the_count_is_capped(tmp_path: Path) -> None:
    cmd = ["vllm", f"--watchdog-config.dump_dir={tmp_path}"]
    long_text = "".join(f">>> Call stack dump #{i}\nframe {i}\n" for i in range(40_000))
    _dump(tmp_path, "engine", 0, 7, long_text, age=0)
    for rank in range(watchdog.MAX_FILES + 3):
        _dump(tmp_path, "worker", rank, 7, "short\n", age=10 + rank)
    section = watchdog.gather([(7, cmd)], limit=4096)
    assert section is not None
    newest = section["files"][0]
    assert newest["process"] == "engine"
    assert newest["text"].endswith("frame 39999\n")  # the newest dump is at the end
    assert newest["text"].startswith(">>> Call stack dump") or newest["text"].startswith("frame")
    assert len(newest["text"].encode()) <= 4096
    assert newest["truncated_bytes"] == len(long_text.encode()) - 4096
    assert len(section["files"]) == watchdog.MAX_FILES
    assert section["left_out"] == 4


def test_off_or_unreadable_is_said_never_raised(tmp_path: Path) -> None:
    assert watchdog.gather([(1, ["vllm", "serve", "m"])]) is None
    assert watchdog.summary_lines(None) == []
    cmd = ["vllm", "--watchdog-config", f'{{"dump_dir": "{tmp_path / "absent"}"}}']
    section = watchdog.gather([(1, cmd)], proc=tmp_path / "proc")
    assert section is not None
    assert section["files"] == []
    assert "absent" in section["error"]
    assert "not readable" in watchdog.summary_lines(section)[1]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A process whose command line turns vLLM's watchdog on, with a dump dir beside it."""
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    config = f'{{"dump_dir": "{dumps}", "timeout": 300}}'
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "--watchdog-config", config]
    )
    try:
        yield child, dumps
    finally:
        child.kill()
        child.wait(timeout=10)


async def test_a_capture_carries_the_dumps_redacted_and_summary_names_them(
    server: tuple[subprocess.Popen[bytes], Path], tmp_path: Path
) -> None:
    child, dumps = server
    leaked = f"Authorization: Bearer {corpus.ENV['GITHUB_PAT']}"
    _dump(dumps, "engine", 0, child.pid, f">>> Call stack dump #1\n{leaked}\nstuck()\n", age=2)
    _dump(dumps, "engine", 0, child.pid + 1, "an older server's dump\n", age=1)
    context = DiagnosticsContext(
        trigger=Trigger("engine-hang", "engine hang: no progress for 15s"),
        process_match=ProcessMatch(titles=(), cmdlines=("--watchdog-config",), roots=(child.pid,)),
        gpu_enabled=False,
        cpu_window_s=0.0,
        budget_s=5.0,
        py_spy=str(tmp_path / "no-py-spy"),
        cgroup_root=tmp_path / "no-cgroup",
    )
    incident = await capture(context)
    section = incident.bundle["watchdog"]
    assert [f["pid"] for f in section["files"]] == [child.pid]
    assert "stuck()" in section["files"][0]["text"]
    assert corpus.ENV["GITHUB_PAT"] not in str(incident.bundle)
    assert "vllm watchdog" in incident.summary
    assert f"engine 0 pid {child.pid}" in incident.summary
