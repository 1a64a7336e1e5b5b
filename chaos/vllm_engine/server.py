"""Start, watch, signal and stop a real vLLM OpenAI server from the engine environment.

The server runs ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm``
console script of the CPU build looks up a distribution named ``vllm`` and
fails) with ``--scheduling-policy priority`` and ``-O0`` (no torch.compile:
ready in half the time), on a port picked free on 127.0.0.1 (kept across
:meth:`VllmServer.restart`), with no model hub and the chaos plugin's fault
directory in its environment.

vLLM runs three kinds of process, found by their titles: the API server (the
process started here), ``VLLM::EngineCore`` (its child) and ``VLLM::Worker``
(the engine's child). :meth:`VllmServer.stop` always ends all of them: stopped
ones are continued first, the session (process group) started here is killed,
and every descendant seen is killed as well.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import psutil

from chaos.ports import free_port
from chaos.vllm_engine.faults import FAULT_DIR_ENV, FaultSwitch

SERVE_CLI = Path(__file__).with_name("serve_cli.py")
ENGINE_TITLE = "VLLM::EngineCore"
API_TITLE = "VLLM::APIServer"
WORKER_TITLE = "VLLM::Worker"
STOP_GRACE = 10.0
_PR_SET_PDEATHSIG = 1


class ServerError(RuntimeError):
    """The server exited or missed its deadline; the message carries its log's tail."""


def _die_with_parent() -> None:
    """Runs in the child before exec: the kernel kills it if its parent dies."""
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _prepare_child(cpus: frozenset[int] | None) -> None:
    """Before exec: die with the caller (no orphaned server), and stay on ``cpus``."""
    _die_with_parent()
    if cpus is not None:
        os.sched_setaffinity(0, cpus)


def engine_cpus() -> frozenset[int] | None:
    """The CPUs the server may use: all but the last one, when there are two or more.

    In a pod vLLM and sentinel are separate containers with CPU of their own.
    On a small test machine vLLM's CPU backend binds spinning OpenMP threads
    to every core and its idle worker busy-waits, starving everything else, so
    the harness (sentinel, probers, load) would measure its own starvation.
    Confining vLLM to all but one CPU keeps that CPU for the harness.
    """
    cpus = sorted(os.sched_getaffinity(0))
    return frozenset(cpus[:-1]) if len(cpus) >= 2 else None


def port_bindable(port: int) -> bool:
    """Whether a server could listen on ``port`` now (connections in TIME_WAIT do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def process_title(process: psutil.Process) -> str:
    """A process's full title: its command line when vLLM titled it, else its name."""
    line = " ".join(process.cmdline()).strip()
    return line if line.startswith("VLLM::") else process.name()


class VllmServer:
    """One real vLLM server process tree; a context manager that always cleans up."""

    def __init__(
        self,
        python: Path,
        model: Path,
        *,
        served_model_name: str,
        fault_dir: Path,
        log_path: Path,
        scheduling_policy: str = "priority",
        extra_args: Sequence[str] = (),
        kv_cache_gib: int = 1,
        environment: Mapping[str, str] | None = None,
        api_server_count: int = 1,
    ) -> None:
        self.python = python
        self.api_server_count = api_server_count
        self.model = model
        self.served_model_name = served_model_name
        self.faults = FaultSwitch(fault_dir)
        self.log_path = log_path
        self.scheduling_policy = scheduling_policy
        self.extra_args = tuple(extra_args)
        self.kv_cache_gib = kv_cache_gib
        #: Set last, over the defaults (``VLLM_CPU_OMP_THREADS_BIND`` per rank for
        #: tensor parallelism, ``"0|0"``: one group per rank).
        self.environment = dict(environment or {})
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._seen: dict[int, psutil.Process] = {}

    # -- lifecycle -----------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_pid(self) -> int:
        if self._process is None:
            raise ServerError("server not started")
        return self._process.pid

    def command(self) -> list[str]:
        # Several API servers take vLLM's own `vllm serve` path (serve_cli.py).
        entry = (
            ["-m", "vllm.entrypoints.openai.api_server"]
            if self.api_server_count == 1
            else [str(SERVE_CLI), "--api-server-count", str(self.api_server_count)]
        )
        return [
            str(self.python),
            *entry,
            "--model",
            str(self.model),
            "--served-model-name",
            self.served_model_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--scheduling-policy",
            self.scheduling_policy,
            "-O0",
            "--seed",
            "0",
            *self.extra_args,
        ]

    def start(self) -> None:
        if self._process is not None:
            raise ServerError("server already started")
        if not self.port or not port_bindable(self.port):
            self.port = free_port()
        env, popen = self.spawn_options()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log.write(f"\n$ {' '.join(self.command())}\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                **popen,
            )

    def spawn_options(self) -> tuple[dict[str, str], dict[str, Any]]:
        """The server's environment, and its working directory and CPU pinning (Popen keywords).

        What :meth:`start` uses; a supervisor that starts :meth:`command` itself
        (the chaos harness's kubelet) takes the same.
        """
        env = dict(os.environ)
        env.update(
            {
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib),
                "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1",
                FAULT_DIR_ENV: str(self.faults.directory),
            }
        )
        env.pop("PYTHONPATH", None)  # nothing of the project's own environment leaks in
        cpus = engine_cpus()
        if cpus is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(str(c) for c in sorted(cpus))
        env.update(self.environment)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        return env, {"cwd": self.log_path.parent, "preexec_fn": partial(_prepare_child, cpus)}

    def wait_ready(self, deadline_s: float = 240.0) -> float:
        """Poll ``/v1/models``, then get one completion; return seconds since called."""
        started = time.monotonic()
        deadline = started + deadline_s
        with httpx.Client(base_url=self.base_url, timeout=5.0) as client:
            while True:
                self._check_alive()
                self._remember_tree()
                try:
                    if client.get("/v1/models").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise ServerError(f"no /v1/models within {deadline_s} s{self.log_tail()}")
                time.sleep(0.25)  # polling the server's port with a deadline
            self._remember_tree()
            reply = self.complete(client, timeout=max(deadline - time.monotonic(), 1.0))
            if reply is None:
                raise ServerError(f"first completion failed{self.log_tail()}")
        return time.monotonic() - started

    def complete(self, client: httpx.Client, timeout: float = 10.0) -> dict[str, Any] | None:
        """One small top-priority chat completion; the reply, or ``None`` on any failure."""
        body = {
            "model": self.served_model_name,
            "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": 2,
            "priority": -100,
        }
        try:
            response = client.post("/v1/chat/completions", json=body, timeout=timeout)
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        reply: dict[str, Any] = response.json()
        return reply

    def stop(self) -> None:
        """End the whole process tree (continue, kill, reap); safe to call repeatedly."""
        process = self._process
        if process is None:
            return
        self._remember_tree()
        tree = list(self._seen.values())
        for member in tree:
            with contextlib.suppress(psutil.Error):
                member.send_signal(signal.SIGCONT)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGCONT)
        if process.poll() is None:
            process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=STOP_GRACE)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        for member in tree:
            with contextlib.suppress(psutil.Error):
                member.kill()
        psutil.wait_procs(tree, timeout=STOP_GRACE)
        if process.poll() is None:
            process.kill()
        process.wait(timeout=STOP_GRACE)
        self._process = None
        self._seen.clear()

    def restart(self, deadline_s: float = 240.0) -> float:
        """Stop and start again on the same port (a new one only if it was taken meanwhile),
        as a restarted container keeps its address: a sidecar watching it follows."""
        self.stop()
        self.start()
        return self.wait_ready(deadline_s)

    def __enter__(self) -> VllmServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- processes -----------------------------------------------------------------------

    def wait(self) -> int:
        """Block until the API server exits; its exit code."""
        if self._process is None:
            raise ServerError("server not started")
        return self._process.wait()

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.api_pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def processes(self, title: str) -> list[psutil.Process]:
        """Descendants of the API server whose process title is exactly ``title``.

        The title is read from the command line (``setproctitle`` rewrites it, padded
        with blanks): the kernel's 15-character name cuts ``VLLM::Worker_TP1`` to
        ``VLLM::Worker_TP``, which would match every tensor-parallel rank.
        """
        found = []
        for child in self.descendants():
            with contextlib.suppress(psutil.Error):
                if process_title(child) == title:
                    found.append(child)
        return found

    def engine_core(self) -> psutil.Process:
        return self._one(ENGINE_TITLE)

    def worker(self) -> psutil.Process:
        return self._one(WORKER_TITLE)

    def signal(self, title: str, signum: signal.Signals) -> list[int]:
        """Send ``signum`` to every process titled ``title``; return their pids."""
        processes = self.processes(title)
        if not processes:
            raise ServerError(f"no {title} process under API server {self.api_pid}")
        for process in processes:
            process.send_signal(signum)
        return [p.pid for p in processes]

    def resume_all(self) -> list[int]:
        """SIGCONT every stopped process of the tree; return their pids."""
        resumed = []
        for process in [psutil.Process(self.api_pid), *self.descendants()]:
            with contextlib.suppress(psutil.Error):
                if process.status() == psutil.STATUS_STOPPED:
                    process.send_signal(signal.SIGCONT)
                    resumed.append(process.pid)
        return resumed

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return ""
        return f"\n--- {self.log_path} (last {lines} lines) ---\n" + "\n".join(text)

    def _one(self, title: str) -> psutil.Process:
        found = self.processes(title)
        if len(found) != 1:
            raise ServerError(f"expected one {title} process, found {len(found)}")
        return found[0]

    def _check_alive(self) -> None:
        if self._process is not None and self._process.poll() is not None:
            code = self._process.returncode
            raise ServerError(f"vLLM exited with {code} before it was ready{self.log_tail()}")

    def _remember_tree(self) -> None:
        """Record descendants so that :meth:`stop` can kill even reparented ones."""
        for child in self.descendants():
            self._seen.setdefault(child.pid, child)


@contextlib.contextmanager
def running_server(server: VllmServer, deadline_s: float = 240.0) -> Iterator[VllmServer]:
    """Start ``server``, wait until it answers, and always stop it."""
    try:
        server.start()
        server.wait_ready(deadline_s)
        yield server
    finally:
        server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Build what is missing, start a server, report start-to-first-answer, then stop it
    (or keep serving until interrupted with ``--serve``)."""
    import argparse
    import json
    import tempfile

    from chaos.vllm_engine import env as engine_env

    parser = argparse.ArgumentParser(description="Run a real vLLM on a tiny generated model.")
    parser.add_argument("--model", choices=engine_env.MODEL_KINDS, default="vision")
    parser.add_argument("--scheduling-policy", choices=("priority", "fcfs"), default="priority")
    parser.add_argument("--serve", action="store_true", help="keep serving until Ctrl-C")
    args, extra = parser.parse_known_args(argv)
    env = engine_env.ensure_env()
    model = engine_env.ensure_model(env, args.model)
    work = Path(tempfile.mkdtemp(prefix="sentinel-vllm-"))
    server = VllmServer(
        env.python,
        model,
        served_model_name=f"tiny-{args.model}",
        fault_dir=work / "faults",
        log_path=work / "vllm.log",
        scheduling_policy=args.scheduling_policy,
        extra_args=extra,
    )
    with server:
        seconds = server.wait_ready()
        report = {
            "base_url": server.base_url,
            "model": server.served_model_name,
            "api_pid": server.api_pid,
            "fault_dir": str(server.faults.directory),
            "log": str(server.log_path),
            "start_to_first_answer_s": round(seconds, 1),
        }
        print(json.dumps(report), flush=True)
        if args.serve:
            with contextlib.suppress(KeyboardInterrupt):
                server.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
