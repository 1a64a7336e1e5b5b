"""Telemetry: metrics, logs, Kubernetes Events and the redaction every sink applies.

:mod:`.logging` sets up structlog (and routes every library's stdlib logs
through it), :mod:`.events` is the Kubernetes adapter (the only importer of
the ``kubernetes`` client, loaded when first connecting), :mod:`.metrics`
holds sentinel's own Prometheus series and :mod:`.redact` the one definition
of a secret that every sink applies on its way out.

Importing the package installs the default log configuration (redacted lines
on stderr), so no command can write an unredacted log line to stdout.

The face holds the log and Event names other packages use. Redaction has its
own face, :mod:`sentinel.telemetry.redact` (one home per name); :mod:`.metrics`
is left out: it loads prometheus_client and the canary kinds, which a logger
does not need.
"""

from sentinel.telemetry import logging as logging  # installs the default configuration
from sentinel.telemetry.events import (
    IN_CLUSTER,
    SERVICE_ACCOUNT,
    Connect,
    EventReason,
    EventReporter,
    PodIdentity,
    in_cluster_credentials,
    pod_identity,
)
from sentinel.telemetry.logging import configure_default_logging, configure_logging, get_logger

__all__ = [
    "IN_CLUSTER",
    "SERVICE_ACCOUNT",
    "Connect",
    "EventReason",
    "EventReporter",
    "PodIdentity",
    "configure_default_logging",
    "configure_logging",
    "get_logger",
    "in_cluster_credentials",
    "pod_identity",
]
