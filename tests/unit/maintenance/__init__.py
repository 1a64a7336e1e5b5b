"""The maintenance window (sentinel/maintenance)."""
