"""One API-server process stuck among several: the socket table, the watch, the rule."""

from __future__ import annotations

from pathlib import Path

from sentinel.evidence.api_watch import ApiWatch
from sentinel.evidence.held_sockets import (
    HeldSocket,
    PacedHeld,
    UnreadTracker,
    unread_connections,
    with_owners,
)
from sentinel.evidence.process_model import (
    ProcessInfo,
    ProcessPatterns,
    ProcessRole,
    ProcessSnapshot,
    ProcessState,
)
from sentinel.verdict import Action, Evidence, HangKind, Policy
from sentinel.verdict.hangs.api_server import API_WATCH, ApiStuckSection, api_server

HEADER = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt"
    "   uid  timeout inode\n"
)


def _row(local_port: int, state: str, rx: int, inode: int, remote_port: int = 50000) -> str:
    return (
        f"   0: 0100007F:{local_port:04X} 0100007F:{remote_port:04X} {state} "
        f"00000000:{rx:08X} 00:00000000 00000000     0        0 {inode} 1 0 20 4 30 10 -1\n"
    )


def _table(tmp_path: Path, *rows: str, tcp6: str | None = None) -> Path:
    (tmp_path / "tcp").write_text(HEADER + "".join(rows))
    if tcp6 is not None:
        (tmp_path / "tcp6").write_text(HEADER + tcp6)
    return tmp_path


def test_only_held_connections_on_the_port_with_unread_bytes_count(tmp_path: Path) -> None:
    net = _table(
        tmp_path,
        _row(8000, "0A", 0, 11),  # the listener
        _row(8000, "01", 0, 12),  # read
        _row(8000, "01", 300, 13),  # unread
        _row(8000, "08", 261, 14),  # the client gave up; never read, never closed
        _row(8001, "01", 99, 15),  # another port
        _row(8000, "01", 50, 0),  # in the accept queue: no process holds it yet
        _row(8000, "06", 10, 16),  # TIME_WAIT: nobody holds it
        "garbage line\n",
        tcp6=_row(8000, "01", 7, 17),
    )
    found = unread_connections(8000, net)
    assert found is not None
    held, connections = found
    assert {(h.inode, h.unread, h.closed_by_client) for h in held} == {
        (13, 300, False),
        (14, 261, True),
        (17, 7, False),
    }
    # Every connection held on the port, read or not; never the listener or the accept queue.
    assert connections == {12, 13, 14, 16, 17}


def test_no_table_is_no_evidence_and_an_empty_one_is_none_unread(tmp_path: Path) -> None:
    assert unread_connections(8000, tmp_path / "missing") is None
    assert unread_connections(8000, _table(tmp_path)) == ((), frozenset())


def test_owners_are_named_from_readable_descriptors(tmp_path: Path) -> None:
    fd = tmp_path / "4242" / "fd"
    fd.mkdir(parents=True)
    (fd / "7").symlink_to("socket:[13]")
    (fd / "8").symlink_to("/dev/null")
    (fd / "9").symlink_to("socket:[20]")  # not a connection to the port
    held = (HeldSocket(13, 300, False), HeldSocket(14, 261, True))
    named, served = with_owners(held, [4242, 999], connections={13, 14}, proc=tmp_path)
    assert [h.owner for h in named] == [4242, None]  # 999: unreadable
    assert served == {4242: {13}}


def test_a_holder_that_accepts_or_closes_connections_is_serving_and_its_clock_restarts() -> None:
    """uvicorn leaves a pipelined request unread on a working server; a stuck loop also
    never accepts nor closes a connection."""
    tracker = UnreadTracker()
    pipelined = (HeldSocket(1, 186, False, owner=41),)
    tracker.observe(pipelined, 10.0, {41: frozenset({1, 2})})
    tracker.observe(pipelined, 11.0, {41: frozenset({1, 2})})  # nothing new: still stuck?
    oldest = tracker.oldest()
    assert oldest is not None
    assert oldest.since == 10.0
    tracker.observe(pipelined, 12.0, {41: frozenset({1, 3})})  # accepted 3, closed 2
    oldest = tracker.oldest()
    assert oldest is not None
    assert oldest.since == 12.0
    # A peer's churn says nothing of the holder.
    tracker.observe(pipelined, 13.0, {41: frozenset({1, 3}), 42: frozenset({7})})
    tracker.observe(pipelined, 14.0, {41: frozenset({1, 3}), 42: frozenset({8})})
    oldest = tracker.oldest()
    assert oldest is not None
    assert oldest.since == 12.0


def test_tracker_keeps_the_oldest_unread_and_restarts_a_queue_being_read() -> None:
    tracker = UnreadTracker()
    tracker.observe((HeldSocket(1, 100, False),), 10.0)
    tracker.observe((HeldSocket(1, 100, False), HeldSocket(2, 50, False)), 11.0)
    oldest = tracker.oldest()
    assert oldest is not None
    assert (oldest.since, oldest.sockets) == (10.0, 2)
    tracker.observe(None, 12.0)  # no table read: says nothing
    assert tracker.oldest() == oldest
    # Connection 1 shrank (being read): its clock restarts; 2 is now the oldest.
    tracker.observe((HeldSocket(1, 40, False), HeldSocket(2, 50, False)), 13.0)
    oldest = tracker.oldest()
    assert oldest is not None
    assert oldest.since == 11.0
    tracker.observe((), 14.0)
    assert tracker.oldest() is None


def _process(pid: int, state: ProcessState) -> ProcessInfo:
    return ProcessInfo(
        pid=pid,
        create_time=1.0,
        name="VLLM::APIServer",
        cmdline=(f"VLLM::APIServer_{pid % 10}",),
        state=state,
        cpu_seconds=0.0,
        role=ProcessRole.API_PROCESS,
    )


def test_watch_names_a_stopped_process_and_an_unread_connection() -> None:
    watch = ApiWatch()
    running = ProcessSnapshot(at=0.0, api_processes=(_process(41, ProcessState.SLEEPING),))
    watch.observe(running, 1.0)
    assert watch.since is None
    assert watch.detail == ""
    stopped = ProcessSnapshot(
        at=0.0,
        api_processes=(_process(41, ProcessState.STOPPED),),
        held=(HeldSocket(9, 120, False, owner=41),),
    )
    watch.observe(stopped, 2.0)
    assert watch.since == 2.0
    assert "VLLM::APIServer_1 (pid 41) stopped" in watch.detail
    assert "120 unread bytes, held by API-server process 41" in watch.detail
    unnamed = ProcessSnapshot(at=0.0, held=(HeldSocket(9, 120, False),))
    watch.observe(unnamed, 3.0)
    assert watch.since == 2.0  # the connection is the same one, unread since 2.0
    assert "cannot name" in watch.detail
    watch.reset()
    assert watch.since is None


def test_the_vllm_api_server_title_is_its_own_role() -> None:
    patterns = ProcessPatterns()
    assert patterns.classify("VLLM::APIServer", ["VLLM::APIServer_1"]) is ProcessRole.API_PROCESS
    assert patterns.classify("python", ["vllm", "serve", "m"]) is ProcessRole.API_SERVER


def test_rule_fires_after_the_api_window_and_names_the_cause() -> None:
    policy = Policy(api_window=60.0)
    evidence = Evidence(sections={API_WATCH.name: ApiStuckSection(100.0, "x (pid 41) stopped")})
    assert api_server(evidence, policy, 159.0) is None
    hang = api_server(evidence, policy, 160.0)
    assert hang is not None
    assert (hang.kind, hang.action, hang.since) == (HangKind.API_SERVER, Action.RESTART, 100.0)
    assert "x (pid 41) stopped for 60s" in hang.reason
    # Time sentinel did not observe does not count toward the window.
    paused = Evidence(
        sections={API_WATCH.name: ApiStuckSection(100.0, "x")}, unobserved=((110.0, 130.0),)
    )
    assert api_server(paused, policy, 170.0) is None
    assert api_server(Evidence(), policy, 1e9) is None


def test_the_socket_table_is_read_at_a_pace_while_nothing_is_held_at_every_call_once_held(
    tmp_path: Path,
) -> None:
    now = [0.0]
    paced = PacedHeld(lambda: now[0], every=5.0)
    net = _table(tmp_path, _row(8000, "0A", 0, 11), _row(8000, "01", 0, 12))
    assert paced.read(1, 8000, net, [1]) == ((), {})
    _table(tmp_path, _row(8000, "01", 300, 13))  # a connection now holds unread bytes
    now[0] = 4.9
    assert paced.read(1, 8000, net, [1]) == ((), {})  # within the pace: not read again
    assert paced.read(2, 8000, net, [2])[0] != ()  # another API server: read at once
    now[0] = 5.0
    held, _ = paced.read(1, 8000, net, [1])
    assert [h.inode for h in held or ()] == [13]  # the pace ran out: read, and seen
    _table(tmp_path)  # read again at once while something was held: gone now
    now[0] = 5.1
    assert paced.read(1, 8000, net, [1]) == ((), {})
    now[0] = 10.1  # the next paced read finds no table: cannot tell, said at once
    assert paced.read(1, 8000, tmp_path / "missing", [1]) == (None, {})


def test_paced_reads_only_the_tables_the_server_listens_in(tmp_path: Path) -> None:
    """Each table read walks the kernel's whole connection hash: an IPv4 listener's
    connections are all in ``tcp``, so ``tcp6`` is read again only to relearn."""
    now = [0.0]
    paced = PacedHeld(lambda: now[0], every=0.0, relearn=3)
    net = _table(tmp_path, _row(8000, "0A", 0, 11), tcp6="")
    assert paced.read(1, 8000, net, [1]) == ((), {})  # learns: the listener is in tcp
    _table(tmp_path, _row(8000, "0A", 0, 11), tcp6=_row(8000, "01", 9, 17))
    for _ in range(2):
        now[0] += 1
        assert paced.read(1, 8000, net, [1]) == ((), {})  # tcp6 is not read
    now[0] += 1
    held, _ = paced.read(1, 8000, net, [1])  # the third read relearns: every table
    assert [h.inode for h in held or ()] == [17]
    dual = _table(tmp_path, tcp6=_row(8000, "0A", 0, 21) + _row(8000, "01", 5, 22))
    now[0] += 1
    held, _ = paced.read(2, 8000, dual, [2])  # another server: every table at once
    assert [h.inode for h in held or ()] == [22]
