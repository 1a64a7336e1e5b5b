"""A kubelet for the chaos harness: it really kills and restarts the server it supervises.

sentinel's promise is not only that a hung server gets killed but that the
server started in its place is let live, and that only shows with a real
restart: the same port, a model load during which the port refuses
connections, new processes, and sentinel running on throughout like the
native sidecar it is. :mod:`chaos.prober` cannot show it (it kills nothing);
this runs the kubelet's rules (:mod:`chaos.kubelet_state`) against a real
process group and sentinel's real endpoints.

Killing is done the way a container runtime does it: SIGTERM to the
container's main process only, SIGKILL to every process of the group once the
grace period is over or the main process has gone (a container's processes do
not outlive its PID 1). The probes open a fresh connection each time and
send the kubelet's User-Agent, as the kubelet does.

Example (the shipped manifest's probes, five times faster)::

    settings = KubeletSettings.from_manifest().scaled(0.2)
    async with Kubelet(sim_command(port, control_port), sidecar.url, settings) as kubelet:
        await kubelet.wait_for("ready", within=30)
        ...
        assert kubelet.restarts == 1
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

import httpx

from chaos.kubelet_state import (
    POD_DELETED,
    Event,
    KubeletSettings,
    KubeletState,
    ProbeSpec,
    timeline,
)

__all__ = ["USER_AGENT", "Check", "Kubelet", "load_wrapper", "sim_command"]

USER_AGENT = "kube-probe/1.30"

#: A probe of the caller's own (a liveness endpoint backed by something other than
#: HTTP at ``probe_url``): it gets the probe's spec and answers (passed, detail).
Check = Callable[[ProbeSpec], Awaitable[tuple[bool, str]]]

# Sleeps (the model load: nothing listens yet), then becomes the server, keeping the PID.
_LOAD = "import os, sys, time; time.sleep(float(sys.argv[1])); os.execvp(sys.argv[2], sys.argv[2:])"


def load_wrapper(load_time: float, command: Sequence[str]) -> list[str]:
    """``command`` started ``load_time`` seconds late, in the same process."""
    return [sys.executable, "-c", _LOAD, f"{load_time:g}", *command]


def sim_command(
    port: int,
    control_port: int,
    *,
    startup_delay: float = 0.0,
    host: str = "127.0.0.1",
    extra: Sequence[str] = (),
) -> list[str]:
    """The simulated vLLM on fixed ports; ``startup_delay`` is its model load (port closed)."""
    return [
        sys.executable,
        "-m",
        "sentinel_sim",
        *("--host", host, "--port", str(port)),
        *("--control-host", host, "--control-port", str(control_port)),
        *("--startup-delay", f"{startup_delay:g}"),
        *extra,
    ]


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


class Kubelet:
    """Runs ``command`` as the pod's vllm container, probing sentinel at ``probe_url``.

    ``events`` is the timeline (monotonic seconds); ``restarts`` the restart
    count. ``load_time`` starts each container through :func:`load_wrapper`.
    ``restart_sidecar``, where given, restarts sentinel and returns its new
    URL; only :meth:`restart_sidecar` calls it: sentinel's restarts are not
    the container's. ``checks`` replace the httpGet of a probe kind with the
    caller's :data:`Check`; ``before_start`` runs before each container
    starts (with its number: 0 the first); ``popen`` adds keyword arguments
    to the container's process creation (``cwd``, ``preexec_fn``).
    """

    def __init__(
        self,
        command: Sequence[str],
        probe_url: str,
        settings: KubeletSettings | None = None,
        *,
        load_time: float = 0.0,
        env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
        shutdown_grace: float = 5.0,
        restart_sidecar: Callable[[], Awaitable[str]] | None = None,
        checks: Mapping[str, Check] | None = None,
        before_start: Callable[[int], Awaitable[None]] | None = None,
        popen: Mapping[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.command = load_wrapper(load_time, command) if load_time > 0 else list(command)
        self.probe_url = probe_url.rstrip("/")
        self.settings = settings or KubeletSettings.from_manifest()
        self.state = KubeletState(self.settings)
        self.events: list[Event] = []
        self.env = {**os.environ, **env} if env else None
        self.log_path = log_path
        self.shutdown_grace = shutdown_grace
        self.clock = clock
        self._restart_sidecar = restart_sidecar
        self._checks = dict(checks or {})
        self._before_start = before_start
        self._popen = dict(popen or {})
        self._client: httpx.AsyncClient | None = None
        self._log: IO[bytes] | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._kill: asyncio.Future[Event] | None = None
        # Set when a container's startup succeeds: the readiness worker probes at once.
        self._readiness_now = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.pod_start = clock()  # the probes' ticks count from here (set again on start)

    # -- what callers use ------------------------------------------------------

    @property
    def restarts(self) -> int:
        return self.state.restarts

    @property
    def ready(self) -> bool:
        return self.state.ready

    @property
    def pid(self) -> int | None:
        """The running container's main process, if one runs."""
        proc = self._proc
        return proc.pid if proc is not None and proc.returncode is None else None

    def note(self, kind: str, detail: str = "", /, **data: float) -> Event:
        """Put the caller's own moment (a fault, a figure) on the timeline."""
        event = Event(self.clock(), kind, self.state.container, detail=detail, data=dict(data))
        self.events.append(event)
        return event

    def of(
        self, kind: str, *, container: int | None = None, probe: str | None = None
    ) -> list[Event]:
        return [
            e
            for e in self.events
            if e.kind == kind
            and (container is None or e.container == container)
            and (probe is None or e.probe == probe)
        ]

    async def wait_for(
        self,
        kind: str,
        *,
        within: float,
        container: int | None = None,
        probe: str | None = None,
        count: int = 1,
    ) -> Event:
        """The ``count``-th event of ``kind`` (polled); TimeoutError with the timeline if late."""
        deadline = self.clock() + within
        while len(found := self.of(kind, container=container, probe=probe)) < count:
            if self._task is not None and self._task.done():
                self._task.result()  # the supervisor itself failed: say why
            if self.clock() > deadline:
                raise TimeoutError(
                    f"no {kind!r} event (container {container}, probe {probe}) within "
                    f"{within:g}s:\n{self.timeline()}"
                )
            await asyncio.sleep(0.05)
        return found[count - 1]

    def timeline(self) -> str:
        return timeline(self.events)

    def kill(self, reason: str, by: str = "") -> bool:
        """Kill the running container as a probe failure would (an alert's restart, say).

        False when no container runs or one is already being killed.
        """
        events = self.state.kill(self.clock(), reason, by)
        self._record(events)
        return bool(events)

    @property
    def phase(self) -> str:
        """The container's phase: waiting, starting, running or terminating."""
        return self.state.phase.value

    async def restart_sidecar(self) -> str:
        """Restart sentinel through the caller's hook; the container is left alone."""
        if self._restart_sidecar is None:
            raise RuntimeError("no restart_sidecar hook was given")
        self.note("sidecar_restart", self.probe_url)
        self.probe_url = (await self._restart_sidecar()).rstrip("/")
        self.note("sidecar_started", self.probe_url)
        return self.probe_url

    # -- lifecycle -------------------------------------------------------------

    async def __aenter__(self) -> Self:
        self._client = httpx.AsyncClient(
            limits=httpx.Limits(max_keepalive_connections=0),
            headers={"User-Agent": USER_AGENT, "Accept": "*/*"},
        )
        if self.log_path is not None:
            self._log = await asyncio.to_thread(self.log_path.open, "ab")
        self._task = asyncio.get_running_loop().create_task(self._run(), name="kubelet")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def stop(self) -> None:
        """Stop supervising and kill the container (the pod is deleted); idempotent.

        A supervisor that had failed raises its error here, after the cleanup.
        """
        task, self._task = self._task, None
        try:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        finally:
            await self._delete_pod()

    async def _delete_pod(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.returncode is None:
                self.events += self.state.kill(self.clock(), POD_DELETED, grace=self.shutdown_grace)
                await self._terminate(proc, self.shutdown_grace)
            _signal_group(proc.pid, signal.SIGKILL)
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        if self._log is not None:
            self._log.close()
            self._log = None

    # -- the kubelet's loop ----------------------------------------------------

    def _record(self, events: Sequence[Event]) -> None:
        self.events += events
        for event in events:
            if event.kind == "kill" and self._kill is not None and not self._kill.done():
                self._kill.set_result(event)
            elif event.kind == "started":
                self._readiness_now.set()

    async def _run(self) -> None:
        pod_start = self.pod_start = self.clock()
        probes = [
            asyncio.create_task(self._probe_loop(kind, spec, pod_start), name=f"probe-{kind}")
            for kind, spec in self.settings.probes()
        ]
        try:
            while True:
                await self._run_container()
        finally:
            for task in probes:
                task.cancel()
            await asyncio.gather(*probes, return_exceptions=True)

    async def _run_container(self) -> None:
        """Start the container, wait for its end (by itself or by a kill), then the back-off."""
        output = self._log if self._log is not None else subprocess.DEVNULL
        if self._before_start is not None:
            await self._before_start(self.state.container + 1)
        proc = await asyncio.create_subprocess_exec(
            *self.command,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=output,
            start_new_session=True,
            env=self.env,
            **self._popen,
        )
        self._proc = proc
        self._kill = asyncio.get_running_loop().create_future()
        self._record(self.state.start(self.clock()))
        returncode = await self._until_ended(proc, self._kill)
        _signal_group(proc.pid, signal.SIGKILL)  # the container's other processes
        events, start_at = self.state.exited(self.clock(), returncode)
        self._record(events)
        self._proc = None
        await asyncio.sleep(max(0.0, start_at - self.clock()))

    async def _until_ended(
        self, proc: asyncio.subprocess.Process, kill: asyncio.Future[Event]
    ) -> int:
        exited = asyncio.ensure_future(proc.wait())
        try:
            either: list[asyncio.Future[Any]] = [exited, kill]
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if not exited.done():
                await self._terminate(proc, kill.result().data["grace"])
            return await exited
        finally:
            exited.cancel()

    async def _terminate(self, proc: asyncio.subprocess.Process, grace: float) -> None:
        """SIGTERM to the main process; SIGKILL to the group after ``grace`` if it lives on."""
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), grace)
        except TimeoutError:
            self.events.append(
                Event(self.clock(), "sigkill", self.state.container, detail=f"after {grace:g}s")
            )
            _signal_group(proc.pid, signal.SIGKILL)
            await proc.wait()

    async def _probe_loop(self, kind: str, spec: ProbeSpec, pod_start: float) -> None:
        """Probe on the period's ticks; a slow probe skips the ticks it overran, as a Go ticker.

        Readiness is also probed the moment a container's startup succeeds: the
        kubelet's ``UpdatePodStatus`` (pkg/kubelet/prober/prober_manager.go)
        triggers an immediate run of a started container's readiness probe
        that has not succeeded yet, on the pod sync the startup result causes.

        The ticks run from the pod's start across restarts, as a kubelet probe
        worker's do, so a restarted container's first probe comes anywhere
        within one period of its start.
        """
        tick = 0
        while True:
            wait = max(0.0, pod_start + tick * spec.period - self.clock())
            if kind == "readiness":
                await _sleep_or(self._readiness_now, wait)
                self._readiness_now.clear()
            else:
                await asyncio.sleep(wait)
            container = self.state.container
            if self.state.due(kind, self.clock()):
                check = self._checks.get(kind, self._probe)
                ok, detail = await check(spec)
                self._record(self.state.feed(kind, self.clock(), ok, detail, container))
            tick = math.floor((self.clock() - pod_start) / spec.period) + 1

    async def _probe(self, spec: ProbeSpec) -> tuple[bool, str]:
        """An httpGet probe: 200..399 passes; any other status, an error or a timeout fails."""
        assert self._client is not None
        try:
            async with asyncio.timeout(spec.timeout):
                response = await self._client.get(self.probe_url + spec.path, timeout=spec.timeout)
        except (TimeoutError, httpx.TimeoutException):
            return False, f"timeout after {spec.timeout:g}s"
        except httpx.HTTPError as exc:
            return False, type(exc).__name__
        return 200 <= response.status_code < 400, str(response.status_code)


async def _sleep_or(event: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or less when ``event`` is set first."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)
