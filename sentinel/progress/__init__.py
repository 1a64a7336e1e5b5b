"""Progress: completed work read from ``/metrics``, less sentinel's own canaries.

:mod:`.tracker` turns successive samples into "did the engine complete
work?", over the counters of :mod:`.work`, less what sentinel's own canaries
caused (:mod:`.own`), with a long prefill (:mod:`.prefill`) and real traffic
on a canary's path (:mod:`.path_traffic`) counted as work.

The face is empty on purpose: the tracker loads prometheus_client and httpx,
the path traffic the canary kinds (PIL, jsonschema), and neither of their
users needs the other, so each name is imported from its module.
"""

__all__: list[str] = []
