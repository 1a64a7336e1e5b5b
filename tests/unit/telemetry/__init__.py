"""Metrics, logs and redaction (sentinel/telemetry)."""
