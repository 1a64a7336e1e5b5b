"""The shipped pod's shape on one host: ``sentinel run`` as uid 10001 beside a root server.

The base manifest runs sentinel as uid/gid 10001 with every capability
dropped, ``allowPrivilegeEscalation: false`` (the kernel's no_new_privs) and a
read-only root filesystem (writable: ``/tmp`` and the diagnostics volume),
while vLLM images run as root. Tests run as root, so the sidecar is started
under another uid here:

- ``setpriv --reuid=10001 --regid=10001 --clear-groups --no-new-privs
  --bounding-set=-all --inh-caps=-all`` runs the venv's interpreter itself
  (the interpreter may live under a root-only directory, where a console
  script's shebang would fail);
- where the machine allows a private mount namespace (``unshare -m``), every
  mount but ``/proc`` and ``/sys`` is remounted read-only in it (per mount
  point: ``remount,bind,ro`` never touches the host's filesystems) and only
  the sidecar's temporary directory and diagnostics directory are bound
  writable; a write anywhere else fails with EROFS, which the tests look for
  in the sidecar's log;
- in every case, the directories uid 10001 could write to (world-writable ones
  and its own) are searched after each run for anything it created outside
  those two directories.

Every process started here is stopped by its whole process group.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.loopback.sidecar import FAST

UID = 10001
REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
BASE_PREFIX = "sentinel-nonroot-"
# The base manifest's securityContext, as setpriv options.
SHIPPED = ("--no-new-privs", "--bounding-set=-all", "--inh-caps=-all")
# Shortened for the test (the defaults are 5 s, 1 s, 0.5 s and 30 s): the bounds
# the tests assert are computed from these.
SETTINGS: dict[str, Any] = {
    **FAST,
    "grpc_listen": "off",
    "dead_grace": 1.5,
    "process_interval": 0.5,
    "eval_interval": 0.25,
    "listener_grace": 3.0,
    "log_format": "json",
}
EROFS = "Read-only file system"


def as_other_user(argv: Sequence[str], options: Sequence[str] = SHIPPED, **env: str) -> list[str]:
    """``argv`` as uid 10001 with a clean environment (the variables set before setpriv)."""
    base = {"HOME": "/nonexistent", "PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    variables = [f"{k}={v}" for k, v in {**base, **env}.items()]
    ids = [f"--reuid={UID}", f"--regid={UID}", "--clear-groups"]
    return ["env", "-i", *variables, "setpriv", *ids, *options, *argv]


def run_as_other_user(
    argv: Sequence[str], options: Sequence[str] = SHIPPED, timeout: float = 60.0, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        as_other_user(argv, options, **env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd="/",
        check=False,
    )


# Every mount read-only in a private namespace but the kernel's own, then the
# writable directories bound on themselves (a bind copies the read-only flag, so
# each is made writable again), then the command.
_READ_ONLY = r"""
set -e
awk '{print $5}' /proc/self/mountinfo | grep -v -E '^/(proc|sys)(/|$)' | while read -r mp; do
  mount -o remount,bind,ro "$mp"
done
for dir in "$@"; do
  [ "$dir" = -- ] && break
  mount --bind "$dir" "$dir" && mount -o remount,bind,rw "$dir"
done
while [ "$1" != -- ]; do shift; done
shift
exec "$@"
"""


def read_only_root(writable: Sequence[Path], argv: Sequence[str]) -> list[str]:
    """``argv`` in a private mount namespace whose every mount is read-only but ``writable``."""
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        _READ_ONLY,
        "sh",
        *map(str, writable),
        "--",
        *argv,
    ]


def private_mounts_allowed() -> str:
    """ "" where a read-only private mount namespace can be made here, else why not."""
    probe = Path(tempfile.mkdtemp(prefix=BASE_PREFIX))
    try:
        done = subprocess.run(
            read_only_root([probe], ["sh", "-c", f"touch {probe}/ok && ! touch /rootfs-probe"]),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if done.returncode == 0 and (probe / "ok").exists():
            return ""
        return f"unshare --mount: exit {done.returncode}: {done.stderr.strip()[-300:]}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare --mount: {exc}"
    finally:
        shutil.rmtree(probe, ignore_errors=True)


def writable_dirs() -> list[Path]:
    """Every directory uid 10001 could create a file in: world-writable, or its own."""
    found = subprocess.run(
        ["find", "/", "(", "-path", "/proc", "-o", "-path", "/sys", ")", "-prune", "-o",
         "-type", "d", "(", "-perm", "-0002", "-o", "-uid", str(UID), "-o", "-gid", str(UID),
         ")", "-print"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    dirs = [Path(line) for line in found.stdout.splitlines() if line]
    return [d for d in dirs if not d.name.startswith(BASE_PREFIX)]


def written_by_other_user(dirs: Sequence[Path], since: Path, allowed: Sequence[Path]) -> list[str]:
    """Files and directories uid 10001 created under ``dirs`` after ``since``, outside ``allowed``.

    Other sessions' sandboxes (the same prefix) are left out: they may run at once.
    """
    if not dirs:
        return []
    found = subprocess.run(
        ["find", *map(str, dirs), "-xdev", "-uid", str(UID), "-newer", str(since), "-print"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return [
        path
        for path in found.stdout.splitlines()
        if path
        and not any(part.startswith(BASE_PREFIX) for part in Path(path).parts)
        and not any(Path(path).is_relative_to(a) for a in allowed)
    ]


@dataclass
class Sandbox:
    """The sidecar's writable places (``tmp`` and ``diag``, owned by 10001) and its config."""

    root: Path
    tmp: Path
    diag: Path
    etc: Path

    @classmethod
    def create(cls) -> Sandbox:
        root = Path(tempfile.mkdtemp(prefix=BASE_PREFIX))
        root.chmod(0o755)
        box = cls(root, root / "tmp", root / "diag", root / "etc")
        for d in (box.tmp, box.diag):
            d.mkdir(mode=0o700)
            os.chown(d, UID, UID)
        box.etc.mkdir(mode=0o755)
        return box

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class NonRootSentinel:
    """``sentinel run`` as uid 10001, in the shipped shape, against ``target``."""

    target: str
    sandbox: Sandbox
    port: int
    read_only: bool
    writable: Sequence[Path] = ()
    options: Sequence[str] | None = SHIPPED  # None: as root, like the server (for comparison)
    overrides: dict[str, Any] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.sandbox.root / "sentinel.log"  # written by the test, not by sentinel

    @property
    def marker(self) -> Path:
        return self.sandbox.root / "started"

    def settings(self) -> dict[str, Any]:
        return {
            **SETTINGS,
            "target": self.target,
            "listen": f"127.0.0.1:{self.port}",
            "diagnostics_dir": str(self.sandbox.diag),
            **self.overrides,
        }

    def start(self) -> NonRootSentinel:
        config = self.sandbox.etc / "sentinel.yaml"
        config.write_text(yaml.safe_dump(self.settings()))
        config.chmod(0o644)
        self.marker.touch()
        run = [PYTHON, "-m", "sentinel", "run", "--config", str(config)]
        tmp = str(self.sandbox.tmp)
        if self.options is None:
            argv = ["env", "-i", "HOME=/nonexistent", "PATH=/usr/bin:/bin", f"TMPDIR={tmp}", *run]
        else:
            argv = as_other_user(run, self.options, TMPDIR=tmp)
        if self.read_only:
            argv = read_only_root([self.sandbox.tmp, self.sandbox.diag], argv)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd="/",
                start_new_session=True,
            )  # fmt: skip
        self.started = time.monotonic()
        try:
            poll(lambda: self.get("/healthz").status_code == 200, 30.0, "sentinel answering")
        except BaseException:
            self.stop()
            raise
        return self

    def get(self, path: str) -> httpx.Response:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"sentinel exited {self.proc.returncode}:\n{self.log()[-3000:]}")
        try:
            return httpx.get(self.url + path, timeout=3.0)
        except httpx.HTTPError as exc:
            return httpx.Response(599, text=str(exc))

    def status(self) -> dict[str, Any]:
        response = self.get("/status")
        return response.json() if response.status_code == 200 else {}

    def attribution(self) -> dict[str, Any]:
        return (self.status().get("evidence") or {}).get("process_attribution") or {}

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_events(self, name: str) -> list[dict[str, Any]]:
        events = []
        for line in self.log().splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict) and event.get("event") == name:
                    events.append(event)
        return events

    def stop(self) -> None:
        proc = self.proc
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):  # diagnostics children left behind
            os.killpg(proc.pid, signal.SIGKILL)
        self.proc = None

    def writes_outside(self) -> list[str]:
        """What it wrote outside its temporary and diagnostics directories (EROFS included)."""
        found = written_by_other_user(
            self.writable, self.marker, [self.sandbox.tmp, self.sandbox.diag]
        )
        return found + [line for line in self.log().splitlines() if EROFS in line]

    def bundles(self) -> list[dict[str, Any]]:
        return [
            json.loads(path.read_text()) for path in sorted(self.sandbox.diag.glob("*/bundle.json"))
        ]


def poll(
    check: Callable[[], bool],
    deadline: float,
    what: str | Callable[[], str],
    interval: float = 0.02,
) -> float:
    """Seconds until ``check()`` holds; fails after ``deadline`` seconds saying ``what``."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > deadline:
            said = what if isinstance(what, str) else what()
            raise AssertionError(f"not within {deadline:g} s: {said}")
        time.sleep(interval)
    return time.monotonic() - start


@contextlib.contextmanager
def nonroot_sentinel(
    target: str,
    *,
    read_only: bool,
    writable: Sequence[Path],
    port: int,
    options: Sequence[str] | None = SHIPPED,
    **overrides: Any,
) -> Iterator[NonRootSentinel]:
    """``sentinel run`` as uid 10001 (``options=None``: as root) for the ``with`` block."""
    box = Sandbox.create()
    sidecar = NonRootSentinel(target, box, port, read_only, writable, options, overrides)
    try:
        yield sidecar.start()
    finally:
        sidecar.stop()
        box.remove()


def doctor_table(stdout: str) -> dict[str, str]:
    """``sentinel doctor``'s table: finding -> the row's whole text (wrapped cells joined)."""
    rows: list[list[str]] = []
    for line in stdout.splitlines():
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        if len(cells) != 4:
            continue
        if cells[0]:
            rows.append(cells)
        elif rows:
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
    return {finding: " ".join([area, result, finding, why]) for area, result, finding, why in rows}
