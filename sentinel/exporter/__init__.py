"""``sentinel exporter``: one process probing many inference servers on demand.

blackbox_exporter's convention: Prometheus scrapes ``/probe?target=...&module=...``
and each scrape runs the module's canaries (the daemon's catalog and runner)
against that target once, answering a Prometheus exposition of the outcome.
The exporter keeps only bounded per-target state (the previous probe's work
counters, for progress) and restarts nothing: its verdicts are for alerts.

Modules: :mod:`.config` (the YAML file), :mod:`.allowlist` (the pure
allow/refuse decision), :mod:`.target` (parsing, resolution and the pinned
connection), :mod:`.state` (per-target memory and progress), :mod:`.prober`
(one probe), :mod:`.exposition` (its series), :mod:`.own_metrics` (the
exporter's own ``/metrics``) and :mod:`.server` (HTTP and the command).

The face is the command (:func:`exporter_main` and its arguments), the only
names used outside the package.
"""

from sentinel.exporter.server import add_exporter_arguments, exporter_main

__all__ = ["add_exporter_arguments", "exporter_main"]
