"""Canaries: the kind registry, one module per kind, the catalog, the runner and its results."""
