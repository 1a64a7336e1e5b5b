"""Readings of the target: metrics, processes, small routes (sentinel/evidence)."""
