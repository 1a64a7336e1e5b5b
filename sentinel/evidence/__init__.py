"""Evidence adapters: what the inference server's own surfaces say about it.

Each adapter turns one foreign surface (vLLM's ``/metrics``, vLLM's ``/health``,
the processes visible through the shared PID namespace) into sentinel's own
frozen dataclasses and errors. Deciding what the evidence means is the
verdict's job, not theirs. The process vocabulary (roles, states, vLLM's
process patterns) lives here, in :mod:`sentinel.evidence.processes`, and
diagnostics imports it; transport failures are named by
:mod:`sentinel.transport`, shared with the canaries.

The face holds the names other packages use whose modules load nothing beyond
sentinel's own. The pollers and scrapers (httpx, prometheus_client) and the
process readers (psutil) are left out and imported from their modules, so that
a reader of fault-tolerance statuses or compiler processes does not load them.
"""

from sentinel.evidence.compilers import CompileWatch, compilers_under
from sentinel.evidence.ft_status import (
    DEAD,
    HEALTHY,
    KNOWN_STATUSES,
    RECOVERING,
    FtEngine,
    fault_tolerance_flags,
)
from sentinel.evidence.process_access import NEEDS, SERVES, ProcessEvidence
from sentinel.evidence.vllm_releases import recognise

__all__ = [
    "DEAD",
    "HEALTHY",
    "KNOWN_STATUSES",
    "NEEDS",
    "RECOVERING",
    "SERVES",
    "CompileWatch",
    "FtEngine",
    "ProcessEvidence",
    "compilers_under",
    "fault_tolerance_flags",
    "recognise",
]
