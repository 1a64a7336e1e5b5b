"""Telemetry: sentinel's Prometheus metrics and its structlog configuration."""
