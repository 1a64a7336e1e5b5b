"""``sentinel exporter`` as a subprocess on a free port, for loopback tests and the benchmark.

The exporter is started with ``--listen 127.0.0.1:0`` and JSON logs into a
file; its ``exporter_listening`` line names the URL it bound. Stopped with
SIGTERM on exit (its exit status is kept for tests of a clean shutdown).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml


class ExporterProcess:
    def __init__(self, config: dict[str, Any], startup_timeout: float = 30.0) -> None:
        self.config = {**config, "listen": "127.0.0.1:0"}
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.returncode: int | None = None
        self._dir = tempfile.TemporaryDirectory(prefix="sentinel-exporter-")
        self.log_path = Path(self._dir.name) / "exporter.log"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def __enter__(self) -> ExporterProcess:
        config_path = Path(self._dir.name) / "exporter.yaml"
        config_path.write_text(yaml.safe_dump(self.config), encoding="utf-8")
        root = Path(__file__).resolve().parent.parent
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    *(sys.executable, "-m", "sentinel", "exporter"),
                    *("--config", str(config_path), "--log-format", "json"),
                ],
                cwd=root,
                stdout=subprocess.DEVNULL,
                stderr=log,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        deadline = time.monotonic() + self.startup_timeout
        while not self.url:
            self.url = self._listening()
            if self.url:
                break
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"exporter did not start: {self.log_path.read_text()[-2000:]}")
            time.sleep(0.05)
        return self

    def _listening(self) -> str:
        for line in self.log_path.read_text(encoding="utf-8", errors="replace").splitlines():
            if '"exporter_listening"' in line:
                return str(json.loads(line)["url"])
        return ""

    def stop(self) -> int | None:
        if self.process is None or self.returncode is not None:
            return self.returncode
        self.process.terminate()
        try:
            self.returncode = self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.returncode = self.process.wait()
        return self.returncode

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
        self._dir.cleanup()
