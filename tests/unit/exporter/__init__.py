"""The multi-target exporter (sentinel/exporter)."""
