"""Attribution where the socket's owner is unreadable: socket tables, command-line ports, uids.

A fake ``/proc`` (its ``net/tcp*``, each candidate's ``<pid>/net/tcp*`` and
``<pid>/root``) stands in for another user's server, so every case is exact.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sentinel.diagnostics.access import denied, lacks
from sentinel.evidence.attribution import by_command_line, holds_socket, top_most
from sentinel.evidence.listen_table import listening
from sentinel.evidence.process_access import (
    CAP_SYS_PTRACE,
    OwnCapabilities,
    ProcessEvidence,
    probe_access,
    stack_dumps_possible,
)
from sentinel.evidence.process_table import Row
from sentinel.evidence.server_port import VLLM_DEFAULT_PORT, claimed_port, config_port

COLUMNS = "st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
HEADER = "  sl  local_address rem_address   " + COLUMNS
HEADER6 = "  sl  local_address" + " " * 25 + "remote_address" + " " * 24 + COLUMNS


def tcp_line(port: int, uid: int, inode: int, state: str = "0A") -> str:
    return (
        f"   0: 0100007F:{port:04X} 00000000:0000 {state} 00000000:00000000 00:00000000 "
        f"00000000 {uid:>5}        0 {inode} 1 0000000000000000 100 0 0 10 0\n"
    )


def tcp6_line(port: int, uid: int, inode: int) -> str:
    return (
        f"   0: 00000000000000000000000000000000:{port:04X} "
        "00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 "
        f"00000000 {uid:>5}        0 {inode} 1 0000000000000000 100 0 0 10 0\n"
    )


def write_net(net: Path, lines: str = "", lines6: str | None = None) -> None:
    net.mkdir(parents=True, exist_ok=True)
    (net / "tcp").write_text(HEADER + lines)
    if lines6 is not None:
        (net / "tcp6").write_text(HEADER6 + lines6)


def row(pid: int, *cmdline: str, ppid: int | None = 1) -> Row:
    return Row(pid, ppid, "python", tuple(cmdline), 100.0 + pid, "sleeping", 1.0)


def no_config(path: str) -> tuple[str | None, str]:
    raise AssertionError(f"no --config expected, asked for {path}")


# -- the port a command line claims ---------------------------------------------


@pytest.mark.parametrize(
    ("cmdline", "port"),
    [
        (["vllm", "serve", "m", "--port", "8001"], 8001),
        (["vllm", "serve", "m", "--port=8002"], 8002),
        (["vllm", "serve", "m", "--port", "8001", "--port", "8003"], 8003),  # argparse: last
        (["sh", "-c", "vllm serve m --port 8004 --host 0.0.0.0"], 8004),
        (["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], 8000),
        (["vllm", "serve", "m", "--control-port", "9000"], VLLM_DEFAULT_PORT),
        (["python", "-m", "vllm.entrypoints.openai.api_server", "--port", "0"], None),
        (["vllm", "serve", "m", "--port", "eighty"], None),
    ],
)
def test_the_port_a_command_line_claims(cmdline: list[str], port: int | None) -> None:
    assert claimed_port(cmdline, no_config).port == port


def test_a_config_file_gives_the_port_and_the_command_line_wins_over_it() -> None:
    files = {"/etc/vllm.yaml": "model: m\nport: 8123\n", "/etc/none.yaml": "model: m\n"}

    def read(path: str) -> tuple[str | None, str]:
        return files.get(path), "test"

    claim = claimed_port(["vllm", "serve", "--config", "/etc/vllm.yaml"], read)
    assert (claim.port, "--config /etc/vllm.yaml" in claim.how) == (8123, True)
    over = claimed_port(["vllm", "serve", "--config", "/etc/vllm.yaml", "--port", "9"], read)
    assert over.port == 9
    assert claimed_port(["vllm", "serve", "--config=/etc/none.yaml"], read).port == 8000
    unreadable = claimed_port(["vllm", "serve", "--config", "/etc/gone.yaml"], read)
    assert unreadable.port is None  # unknown, never the default: it may name another port
    assert "cannot be read" in unreadable.how
    assert config_port("port: true") is None
    assert config_port("[1, 2]") is None
    assert config_port(": : not yaml") is None


# -- the socket tables ------------------------------------------------------------


def test_listening_sockets_on_a_port_from_both_tables(tmp_path: Path) -> None:
    write_net(
        tmp_path,
        tcp_line(8000, 0, 11) + tcp_line(8000, 0, 12, state="01") + tcp_line(8001, 5, 13),
        tcp6_line(8000, 7, 14),
    )
    found = listening(8000, tmp_path)
    assert found is not None
    assert [(s.uid, s.inode, s.family) for s in found] == [(0, 11, "tcp"), (7, 14, "tcp6")]
    assert listening(9, tmp_path) == ()
    assert listening(8000, tmp_path / "absent") is None


# -- attribution by command line ----------------------------------------------------


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    """A fake /proc: a root socket on 8000 (inode 500); servers 10 and 20 may hold it."""
    write_net(tmp_path / "net", tcp_line(8000, 0, 500))
    for pid in (10, 20, 30):
        write_net(tmp_path / str(pid) / "net", tcp_line(8000, 0, 500))
    return tmp_path


def root_uids(pid: int) -> frozenset[int]:
    return frozenset({0})


def test_the_one_server_claiming_the_port_with_the_sockets_uid_is_adopted(proc: Path) -> None:
    apis = [row(10, "vllm", "serve", "m"), row(20, "vllm", "serve", "m", "--port", "8001")]
    match = by_command_line(8000, apis, proc, uids_of=root_uids)
    assert match.row is not None
    assert match.row.pid == 10
    assert "vLLM's default 8000" in match.detail
    assert "inode 500" in match.detail


def test_two_servers_claiming_the_port_are_ambiguous(proc: Path) -> None:
    apis = [row(10, "vllm", "serve", "m"), row(20, "vllm", "serve", "--port", "8000")]
    match = by_command_line(8000, apis, proc, uids_of=root_uids)
    assert match.row is None
    assert "ambiguous" in match.detail
    assert "10" in match.detail
    assert "20" in match.detail


def test_a_server_of_another_uid_or_namespace_is_never_adopted(proc: Path) -> None:
    apis = [row(10, "vllm", "serve", "m")]
    other_uid = by_command_line(8000, apis, proc, uids_of=lambda pid: frozenset({1000}))
    assert other_uid.row is None
    assert "uid 1000" in other_uid.detail
    # Its own namespace holds another socket on 8000 (another pod's server).
    write_net(proc / "10" / "net", tcp_line(8000, 0, 999))
    elsewhere = by_command_line(8000, apis, proc, uids_of=root_uids)
    assert elsewhere.row is None
    assert "network namespace" in elsewhere.detail


def test_nothing_listening_and_unknown_ports_adopt_nobody(proc: Path) -> None:
    apis = [row(10, "vllm", "serve", "m", "--port", "0")]
    assert (
        "nothing listens on port 9000"
        in by_command_line(9000, apis, proc, uids_of=root_uids).detail
    )
    unknown = by_command_line(8000, apis, proc, uids_of=root_uids)
    assert unknown.row is None
    assert "--port 0 names no fixed port" in unknown.detail


def test_a_config_file_is_read_through_the_servers_root(proc: Path) -> None:
    (proc / "30" / "root" / "etc").mkdir(parents=True)
    (proc / "30" / "root" / "etc" / "v.yaml").write_text("port: 8000\n")
    apis = [row(30, "vllm", "serve", "--config", "/etc/v.yaml")]
    match = by_command_line(8000, apis, proc, uids_of=root_uids)
    assert match.row is not None
    assert "in its --config /etc/v.yaml" in match.detail


def test_the_followed_server_holds_its_socket_by_uid(proc: Path) -> None:
    assert holds_socket(8000, 10, frozenset({0}), proc)
    assert not holds_socket(8000, 10, frozenset({1000}), proc)
    write_net(proc / "10" / "net")
    assert not holds_socket(8000, 10, frozenset({0}), proc)


def test_a_servers_children_sharing_its_socket_are_part_of_it() -> None:
    rows = [row(1, "vllm", "serve", ppid=None), row(2, "vllm", "serve", ppid=1), row(3, "x")]
    parents = {r.pid: r.ppid for r in rows}
    assert [r.pid for r in top_most(rows, lambda pid: pid in (1, 2), parents)] == [1]


# -- what can be read, and what grants the rest ------------------------------------------


def test_an_unreadable_server_turns_off_what_needs_its_descriptors(tmp_path: Path) -> None:
    """A fake server whose fd, environ and exe are refused (absent here: the errno differs)."""
    (tmp_path / "7" / "task" / "7").mkdir(parents=True)
    (tmp_path / "7" / "task" / "7" / "children").write_text("")
    own = OwnCapabilities(effective=0, bounding=0, no_new_privs=True)
    access = probe_access(7, [], command_line=True, proc_root=tmp_path, own=own)
    on = access.available()
    assert [name for name, readable in on.items() if readable] == [
        "engine_state",
        "api_alive",
        "command_line",
        "compilers",
    ]
    stacks = {i.evidence: i for i in access.items}[ProcessEvidence.STACKS]
    assert not stacks.on
    assert stacks.grant == "manifests/components/stack-dumps"
    assert probe_access(None, [], command_line=False).available() == dict.fromkeys(on, False)


def test_a_stack_tool_with_the_capability_needs_it_in_the_bounding_set(tmp_path: Path) -> None:
    tool = tmp_path / "tool"
    tool.write_bytes(b"")
    ptrace = 1 << CAP_SYS_PTRACE
    try:
        os.setxattr(
            tool,
            "security.capability",
            b"\x01\x00\x00\x02" + ptrace.to_bytes(4, "little") + bytes(12),
        )
    except OSError:
        pytest.skip("this filesystem takes no security.capability xattr")
    assert stack_dumps_possible(False, str(tool), OwnCapabilities(0, ptrace, False))[0]
    assert not stack_dumps_possible(False, str(tool), OwnCapabilities(0, 0, False))[0]
    assert (
        "no_new_privs"
        in stack_dumps_possible(False, str(tool), OwnCapabilities(0, ptrace, True))[1]
    )
    assert (
        "no cap_sys_ptrace"
        in stack_dumps_possible(False, __file__, OwnCapabilities(0, ptrace, False))[1]
    )


def test_a_bundle_says_what_it_lacks_and_why() -> None:
    processes = [
        {"pid": 5, "errors": {"environ": denied("environ"), "open_files": denied("open_files")}},
        {"pid": 6, "errors": {"environ": denied("environ")}},
    ]
    stacks = {"5": {"ok": False, "error": "py-spy exited 1: Permission Denied"}, "6": {"ok": True}}
    found = lacks(processes, stacks)
    assert found["environ"].startswith("pid 5, 6: access denied: needs CAP_SYS_PTRACE")
    assert "CAP_DAC_READ_SEARCH" in found["open_files"]
    assert "manifests/components/stack-dumps" in found["stacks"]


def test_the_doctor_names_the_permission_and_what_grants_it() -> None:
    from sentinel.diagnostics.doctor import Severity, check_processes
    from sentinel.evidence.process_model import (
        Attribution,
        ProcessInfo,
        ProcessRole,
        ProcessSnapshot,
        ProcessState,
    )

    none = check_processes(ProcessSnapshot(at=0.0, attribution=Attribution.NONE))
    assert [c.severity for c in none] == [Severity.WARN]
    assert "shareProcessNamespace" in none[0].detail
    api = ProcessInfo(1, ProcessRole.API_SERVER, "python", ProcessState.SLEEPING, 1.0)
    own = OwnCapabilities(effective=0, bounding=0, no_new_privs=True)
    found = check_processes(
        ProcessSnapshot(
            at=0.0,
            api=api,
            attribution=Attribution.COMMAND_LINE,
            unreadable=("the owner of the socket",),
            access=probe_access(1, [], command_line=True, proc_root=Path("/nonexistent"), own=own),
        )
    )
    assert found[0].summary == "API server pid 1 found by command_line"
    stacks = next(c for c in found if c.summary.startswith("stacks: off"))
    assert stacks.severity is Severity.WARN
    assert "granted by manifests/components/stack-dumps" in stacks.detail
