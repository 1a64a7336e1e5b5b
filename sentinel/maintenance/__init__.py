"""The maintenance window: its state and token, its endpoint and ``sentinel maintenance``."""
