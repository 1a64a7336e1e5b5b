"""``sentinel inject``: sentinel added to (or checked for in) every vLLM pod of a YAML stream.

Like ``linkerd inject``: any workload of any name, stdin to stdout, so it serves as
a Helm post-renderer. What it adds is read from the sidecar component's own patch,
shipped beside this module, so the component and the command cannot drift apart.

:mod:`.command` runs it over :mod:`.workloads` (where the pods are),
:mod:`.pods` (one pod injected or checked) and :mod:`.sidecar` (what is
added). The face is the parser's side only: :func:`add_inject_arguments`.
``inject_main`` loads ruamel.yaml, which building ``sentinel``'s parser must
not, so it is imported from :mod:`.command`.
"""

from sentinel.inject.arguments import add_inject_arguments

__all__ = ["add_inject_arguments"]
