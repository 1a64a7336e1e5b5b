"""A stand-in compiler child for the ``compile_step`` fault: a busy process named like one.

vLLM's engine (or its worker) spawns compilers while it compiles a new shape
(``ptxas`` and ``nvcc`` for CUDA graphs and Triton kernels, ``cc1plus`` under
the C++ toolchain of torch inductor, ``ninja`` building extensions); the
engine loop waits on them, taking no step. :func:`start_compiler` starts such
a child: a Python interpreter exec'd through a symlink named after the
compiler, so the kernel's short name (psutil ``name()``) is the compiler's,
running a "source file" that is a busy loop, so ``cmdline()`` reads like a
compiler invocation::

    ['/tmp/sim-compile-x/ptxas', '/tmp/sim-compile-x/kernel.ptx', '-arch=sm_90',
     '-m64', '-O3', '-o', '/tmp/sim-compile-x/kernel.cubin']

The child burns one CPU until killed (or for ``life`` seconds, then exits)
and dies with its parent (PDEATHSIG); it removes its directory as soon as it
runs, so nothing is left behind even when the engine is killed mid-compile.
:class:`CompilerChild` kills and reaps it.

:func:`run_storm` is a Triton autotuning or JIT storm: one short-lived
compiler after another until a deadline, each a new process living well
under a second, as ``ptxas`` does per autotuning config.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time

# What each compiler runs: its "source" file, then the rest of its argv (D: the work dir).
_INVOCATIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "ptxas": ("kernel.ptx", ("-arch=sm_90", "-m64", "-O3", "-o", "{D}/kernel.cubin")),
    "nvcc": ("kernel.cu", ("-O3", "-arch=sm_90", "-c", "-o", "{D}/kernel.o")),
    "cc1plus": ("module.cpp", ("-quiet", "-O3", "-fPIC", "-o", "{D}/module.s")),
    "ninja": ("build.ninja", ("-v", "-j", "1")),
}
COMPILER_NAMES = tuple(_INVOCATIONS)

_BUSY_LOOP = """\
import ctypes, os, shutil, signal, sys, time
try:
    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
except (OSError, AttributeError):
    pass
# Running now: the work dir (symlink, this file) is no longer needed, even if we are killed.
shutil.rmtree(os.path.dirname(os.path.abspath(__file__)), ignore_errors=True)
os.write(1, b"r")
life = float(os.environ.get("SIM_COMPILER_LIFE") or "inf")
end = time.monotonic() + life
x = 0
while time.monotonic() < end:
    for _ in range(10000):
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
sys.exit(0)
"""


class CompilerChild:
    """A running stand-in compiler; :meth:`stop` kills, reaps and cleans it up."""

    def __init__(self, proc: subprocess.Popen[bytes], workdir: str) -> None:
        self.proc = proc
        self.workdir = workdir

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5.0)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_compiler(
    name: str, ready_timeout: float = 5.0, life: float | None = None
) -> CompilerChild:
    """Start a busy child named ``name`` and wait until it runs (its "ready" byte).

    ``life``: it exits by itself after that many seconds of work (None: never).
    """
    source, args = _INVOCATIONS[name]
    workdir = tempfile.mkdtemp(prefix="sim-compile-")
    try:
        program = os.path.join(workdir, name)
        os.symlink(os.path.realpath(sys.executable), program)
        script = os.path.join(workdir, source)
        with open(script, "w", encoding="utf-8") as handle:
            handle.write(_BUSY_LOOP)
        argv = [program, script, *(arg.replace("{D}", workdir) for arg in args)]
        env = {**os.environ, "SIM_COMPILER_LIFE": "" if life is None else repr(life)}
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    child = CompilerChild(proc, workdir)
    assert proc.stdout is not None
    readable, _, _ = select.select([proc.stdout], [], [], ready_timeout)
    if not readable or not proc.stdout.read(1):
        child.stop()
        raise RuntimeError(f"the stand-in {name} child did not start")
    return child


def run_storm(name: str, deadline: float, life: float, gap: float) -> int:
    """Short-lived compilers named ``name``, one after another, until ``deadline``.

    Each works ``life`` seconds and exits; the next starts ``gap`` seconds
    later (an autotuner benchmarking the kernel just built). Returns how many ran.
    """
    ran = 0
    while time.monotonic() < deadline:
        child = start_compiler(name, life=max(0.01, min(life, deadline - time.monotonic())))
        ran += 1
        try:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.proc.wait(timeout=life + 5.0)
        finally:
            child.stop()
        time.sleep(max(0.0, min(gap, deadline - time.monotonic())))
    return ran
