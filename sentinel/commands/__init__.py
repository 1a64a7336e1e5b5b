"""One-shot commands beside the daemon: ``sentinel status``, ``probe`` and ``demo``."""
