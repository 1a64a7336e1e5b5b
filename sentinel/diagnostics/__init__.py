"""Hang diagnostics: the evidence a restart would destroy, captured before it happens.

The package owns the diagnostics bundle and everything it is made of:

- ``bundle``: :func:`~sentinel.diagnostics.bundle.capture`, the collector (all
  sections concurrently, under one time budget, never raising);
- ``procs``: the vLLM process tree through psutil (status read first);
- ``stacks``: Python stacks through py-spy (the only user of py-spy);
- ``gpu``: GPU state through NVML (the only importer of nvidia-ml-py);
- ``cgroup``: the container's CPU quota, throttling and OpenMP oversubscription;
- ``redact``: secret removal for bundles and logs;
- ``cause``: the one-line cause class;
- ``store``: one directory per incident, atomic writes, retention;
- ``doctor`` and ``commands``: ``sentinel doctor`` and ``sentinel diagnose``.

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
