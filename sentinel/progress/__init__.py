"""Progress: completed work read from ``/metrics``, less sentinel's own canaries."""
