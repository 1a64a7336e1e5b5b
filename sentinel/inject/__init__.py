"""``sentinel inject``: sentinel added to (or checked for in) every vLLM pod of a YAML stream.

Like ``linkerd inject``: any workload of any name, stdin to stdout, so it serves as
a Helm post-renderer. What it adds is read from the sidecar component's own patch,
shipped beside this module, so the component and the command cannot drift apart.
"""
