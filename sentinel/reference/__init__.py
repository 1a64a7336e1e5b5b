"""The generated references: documentation tooling that reads the daemon, never part of it.

Each ``docs/`` page that is generated (configuration, metrics, verdict,
layout) is built here from the code it describes. The generators read the
settings, the metrics' collectors and the rule registry, so they sit above
every runtime package: nothing in sentinel imports them, and the runtime
packages stay free to be layered one way (``.importlinter``).
``python -m sentinel.reference`` writes them; a unit test fails on drift.
"""

from sentinel.reference.documents import DOCS, REFERENCES

__all__ = ["DOCS", "REFERENCES"]
