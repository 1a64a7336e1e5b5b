"""The capability path (manifests/components/stack-dumps), tested where the machine honours it.

The component gives uid 10001 ``CAP_SYS_PTRACE`` through a file capability on
a copy of py-spy (``cap_sys_ptrace+ep``, SYS_PTRACE in the bounding set,
privilege escalation allowed). Whether that takes effect depends on the
kernel, the filesystem (extended attributes, ``nosuid``) and the runtime, so
each way of granting it (a file capability; an ambient capability, as a
runtime that sets ambient capabilities would) is first detected: the
capability must show in ``CapEff`` and open a ptrace-gated read of a root
process (``/proc/<pid>/maps``). Where it does not, the test is skipped by name
with the reason; where it does, py-spy through sentinel's stacks adapter must
dump the root process. ``fd`` and ``environ`` are reported, not asserted:
they are also guarded by their file mode (0500/0400 of the owner), which
``CAP_SYS_PTRACE`` does not pass.

``sentinel doctor`` as uid 10001 in the shipped shape must name each missing
permission and the component that grants it (no skip: nothing here depends
on the machine).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sentinel.diagnostics.stacks import find_py_spy
from sentinel_sim.launch import SimProcess
from tests.nonroot.conftest import report
from tests.nonroot.shape import PYTHON, SHIPPED, Sandbox, doctor_table, run_as_other_user

CAP_SYS_PTRACE = 19
# The stack-dumps component: SYS_PTRACE in the bounding set, escalation allowed.
FILE_CAPABILITY: tuple[str, ...] = ("--inh-caps=-all", "--bounding-set=-all,+sys_ptrace")
AMBIENT = (
    "--inh-caps=+sys_ptrace",
    "--ambient-caps=+sys_ptrace",
    "--bounding-set=-all,+sys_ptrace",
)
PROBE = r"""
import asyncio, json, os, sys
from sentinel.diagnostics.stacks import dump_one
pid, tool = int(sys.argv[1]), sys.argv[2]
def attempt(read):
    try:
        read()
        return "ok"
    except OSError as exc:
        return exc.strerror or type(exc).__name__
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
dump = asyncio.run(dump_one(pid, py_spy=tool, timeout_s=20))
print(json.dumps({
    "cap_eff": status["CapEff"].strip(),
    "maps": attempt(lambda: open(f"/proc/{pid}/maps").read(1)),
    "environ": attempt(lambda: open(f"/proc/{pid}/environ").read(1)),
    "fd": attempt(lambda: os.listdir(f"/proc/{pid}/fd")),
    "stacks": "ok" if dump.ok else dump.error,
}))
"""


def readable_interpreter() -> str | None:
    """A Python interpreter uid 10001 may open (py-spy reads the target's binary)."""
    for candidate in (sys.executable, "/usr/bin/python3"):
        path = os.path.realpath(candidate)
        if os.path.exists(path) and run_as_other_user(["test", "-r", path]).returncode == 0:
            return path
    return None


@pytest.fixture
def root_python() -> Iterator[int]:
    """A root Python process whose interpreter uid 10001 can read (skip where none is)."""
    interpreter = readable_interpreter()
    if interpreter is None:
        pytest.skip(
            "capability path not testable: no Python interpreter here is readable by uid 10001 "
            "(py-spy must open the target's binary), so a dump fails whatever the capability"
        )
    proc = subprocess.Popen(
        [interpreter, "-c", "import time\nwhile True: time.sleep(1)"], start_new_session=True
    )
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    box = Sandbox.create()
    try:
        yield box
    finally:
        box.remove()


def with_capability(box: Sandbox, program: str) -> Path | str:
    """A copy of ``program`` with ``cap_sys_ptrace+ep``, or why there is none."""
    setcap = shutil.which("setcap")
    if setcap is None:
        return "setcap is not installed"
    ptrace = box.root / "ptrace"
    ptrace.mkdir(mode=0o755, exist_ok=True)
    copy = ptrace / Path(program).name
    shutil.copy2(program, copy)
    copy.chmod(0o755)
    done = subprocess.run(
        [setcap, "cap_sys_ptrace+ep", str(copy)], capture_output=True, text=True, check=False
    )
    return copy if done.returncode == 0 else f"setcap failed: {done.stderr.strip()}"


def has_ptrace(cap_eff: str) -> bool:
    return bool(int(cap_eff or "0", 16) >> CAP_SYS_PTRACE & 1)


@pytest.mark.parametrize("way", ["file capability", "ambient capability"])
def test_sys_ptrace_takes_effect_for_uid_10001(
    other_uid: int, way: str, root_python: int, sandbox: Sandbox
) -> None:
    py_spy = find_py_spy()
    assert py_spy is not None, "py-spy is a dependency of sentinel"
    if way == "file capability":
        tool = with_capability(sandbox, py_spy)
        cat = with_capability(sandbox, shutil.which("cat") or "/bin/cat")
        if isinstance(tool, str) or isinstance(cat, str):
            pytest.skip(f"{way}: cannot be given here: {tool if isinstance(tool, str) else cat}")
        shown = run_as_other_user([str(cat), "/proc/self/status"], FILE_CAPABILITY).stdout
        cap_eff = next((ln.split()[1] for ln in shown.splitlines() if ln.startswith("CapEff")), "")
        maps = run_as_other_user([str(cat), f"/proc/{root_python}/maps"], FILE_CAPABILITY)
        gated = "ok" if maps.returncode == 0 else maps.stderr.strip()
        options, dumper = FILE_CAPABILITY, str(tool)
        # allowPrivilegeEscalation: false is no_new_privs, under which the kernel
        # documents file capabilities as ignored: measured, not assumed.
        nnp = run_as_other_user([str(cat), "/proc/self/status"], ("--no-new-privs", *options))
        nnp_eff = next((ln.split()[1] for ln in nnp.stdout.splitlines() if "CapEff" in ln), "")
        report(
            "file capability under no_new_privs (allowPrivilegeEscalation: false): "
            + ("taken (CapEff shows SYS_PTRACE)" if has_ptrace(nnp_eff) else "ignored")
        )
    else:
        options, dumper = AMBIENT, py_spy
    done = run_as_other_user([PYTHON, "-c", PROBE, str(root_python), dumper], options)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.splitlines()[-1])
    if way == "ambient capability":
        cap_eff, gated = found["cap_eff"], found["maps"]
        # What fd and environ ask for beyond SYS_PTRACE: their file mode's DAC_READ_SEARCH.
        both = ",".join(("+sys_ptrace", "+dac_read_search"))
        dac = (f"--inh-caps={both}", f"--ambient-caps={both}", f"--bounding-set=-all,{both}")
        more = run_as_other_user([PYTHON, "-c", PROBE, str(root_python), dumper], dac)
        if more.returncode == 0:
            plus = json.loads(more.stdout.splitlines()[-1])
            report(
                f"SYS_PTRACE and DAC_READ_SEARCH (ambient): environ {plus['environ']}, "
                f"fd {plus['fd']}"
            )
    report(
        f"SYS_PTRACE as {way} for uid 10001: CapEff {cap_eff}, /proc/<root pid>/maps {gated}, "
        f"environ {found['environ']}, fd {found['fd']}, py-spy dump {found['stacks'][:80]}"
    )
    if not has_ptrace(cap_eff):
        pytest.skip(f"SYS_PTRACE as {way}: not in CapEff of uid 10001 ({cap_eff or 'unread'})")
    if gated != "ok":
        pytest.skip(
            f"SYS_PTRACE as {way}: in CapEff but the machine does not honour it "
            f"(/proc/<root pid>/maps: {gated})"
        )
    assert found["stacks"] == "ok", found


def test_doctor_names_what_is_missing_and_what_grants_it(other_uid: int) -> None:
    """The shipped shape: the doctor says what is off, the permission, and the component."""
    from chaos.ports import free_port

    port = free_port()
    with SimProcess(extra_args=["--port", str(port)]) as sim:
        done = run_as_other_user(
            [PYTHON, "-m", "sentinel", "doctor", "--target", sim.base_url], SHIPPED, COLUMNS="400"
        )
    rows = doctor_table(done.stdout)
    assert f"API server pid {sim.api_pid} found by command_line" in rows, done.stdout
    stacks = rows["stacks: off (stack dumps in bundles (py-spy))"]
    assert "CAP_SYS_PTRACE" in stacks
    assert "manifests/components/stack-dumps" in stacks
    descriptors = next(line for key, line in rows.items() if key.startswith("descriptors: off"))
    assert "CAP_DAC_READ_SEARCH" in descriptors
    assert "none of the manifests' components" in descriptors
    assert rows["engine_state: on"]


def doctor_rows(target: str, options: tuple[str, ...], path: str) -> dict[str, str]:
    done = run_as_other_user(
        [PYTHON, "-m", "sentinel", "doctor", "--target", target], options, COLUMNS="400", PATH=path
    )
    return doctor_table(done.stdout)


def test_the_stack_dumps_component_turns_stacks_on(other_uid: int, sandbox: Sandbox) -> None:
    """py-spy's capability copy first on PATH: on with the component's settings, off without.

    Without SYS_PTRACE in the bounding set (the base manifest drops every
    capability) exec of a file-capability binary fails with EPERM, so the
    report says stacks are off and why.
    """
    py_spy = find_py_spy()
    assert py_spy is not None
    tool = with_capability(sandbox, py_spy)
    if isinstance(tool, str):
        pytest.skip(f"stack-dumps shape: the capability copy cannot be made here: {tool}")
    path = f"{tool.parent}:/usr/bin:/bin"
    from chaos.ports import free_port

    port = free_port()
    with SimProcess(extra_args=["--port", str(port)]) as sim:
        component = doctor_rows(sim.base_url, FILE_CAPABILITY, path)
        shipped = doctor_rows(sim.base_url, SHIPPED, path)
    assert "stacks: on" in component, component
    assert "cap_sys_ptrace+ep" in component["stacks: on"]
    off = shipped["stacks: off (stack dumps in bundles (py-spy))"]
    assert "bounding set" in off
    assert "manifests/components/stack-dumps" in off
    exec_refused = run_as_other_user([str(tool), "--version"], SHIPPED)
    report(
        "py-spy's capability copy without SYS_PTRACE in the bounding set: exec "
        + ("refused: " + exec_refused.stderr.strip()[-80:] if exec_refused.returncode else "ran")
    )
