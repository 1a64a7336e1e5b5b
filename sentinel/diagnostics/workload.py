"""What the engine has to do at capture time: requests running, compilers under it.

The cause classifier (:mod:`sentinel.diagnostics.cause`) says "engine blocked"
of a sleeping engine; that is a finding only where the engine has work. An
idle engine sleeps on its input queue, and one compiling a kernel waits on
its compiler child, in exactly the clothes of a blocked one. This module
reads the two facts that tell them apart, for the classifier's rules 4 and 5:
vLLM's ``num_requests_running`` gauge in the newest ``/metrics`` scrape, and
the compiler processes under the engine and its workers
(:func:`sentinel.evidence.compilers.compilers_under`).
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client.parser import text_string_to_metric_families

from sentinel.diagnostics.cause import ProcessObservation
from sentinel.evidence.compilers import compilers_under
from sentinel.evidence.process_model import ProcessRole

RUNNING = "vllm:num_requests_running"
# A capture the daemon takes is triggered by a canary left waiting: work the
# frozen gauge of a hung engine may not show. Only a capture asked for by a
# person knows nothing of the engine's work but what the gauge says.
ON_DEMAND = "on-demand"


def requests_running(metrics_text: Sequence[tuple[float, str]]) -> float | None:
    """The requests running in the newest scrape, over every engine (None: not reported)."""
    if not metrics_text:
        return None
    _, text = metrics_text[-1]
    # Only the gauge's own lines are parsed: the whole exposition can be tens of MB.
    lines = [line for line in text.splitlines() if line.startswith((RUNNING + "{", RUNNING + " "))]
    if not lines:
        return None
    try:
        samples = [
            sample.value
            for family in text_string_to_metric_families("\n".join(lines) + "\n")
            for sample in family.samples
            if sample.name == RUNNING
        ]
    except ValueError:
        return None
    return sum(samples) if samples else None


def compilers_of(observations: Sequence[ProcessObservation]) -> tuple[str, ...]:
    """The compiler processes under the engine and its workers, each described."""
    roots = [o.pid for o in observations if o.role in (ProcessRole.ENGINE_CORE, ProcessRole.WORKER)]
    return tuple(c.describe() for c in compilers_under(roots))


def engine_work(
    trigger_kind: str,
    observations: Sequence[ProcessObservation],
    metrics_text: Sequence[tuple[float, str]],
) -> tuple[float | None, tuple[str, ...]]:
    """(requests running, or None where a waiting canary is the evidence; compilers)."""
    running = requests_running(metrics_text) if trigger_kind == ON_DEMAND else None
    return running, compilers_of(observations)
