"""Evidence adapters: what the inference server's own surfaces say about it.

Each adapter turns one foreign surface (vLLM's ``/metrics``, vLLM's ``/health``,
the processes visible through the shared PID namespace) into sentinel's own
frozen dataclasses and errors. Deciding what the evidence means is the
verdict's job, not theirs. The process vocabulary (roles, states, vLLM's
process patterns) lives here, in :mod:`sentinel.evidence.processes`, and
diagnostics imports it; transport failures are named by
:mod:`sentinel.transport`, shared with the canaries.
"""
