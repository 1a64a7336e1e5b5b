"""The canary kinds, their catalog and their replies (sentinel/canary)."""
