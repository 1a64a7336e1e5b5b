"""Telemetry: metrics, logs, Kubernetes Events and the redaction every sink applies.

Importing the package installs the default log configuration (redacted lines
on stderr), so no command can write an unredacted log line to stdout.
"""

from sentinel.telemetry import logging as logging  # installs the default configuration
