"""The process watcher against real processes titled like vLLM's, and its pure parts."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator

import psutil
import pytest

from chaos.ports import free_port
from sentinel.diagnostics import procs
from sentinel.evidence.process_model import (
    GONE_STATES,
    Attribution,
    ProcessPatterns,
    ProcessRole,
    ProcessSnapshot,
    ProcessState,
    SchedulingPolicy,
    process_state,
    scheduling_policy,
)
from sentinel.evidence.processes import ProcessWatcher
from sentinel_sim.launch import SimProcess

DEADLINE = 15.0
API_MODULE = "vllm.entrypoints.openai.api_server"

# The engine sets its title like vLLM's EngineCore and starts a worker titled
# like vLLM's; the API-like parent reaps the engine only when told (SIGUSR1),
# so a killed engine is first a zombie, then gone.
WORKER_SRC = """
import setproctitle, time
setproctitle.setproctitle("VLLM::Worker")
while True:
    time.sleep(1)
"""
ENGINE_SRC = f"""
import setproctitle, subprocess, sys, time
setproctitle.setproctitle("VLLM::EngineCore")
subprocess.Popen([sys.executable, "-c", {WORKER_SRC!r}])
while True:
    time.sleep(1)
"""


def api_src(engine_src: str) -> str:
    return f"""
import signal, subprocess, sys, time
engine = subprocess.Popen([sys.executable, "-c", {engine_src!r}])
signal.signal(signal.SIGUSR1, lambda *_: engine.wait())
print(engine.pid, flush=True)
while True:
    time.sleep(1)
"""


API_SRC = api_src(ENGINE_SRC)
# An engine that forks on SIGUSR2: the child stays the engine's copy (its title,
# no exec) for a second, as a compiler does until its exec, then exits.
FORKING_ENGINE_SRC = """
import os, setproctitle, signal, time
setproctitle.setproctitle("VLLM::EngineCore")
def fork(*_):
    if os.fork() == 0:
        time.sleep(1.0)
        os._exit(0)
signal.signal(signal.SIGUSR2, fork)
while True:
    time.sleep(0.05)
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        pass
"""


def kill_tree(pid: int) -> None:
    try:
        root = psutil.Process(pid)
        family = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    for proc in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(family, timeout=5)


class FakeVllm:
    """An API-like process with an engine child and a worker grandchild."""

    def __init__(self, *extra_args: str, engine_src: str = ENGINE_SRC) -> None:
        self.marker = f"sentinel-test-api-{uuid.uuid4().hex}"
        source = api_src(engine_src)
        self.api = subprocess.Popen(
            [sys.executable, "-c", source, "-m", API_MODULE, self.marker, *extra_args],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.api.stdout is not None
        self.engine_pid = int(self.api.stdout.readline())
        self.worker_pids: list[int] = []

    def watcher(self) -> ProcessWatcher:
        # Defaults for the engine and worker titles; the API server is matched
        # on this run's marker so no other vLLM-like process on the machine
        # can be picked instead.
        return ProcessWatcher(clock=lambda: 0.0, patterns=ProcessPatterns(api=(self.marker,)))

    def close(self) -> None:
        kill_tree(self.api.pid)
        for pid in [self.engine_pid, *self.worker_pids]:
            kill_tree(pid)
        self.api.wait(timeout=5)
        if self.api.stdout is not None:
            self.api.stdout.close()


@pytest.fixture
def fake_vllm() -> Iterator[FakeVllm]:
    fake = FakeVllm("--scheduling-policy=priority")
    try:
        yield fake
    finally:
        fake.close()


async def eventually(
    watcher: ProcessWatcher, predicate: Callable[[ProcessSnapshot], bool]
) -> ProcessSnapshot:
    loop = asyncio.get_running_loop()
    end = loop.time() + DEADLINE
    snapshot = await watcher.sample_async()
    while not predicate(snapshot):
        if loop.time() > end:
            pytest.fail(f"process table never matched; last snapshot: {snapshot}")
        await asyncio.sleep(0.05)
        snapshot = await watcher.sample_async()
    return snapshot


def engine_state(snapshot: ProcessSnapshot) -> ProcessState | None:
    return snapshot.engines[0].state if len(snapshot.engines) == 1 else None


async def test_engine_stop_kill_and_reap_are_seen(fake_vllm: FakeVllm) -> None:
    watcher = fake_vllm.watcher()
    snap = await eventually(watcher, lambda s: len(s.engines) == 1 and len(s.workers) == 1)
    fake_vllm.worker_pids = [w.pid for w in snap.workers]

    assert snap.api is not None
    assert snap.api.pid == fake_vllm.api.pid
    assert snap.api_identity == (fake_vllm.api.pid, psutil.Process(fake_vllm.api.pid).create_time())
    assert snap.scheduling_policy is SchedulingPolicy.PRIORITY
    (engine,) = snap.engines
    assert engine.pid == fake_vllm.engine_pid
    assert engine.role is ProcessRole.ENGINE_CORE
    assert engine.name.startswith("VLLM::EngineCor")
    assert snap.workers[0].role is ProcessRole.WORKER
    assert engine.state in {ProcessState.SLEEPING, ProcessState.RUNNING}

    os.kill(fake_vllm.engine_pid, signal.SIGSTOP)
    await eventually(watcher, lambda s: engine_state(s) is ProcessState.STOPPED)
    os.kill(fake_vllm.engine_pid, signal.SIGCONT)
    await eventually(
        watcher, lambda s: engine_state(s) in {ProcessState.SLEEPING, ProcessState.RUNNING}
    )

    os.kill(fake_vllm.engine_pid, signal.SIGKILL)
    await eventually(watcher, lambda s: engine_state(s) is ProcessState.ZOMBIE)
    # The orphaned worker still counts: it was seen behind this API server.
    snap = await watcher.sample_async()
    assert [w.pid for w in snap.workers] == fake_vllm.worker_pids
    assert snap.workers[0].state is not ProcessState.GONE

    os.kill(fake_vllm.api.pid, signal.SIGUSR1)  # the parent reaps its engine
    snap = await eventually(watcher, lambda s: engine_state(s) is ProcessState.GONE)
    assert snap.engines[0].pid == fake_vllm.engine_pid
    assert snap.api is not None


async def test_a_child_still_its_engines_copy_is_not_an_engine() -> None:
    """A compiler between its fork and its exec wears the engine's title: not an engine,
    so its exit a moment later is no engine gone (a Triton storm starts one after another)."""
    fake = FakeVllm(engine_src=FORKING_ENGINE_SRC)
    try:
        watcher = fake.watcher()
        await eventually(watcher, lambda s: len(s.engines) == 1)
        os.kill(fake.engine_pid, signal.SIGUSR2)
        engine = psutil.Process(fake.engine_pid)
        end = time.monotonic() + DEADLINE
        title = engine.cmdline()[:1]
        while not (forks := [c.pid for c in engine.children() if c.cmdline()[:1] == title]):
            assert time.monotonic() < end, "the engine never forked"
            await asyncio.sleep(0.02)
        during = await watcher.sample_async()
        assert [e.pid for e in during.engines] == [fake.engine_pid]
        end = time.monotonic() + DEADLINE
        while psutil.pid_exists(forks[0]):
            assert time.monotonic() < end, "the fork never ended"
            await asyncio.sleep(0.05)
        after = await watcher.sample_async()
        assert [(e.pid, e.state in GONE_STATES) for e in after.engines] == [
            (fake.engine_pid, False)
        ]
    finally:
        fake.close()


async def test_api_server_restart_and_absence(fake_vllm: FakeVllm) -> None:
    watcher = fake_vllm.watcher()
    first = await eventually(watcher, lambda s: s.api is not None and len(s.engines) == 1)
    fake_vllm.worker_pids = [w.pid for w in first.workers]

    kill_tree(fake_vllm.api.pid)
    gone = await eventually(watcher, lambda s: s.api is None)
    assert gone.scheduling_policy is None  # nothing visible: unknown, not fcfs
    # With no API server to anchor on, engines elsewhere on the host (another
    # simulator) may show; none of this server's may.
    assert fake_vllm.engine_pid not in [e.pid for e in gone.engines]

    restarted = FakeVllm()  # no --scheduling-policy: vLLM's default
    try:
        watcher.patterns = ProcessPatterns(api=(fake_vllm.marker, restarted.marker))
        snap = await eventually(watcher, lambda s: s.api is not None and len(s.engines) == 1)
        restarted.worker_pids = [w.pid for w in snap.workers]
        assert snap.api_identity != first.api_identity
        assert snap.engines[0].pid == restarted.engine_pid
        assert snap.scheduling_policy is SchedulingPolicy.FCFS
    finally:
        restarted.close()


async def test_this_process_is_never_the_api_server() -> None:
    # pytest's own command line would otherwise match a pattern built from it.
    patterns = ProcessPatterns(api=(sys.argv[0],))
    snap = await ProcessWatcher(clock=lambda: 7.0, patterns=patterns).sample_async()
    assert snap.at == 7.0
    assert snap.api is None or snap.api.pid != os.getpid()


@pytest.mark.parametrize(
    ("cmdline", "expected"),
    [
        # No flag: None here; the watcher then applies vLLM's default, fcfs.
        (["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], None),
        (["vllm", "serve", "m", "--scheduling-policy", "priority"], SchedulingPolicy.PRIORITY),
        (["vllm", "serve", "m", "--scheduling-policy=priority"], SchedulingPolicy.PRIORITY),
        (["vllm", "serve", "m", "--scheduling_policy", "fcfs"], SchedulingPolicy.FCFS),
        (["sh", "-c", "vllm serve m --scheduling-policy priority"], SchedulingPolicy.PRIORITY),
        (["vllm", "serve", "m", "--scheduling-policy"], None),
        (["vllm", "serve", "m", "--scheduling-policy", "lottery"], None),
    ],
)
def test_scheduling_policy_from_a_command_line(
    cmdline: list[str], expected: SchedulingPolicy | None
) -> None:
    assert scheduling_policy(cmdline) is expected


@pytest.mark.parametrize(
    ("name", "cmdline", "role"),
    [
        ("python", ["python", "-m", "vllm.entrypoints.openai.api_server"], ProcessRole.API_SERVER),
        ("vllm", ["/usr/bin/python", "/usr/bin/vllm", "serve", "tiny"], ProcessRole.API_SERVER),
        # Only real vLLM is named: a simulator is found by wearing vLLM's command line.
        ("python", ["python", "-m", "sentinel_sim", "--port", "0"], None),
        ("VLLM::EngineCor", ["VLLM::EngineCore_DP0"], ProcessRole.ENGINE_CORE),
        ("VLLM::EngineCor", [], ProcessRole.ENGINE_CORE),  # a zombie keeps only its comm
        ("VLLM::Worker_TP", ["VLLM::Worker_TP1"], ProcessRole.WORKER),
        ("python", ["python", "-m", "http.server"], None),
    ],
)
def test_default_patterns_classify_vllm_processes(
    name: str, cmdline: list[str], role: ProcessRole | None
) -> None:
    assert ProcessPatterns().classify(name, cmdline) is role


def test_process_states_map_to_the_closed_set() -> None:
    assert process_state(psutil.STATUS_STOPPED) is ProcessState.STOPPED
    assert process_state(psutil.STATUS_TRACING_STOP) is ProcessState.STOPPED
    assert process_state(psutil.STATUS_ZOMBIE) is ProcessState.ZOMBIE
    assert process_state(psutil.STATUS_DISK_SLEEP) is ProcessState.DISK_SLEEP
    assert process_state(psutil.STATUS_IDLE) is ProcessState.IDLE
    assert process_state(psutil.STATUS_DEAD) is ProcessState.GONE
    assert process_state("a-state-psutil-does-not-name") is ProcessState.UNKNOWN
    assert process_state(None) is ProcessState.UNKNOWN


@pytest.mark.parametrize(
    ("name", "cmdline"),
    [
        ("python", ["python", "-m", "vllm.entrypoints.openai.api_server", "--port", "8000"]),
        ("VLLM::EngineCor", ["VLLM::EngineCore_DP0"]),
        ("VLLM::Worker_TP", ["VLLM::Worker_TP1"]),
        ("python", ["python", "-c", "pass"]),
    ],
)
def test_diagnostics_and_the_watcher_name_roles_alike(name: str, cmdline: list[str]) -> None:
    """One vocabulary: a bundle and /status never disagree on what a process is."""
    watcher_role = ProcessPatterns().classify(name, cmdline)
    assert procs.role_of(name, cmdline) is (watcher_role or ProcessRole.OTHER)
    matched = procs.ProcessMatch().matches(name, cmdline)
    assert matched is (watcher_role is not None)


# -- attribution by the target's listening socket -----------------------------

LISTENER_SRC = """
import socket, sys, time
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
print(server.getsockname()[1], flush=True)
while True:
    time.sleep(1)
"""


@pytest.fixture
def two_sims() -> Iterator[tuple[SimProcess, SimProcess]]:
    with SimProcess() as first, SimProcess() as second:
        yield first, second


async def test_the_server_owning_the_port_is_the_target(
    two_sims: tuple[SimProcess, SimProcess],
) -> None:
    first, second = two_sims
    for sim, other in ((first, second), (second, first)):
        snap = await ProcessWatcher(clock=lambda: 0.0, listen_port=sim.port).sample_async()
        assert snap.attribution is Attribution.LISTENING_SOCKET
        assert snap.api is not None
        assert snap.api.pid == sim.api_pid
        assert [p.pid for p in snap.engines] == [sim.engine_pid]
        assert other.engine_pid not in {p.pid for p in snap.engine_processes}


async def test_an_unrelated_vllm_is_never_adopted_even_as_the_only_candidate() -> None:
    with SimProcess() as sim:
        nobody = free_port()
        watcher = ProcessWatcher(clock=lambda: 0.0, listen_port=nobody)
        snap = await watcher.sample_async()
        assert snap.api is None
        assert snap.engine_processes == ()
        assert snap.attribution is Attribution.NONE
        assert str(nobody) in snap.attribution_detail
        assert str(sim.api_pid) in snap.attribution_detail  # named as not adopted
        os.kill(sim.engine_pid, signal.SIGSTOP)  # its engine stopping is none of ours
        try:
            snap = await watcher.sample_async()
            assert snap.engine_processes == ()
        finally:
            os.kill(sim.engine_pid, signal.SIGCONT)


@pytest.fixture
def plain_listener() -> Iterator[tuple[int, int]]:
    """A process listening on a port, titled like no vLLM process: (pid, port)."""
    listener = subprocess.Popen(
        [sys.executable, "-c", LISTENER_SRC], stdout=subprocess.PIPE, text=True
    )
    try:
        assert listener.stdout is not None
        yield listener.pid, int(listener.stdout.readline())
    finally:
        kill_tree(listener.pid)
        listener.wait(timeout=5)
        if listener.stdout is not None:
            listener.stdout.close()


async def test_a_listener_that_is_not_vllm_is_the_target_and_adopts_no_vllm(
    plain_listener: tuple[int, int],
) -> None:
    pid, port = plain_listener
    with SimProcess() as sim:
        snap = await ProcessWatcher(clock=lambda: 0.0, listen_port=port).sample_async()
        assert snap.attribution is Attribution.LISTENING_SOCKET
        assert snap.api is not None
        assert snap.api.pid == pid
        assert sim.engine_pid not in {p.pid for p in snap.engine_processes}


def _refuses(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    return False


async def test_an_attributed_server_is_kept_after_its_listener_closes() -> None:
    """Its listener gone, the same live process is still the target's (listener down needs it).

    A watcher that never saw it own the socket does not adopt it.
    """
    now = [0.0]
    with SimProcess() as sim:
        watcher = ProcessWatcher(clock=lambda: 0.0, listen_port=sim.port, scan_clock=lambda: now[0])
        assert (await watcher.sample_async()).api is not None
        sim.control.set_fault("listener_closed")
        deadline = time.monotonic() + 10.0
        while not _refuses(sim.port):
            assert time.monotonic() < deadline, "the listener never closed"
            await asyncio.sleep(0.05)
        now[0] += watcher.recheck_interval  # a followed server's socket is rechecked this often
        snap = await watcher.sample_async()
        assert snap.api is not None
        assert snap.api.pid == sim.api_pid
        assert snap.attribution is Attribution.LISTENING_SOCKET
        assert "closed" in snap.attribution_detail
        assert [p.pid for p in snap.engines] == [sim.engine_pid]
        fresh = await ProcessWatcher(clock=lambda: 0.0, listen_port=sim.port).sample_async()
        assert fresh.api is None
        assert fresh.attribution is Attribution.NONE


# -- the cost of following the target ----------------------------------------


class CountingReads:
    """Counts psutil's whole-table and system-wide socket reads (the costly ones)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tables = 0
        self.sockets = 0
        process_iter, net_connections = psutil.process_iter, psutil.net_connections

        def counted_iter(*args: object, **kwargs: object) -> object:
            self.tables += 1
            return process_iter(*args, **kwargs)  # type: ignore[arg-type]

        def counted_connections(*args: object, **kwargs: object) -> object:
            self.sockets += 1
            return net_connections(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(psutil, "process_iter", counted_iter)
        monkeypatch.setattr(psutil, "net_connections", counted_connections)


async def test_a_followed_server_costs_no_whole_table_read(monkeypatch: pytest.MonkeyPatch) -> None:
    with SimProcess() as sim:
        reads = CountingReads(monkeypatch)
        watcher = ProcessWatcher(clock=lambda: 0.0, listen_port=sim.port)
        first = await watcher.sample_async()
        assert first.api is not None
        assert reads.tables == 1
        for _ in range(5):
            snap = await watcher.sample_async()
            assert snap.api_identity == first.api_identity
            assert snap.attribution is Attribution.LISTENING_SOCKET
            assert snap.attribution_detail == ""
            assert [p.pid for p in snap.engines] == [sim.engine_pid]
        assert reads.tables == 1
        assert reads.sockets <= 1
        # Its engine stopping is still seen at once.
        os.kill(sim.engine_pid, signal.SIGSTOP)
        try:
            snap = await eventually(watcher, lambda s: engine_state(s) is ProcessState.STOPPED)
        finally:
            os.kill(sim.engine_pid, signal.SIGCONT)
        assert reads.tables == 1


async def test_a_search_that_finds_nothing_backs_off(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    reads = CountingReads(monkeypatch)
    watcher = ProcessWatcher(
        clock=lambda: 0.0,
        listen_port=free_port(),
        scan_clock=lambda: now[0],
        rescan_after=1.0,
        rescan_max=4.0,
    )
    searches = []
    for step in range(12):  # 0.0 .. 11.0 s, one sample a second
        now[0] = float(step)
        before = reads.tables
        snap = await watcher.sample_async()
        assert snap.attribution is Attribution.NONE
        assert "no process owning" in snap.attribution_detail
        if reads.tables > before:
            searches.append(step)
    assert searches == [0, 1, 3, 7, 11]


async def test_a_server_that_exits_is_searched_for_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads = CountingReads(monkeypatch)
    with SimProcess() as sim:
        watcher = ProcessWatcher(clock=lambda: 0.0, listen_port=sim.port, scan_clock=lambda: 0.0)
        assert (await watcher.sample_async()).api is not None
        kill_tree(sim.api_pid)
        snap = await eventually(watcher, lambda s: s.api is None)
        assert reads.tables == 2  # the first search, then one when the server went
        assert snap.attribution is Attribution.NONE


class CountingRechecks:
    """Counts the followed server's socket checks (each recheck asks once)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.at: list[float] = []
        self.now = [0.0]
        from sentinel.evidence.process_table import listens_on

        def counted(pid: int, port: int) -> bool:
            self.at.append(self.now[0])
            return listens_on(pid, port)

        monkeypatch.setattr("sentinel.evidence.processes.listens_on", counted)


async def test_quiet_rechecks_back_off_and_a_refusal_brings_the_next_forward(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Socket and descendants are asked again after 15 s, then 30, 60, 120 while nothing changes.

    A refusal seen by the evidence loops (``port_refused``) makes the next
    sample ask at once, and the pause starts over.
    """
    with SimProcess() as sim:
        rechecks = CountingRechecks(monkeypatch)
        now = rechecks.now
        watcher = ProcessWatcher(clock=lambda: 0.0, listen_port=sim.port, scan_clock=lambda: now[0])
        first = await watcher.sample_async()
        assert first.api is not None
        searched = len(rechecks.at)  # the search asked the candidates (not a recheck)
        for second in range(1, 400):  # one sample a second
            now[0] = float(second)
            snap = await watcher.sample_async()
            assert snap.api_identity == first.api_identity
            assert snap.attribution_detail == ""
        assert rechecks.at[searched:] == [15.0, 45.0, 105.0, 225.0, 345.0]
        watcher.port_refused()
        now[0] = 400.0
        await watcher.sample_async()
        assert rechecks.at[-1] == 400.0
        now[0] = 414.0
        await watcher.sample_async()
        now[0] = 415.0
        await watcher.sample_async()
        assert rechecks.at[-2:] == [400.0, 415.0]  # the pause started over at 15 s


async def test_a_family_change_brings_the_next_recheck_forward(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An engine stopping (or any process of the family going) is looked at again within 15 s."""
    with SimProcess() as sim:
        rechecks = CountingRechecks(monkeypatch)
        now = rechecks.now
        watcher = ProcessWatcher(clock=lambda: 0.0, listen_port=sim.port, scan_clock=lambda: now[0])
        assert (await watcher.sample_async()).api is not None
        for second in range(1, 110):  # rechecks at 15, 45 and 105: the next is due at 225
            now[0] = float(second)
            await watcher.sample_async()
        os.kill(sim.engine_pid, signal.SIGSTOP)
        try:
            snap = await eventually(watcher, lambda s: engine_state(s) is ProcessState.STOPPED)
            assert snap.engines[0].pid == sim.engine_pid
            seen = len(rechecks.at)
            now[0] = 110.0 + watcher.recheck_interval
            await watcher.sample_async()
            assert len(rechecks.at) == seen + 1
        finally:
            os.kill(sim.engine_pid, signal.SIGCONT)


@pytest.mark.parametrize("api_servers", [1, 2])
async def test_the_socket_table_is_read_only_where_api_server_peers_share_the_port(
    monkeypatch: pytest.MonkeyPatch, api_servers: int
) -> None:
    """The held-connection check is for a process its peers cover; alone, no table is walked."""
    from sentinel.evidence.listen_table import table_rows

    reads: list[int] = []

    def counted(port: int, *args: object) -> object:
        reads.append(port)
        return table_rows(port, *args)  # type: ignore[arg-type]

    monkeypatch.setattr("sentinel.evidence.held_sockets.table_rows", counted)
    with SimProcess(api_server_count=api_servers) as sim:
        watcher = ProcessWatcher(clock=time.monotonic, listen_port=sim.port)
        snap = await eventually(watcher, lambda s: len(s.api_processes) == api_servers - 1)
        for _ in range(3):
            snap = await watcher.sample_async()
        if api_servers == 1:
            assert reads == []
            assert snap.held == ()
        else:
            assert reads
            assert set(reads) == {sim.port}
            assert snap.held is not None
