"""Which data-parallel engine or tensor-parallel rank a bundle is about.

A hang reason names the stuck engine or rank (``engine 1``, ``TP rank 1``,
made by the verdict and the process vocabulary); a bundle carries only that
reason, so it is read back here (:func:`~sentinel.evidence.process_model.named_placements`)
to point the cause classifier at the stuck engine's processes and to name
the engine and rank in the bundle and its summary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sentinel.diagnostics.cause import ProcessObservation
from sentinel.evidence.process_model import GONE_STATES, Placement, ProcessState


def of_stuck_engines(
    observations: list[ProcessObservation], engines: Sequence[int]
) -> list[ProcessObservation]:
    """The processes of the engines a trigger names stuck, when any is visible; else all.

    A partial hang stops nothing: the classifier would otherwise judge the
    busiest engine, which is the one still serving, not the stuck one.
    A process stopped or gone elsewhere still comes first.
    """
    if not engines:
        return observations
    own = [
        o
        for o in observations
        if Placement.from_title(o.title).engine in engines
        or o.status in GONE_STATES
        or o.status is ProcessState.STOPPED
    ]
    return own or observations


def stuck_json(
    named: Mapping[str, list[int]], observations: Sequence[ProcessObservation], pid: int | None
) -> dict[str, list[int]]:
    """Engines and ranks named by the trigger's reason and by the cause's process title."""
    engines, ranks = list(named.get("engine", [])), list(named.get("tp_rank", []))
    for o in observations:
        if o.pid != pid:
            continue
        placement = Placement.from_title(o.title)
        if placement.engine is not None and placement.engine not in engines:
            engines.append(placement.engine)
        if placement.tp_rank is not None and placement.tp_rank not in ranks:
            ranks.append(placement.tp_rank)
    return {"engines": engines, "tp_ranks": ranks}


def stuck_lines(stuck: Any) -> list[str]:
    """``stuck     engine 1, TP rank 1``, or nothing when no engine or rank is named."""
    if not isinstance(stuck, dict):
        return []
    words = [f"engine {e}" for e in stuck.get("engines") or []]
    words += [f"TP rank {r}" for r in stuck.get("tp_ranks") or []]
    return [f"stuck     {', '.join(words)}"] if words else []
