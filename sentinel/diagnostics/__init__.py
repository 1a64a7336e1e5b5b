"""Hang diagnostics: the evidence a restart would destroy, captured before it happens.

The package owns the diagnostics bundle, everything it is made of, and the
commands that read a pod's setup:

- capture: :mod:`.bundle` (the collector: all sections concurrently, under one
  time budget, never raising), run in a child process by :mod:`.child`
  (``python -m sentinel.diagnostics``), stored by :mod:`.store` (one directory
  per incident, atomic writes, retention);
- sections: :mod:`.procs` (the process tree through psutil), :mod:`.stacks`
  (py-spy, its only user), :mod:`.gpu` (NVML, the only importer of
  nvidia-ml-py), :mod:`.cgroup` (CPU quota, throttling, OpenMP
  oversubscription), :mod:`.watchdog` (vLLM's own stall dumps),
  :mod:`.window` (recent ``/metrics`` samples), :mod:`.workload` (what the
  engine had to do), :mod:`.access` (what could not be read, and why), with
  :mod:`.sections` and :mod:`.sizes` bounding what is kept;
- reading a bundle: :mod:`.cause` (the one-line cause class), :mod:`.stuck`
  (which engine or rank), :mod:`.headline`, :mod:`.summary` and
  :mod:`.timeline` (``timeline.png``);
- commands: :mod:`.commands` (``sentinel diagnose`` and ``sentinel doctor``),
  :mod:`.doctor`, :mod:`.doctor_kinds`, :mod:`.checkup` and :mod:`.running`.

The face holds :func:`find_py_spy` only. Every other name others use (the
collector, the store, the child, the commands, the sample window) stays at its
module: importing it loads psutil, prometheus_client, httpx or the canary
catalog, and the face is run by every import of the package, the light
:mod:`.stacks` among them.

Stack dumps and permissions
---------------------------
py-spy reads the memory of another process, which the kernel allows to a
process holding ``CAP_SYS_PTRACE``; without it, only to one with the same uid,
and under Yama ``ptrace_scope`` 1 (the default on most nodes) only to an
ancestor, which a sidecar never is.
Three things must hold in a pod:

1. ``shareProcessNamespace: true``, so vLLM's processes are visible at all.
2. The sentinel container adds the capability:
   ``securityContext.capabilities.add: ["SYS_PTRACE"]``.
3. When sentinel runs as a non-root user (the usual hardened setup), a
   capability in the container's bounding set is not in the process's
   effective set, so the py-spy binary itself must carry it as a *file
   capability*, set when the image is built::

       setcap cap_sys_ptrace+ep "$(command -v py-spy)"

   ``allowPrivilegeEscalation: false`` sets no_new_privs, which stops a file
   capability from being gained on exec, so that container must leave it
   true; the capability must still be added as in 2. Running as root with the
   capability added needs no file capability.

Without these, a bundle is still written: every dump says why it failed
(``py-spy exited 1: Permission denied``), and the process, GPU, cgroup,
metrics and canary sections are unaffected. Reading another process's
``/proc/PID/environ`` (for ``OMP_NUM_THREADS``) needs the same access; a
non-readable environment is reported as unknown.
"""

from sentinel.diagnostics.stacks import find_py_spy

__all__ = ["find_py_spy"]
