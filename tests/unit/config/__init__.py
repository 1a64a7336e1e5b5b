"""Settings: declarations, loading, flags, renames (sentinel/config)."""
