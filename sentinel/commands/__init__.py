"""One-shot commands beside the daemon: ``sentinel probe`` and ``sentinel demo``."""
