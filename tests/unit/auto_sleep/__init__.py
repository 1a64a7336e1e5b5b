"""Idle auto-sleep: the canary hold, its section, the flags and the wake (sentinel/auto_sleep)."""
