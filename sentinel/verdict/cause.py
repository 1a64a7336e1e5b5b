"""The cause a restart did not fix: a hang's kind and where it sat, compared across restarts.

The restart-loop brake counts restarts; that alone cannot tell a server that
hangs now and then from one whose fault survives every restart (a decode that
never runs again until the host reboots, a GPU that fails on its node). A
cause is the confirmed hang kind plus the evidence that says *where*: the
data-parallel engine, the tensor-parallel rank, the path (a path hang is
named after its canary kind). Restarts that each ended in the same cause, as
many as the brake allows, mean a restart does not fix it: the brake then
names the cause and the node, which is where an operator (or their node
remediation) looks next. A different cause after a restart starts the count
again.

The wording of the rule that caught a hang (which window, which evidence came
first) is left out on purpose: the same stuck engine is caught by the frozen
rule in one epoch and by the hang window in the next, depending on when the
samples fell, and that is no different fault.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sentinel.verdict.model import Evidence, Hang, Ineffective
from sentinel.verdict.sections import SectionKey

# The evidence section that holds the node the pod runs on (a str, '' unknown);
# its provider reads the downward API (sentinel.evaluation.node).
SECTION: SectionKey[str] = SectionKey("node", str)
NODE_LIMIT = 253  # a node name is a DNS subdomain: anything longer is not one


def cause_key(hangs: Iterable[Hang]) -> str:
    """``engine``, ``partial engine 1``, ``dead rank 3``, ``structured``; several: ``a + b``."""
    keys = sorted({_one(h) for h in hangs})
    return " + ".join(keys)


def _one(hang: Hang) -> str:
    where = ""
    if hang.engines:
        where += " engine " + ",".join(str(e) for e in sorted(set(hang.engines)))
    if hang.ranks:
        where += " rank " + ",".join(str(r) for r in sorted(set(hang.ranks)))
    return f"{hang.kind}{where}"


def recent(
    restarts: Sequence[float], causes: Sequence[str], window: float, now: float
) -> tuple[tuple[float, ...], tuple[str, ...]]:
    """The restarts within ``window`` of ``now`` and their causes, in order.

    A restart remembered without a cause (a state from before causes were
    kept) has the empty cause, which matches none.
    """
    padded = ("",) * max(0, len(restarts) - len(causes)) + tuple(causes)
    padded = padded[len(padded) - len(restarts) :]
    kept = [(t, c) for t, c in zip(restarts, padded, strict=True) if now - t < window]
    return tuple(t for t, _ in kept), tuple(c for _, c in kept)


def same_cause_restarts(causes: Sequence[str], cause: str) -> int:
    """How many of the latest restarts, in a row, were for ``cause`` (a different one resets)."""
    count = 0
    for earlier in reversed(causes):
        if not cause or earlier != cause:
            break
        count += 1
    return count


def escalation(
    causes: Sequence[str], hangs: Sequence[Hang], evidence: Evidence, brake_max: int
) -> Ineffective | None:
    """The cause restarts did not fix, when the last ``brake_max`` restarts all ended in it."""
    cause = cause_key(hangs)
    count = same_cause_restarts(causes, cause)
    if count < brake_max or count == 0:
        return None
    return Ineffective(cause, count, node_of(evidence))


def node_of(evidence: Evidence) -> str:
    """The pod's node from its section ('' when not told or not a plausible name)."""
    node = evidence.section(SECTION)
    if node is None or len(node) > NODE_LIMIT or not node.isprintable():
        return ""
    return node.strip()


def describe(ineffective: Ineffective) -> str:
    """The words readiness, the log and the Event use: the cause, the count, the node."""
    node = ineffective.node or "unknown (NODE_NAME not set)"
    n = ineffective.restarts
    after = "the last restart" if n == 1 else f"each of the last {n} restarts"
    cause = ineffective.cause
    return f"a restart does not fix this: {cause} came back after {after}; look at node {node}"
