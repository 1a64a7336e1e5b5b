"""The evaluation: the single writer of health state, and the incidents it opens.

The evaluator (:mod:`.evaluator`) freezes the record into evidence, calls the
verdict and writes the one :class:`HealthState` (:mod:`.health`) that every
view reads; beside it, what is worth a capture (:mod:`.suspicion`,
:mod:`.incidents`), the ``/status`` document (:mod:`.status`), the Events it
announces once (:mod:`.kind_events`, :mod:`.refusal_events`), the node
(:mod:`.node`) and its pace (:mod:`.pace`).

The face is the health state, which the views read (its answers are the
verdict's :class:`~sentinel.verdict.ProbeAnswer`). The evaluator and the
incident recorder are left out and imported from their modules: they load
aiohttp, psutil and the diagnostics, which a reader of health state does not.
"""

from sentinel.evaluation.health import HealthSnapshot, HealthState

__all__ = ["HealthSnapshot", "HealthState"]
